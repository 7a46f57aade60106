"""Ranking metrics against hand-computed values."""
import math

import pytest
import torch

from genrec.data.batch import JaggedBatch
from genrec.eval.metrics import Evaluator, RankingMetrics, remove_seen, target_ranks

NEG = float("-inf")


def test_target_ranks_by_hand():
    scores = torch.tensor([[NEG, 0.9, 0.1, 0.5, 0.3],   # target 3: only item 1 is higher -> rank 1
                           [NEG, 0.2, 0.2, 0.2, 0.2],   # all tied, target 3: items 1, 2 come first -> rank 2
                           [NEG, 0.1, 0.8, 0.3, 0.4]])  # target 2 is the best -> rank 0
    assert target_ranks(scores, torch.tensor([3, 3, 2])).tolist() == [1, 2, 0]


def test_removed_target_is_never_a_hit():
    scores = torch.tensor([[NEG, 0.5, NEG]])
    assert target_ranks(scores, torch.tensor([2])).tolist() == [3]
    metrics = RankingMetrics(ks=(1, 3))
    metrics.update(target_ranks(scores, torch.tensor([2])), num_items=3)
    assert metrics.compute() == {"recall@1": 0.0, "ndcg@1": 0.0, "recall@3": 0.0, "ndcg@3": 0.0, "mrr": 0.0}


def test_metric_values_by_hand():
    metrics = RankingMetrics(ks=(1, 5))
    metrics.update(torch.tensor([0, 3, 7]), num_items=100)
    got = metrics.compute()
    # recall@1: one hit of three; recall@5: ranks 0 and 3; ndcg@5 = (1/log2(2) + 1/log2(5)) / 3
    assert got["recall@1"] == pytest.approx(1 / 3)
    assert got["recall@5"] == pytest.approx(2 / 3)
    assert got["ndcg@1"] == pytest.approx(1 / 3)
    assert got["ndcg@5"] == pytest.approx((1 + 1 / math.log2(5)) / 3)
    assert got["mrr"] == pytest.approx((1 + 1 / 4 + 1 / 8) / 3)


def test_accumulates_over_batches_like_one_batch():
    ranks = torch.tensor([0, 5, 2, 9, 1, 30])
    one, two = RankingMetrics((3, 10)), RankingMetrics((3, 10))
    one.update(ranks, 50)
    two.update(ranks[:2], 50)
    two.update(ranks[2:], 50)
    assert one.compute() == pytest.approx(two.compute())


def _eval_batch(seen: list[list[int]], targets: list[int]) -> JaggedBatch:
    lengths = torch.tensor([len(s) for s in seen])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    flat = torch.tensor([i for s in seen for i in s], dtype=torch.long)
    return JaggedBatch(item_ids=flat, offsets=offsets, target_ids=torch.tensor(targets),
                       user_ids=torch.arange(len(seen)), seen_ids=flat, seen_offsets=offsets)


def test_remove_seen_masks_history_and_padding():
    batch = _eval_batch([[1, 2], [3]], [3, 1])
    scores = remove_seen(torch.ones(2, 5), batch)
    assert torch.isinf(scores).tolist() == [[True, True, True, False, False], [True, False, False, True, False]]


def test_evaluator_history_removal_changes_rank():
    batch = _eval_batch([[1], [2]], [3, 3])
    scores = torch.tensor([[0.0, 0.9, 0.1, 0.5, 0.3]]).repeat(2, 1)
    with_removal = Evaluator(ks=(1,), exclude_history=True)
    ranks = with_removal.update(scores.clone(), batch)
    assert ranks.tolist() == [0, 1]  # user 0 saw item 1 (removed) -> target first; user 1 still has item 1 ahead
    without = Evaluator(ks=(1,), exclude_history=False)
    assert without.update(scores.clone(), batch).tolist() == [1, 1]


def test_merged_shards_equal_one_pass_over_all_users():
    """Per-process sums merged by a sum over processes give the metrics of all users in one process (not the
    mean of per-process means, which weights unequal shards wrongly)."""
    ranks = torch.tensor([0, 4, 12, 1, 30, 2, 9])
    whole = RankingMetrics(ks=(1, 5))
    whole.update(ranks, num_items=50)
    shards = [RankingMetrics(ks=(1, 5)) for _ in range(2)]
    shards[0].update(ranks[:2], num_items=50)
    shards[1].update(ranks[2:], num_items=50)
    local = [torch.tensor([s.count, *s.sums.values()], dtype=torch.float64) for s in shards]
    for s in shards:
        s.merge(lambda totals: local[0] + local[1])
        assert s.count == 7
        assert s.compute() == pytest.approx(whole.compute(), abs=1e-12)
