"""Breakdowns by hand on a toy dataset, and the invariant that groups partition the overall metrics."""
import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader

from genrec.data.batch import EvalSequences, collate
from genrec.data.preprocess import PreprocessConfig, build_sequences
from genrec.data.schema import InteractionLog
from genrec.eval.breakdown import RankedUsers, breakdowns, bucket_names, bucketize, group_metrics, rank_users
from genrec.eval.metrics import evaluate


def test_bucket_names_and_bucketize_by_hand():
    assert bucket_names([5, 10, 20]) == ["≤5", "6–10", "11–20", ">20"]
    assert bucket_names([0, 1, 5]) == ["0", "1", "2–5", ">5"]
    assert bucketize(np.array([0, 1, 2, 5, 6, 100]), [0, 1, 5]).tolist() == [0, 1, 2, 2, 3, 3]
    with pytest.raises(ValueError, match="strictly increasing"):
        bucketize(np.array([1]), [5, 5])


def test_groups_partition_the_overall_metrics():
    rng = np.random.default_rng(0)
    ranks = rng.integers(0, 60, 500)
    ranks[:20] = 50  # removed targets (rank = num_columns)
    ranked = RankedUsers(ranks, rng.integers(1, 50, 500), rng.integers(1, 40, 500), 50, {})
    groups = bucketize(ranked.history_lengths, [5, 20])
    by_group = group_metrics(ranked, groups, bucket_names([5, 20]), (5, 10))
    overall = group_metrics(ranked, np.zeros(500, dtype=np.int64), ["all"], (5, 10))["all"]
    assert sum(g["users"] for g in by_group.values()) == 500
    for metric in ("recall@5", "ndcg@10", "mrr"):
        weighted = sum(g["users"] * g[metric] for g in by_group.values()) / 500
        assert weighted == pytest.approx(overall[metric])


@pytest.fixture()
def data():
    # training parts (sequence minus the last two): u0 [1,2,3], u1 [1,2], u2 [4,2,3,1]; item 5 never trained on
    seqs = {"u0": [1, 2, 3, 4, 5], "u1": [1, 2, 5, 4], "u2": [4, 2, 3, 1, 3, 5]}
    rows = [(u, i) for u, s in seqs.items() for i in s]
    return build_sequences(InteractionLog("toy", pd.DataFrame(rows, columns=["user", "item"])),
                           PreprocessConfig(1, 1, dedupe=False))


def test_breakdowns_by_hand(data):
    loader = DataLoader(EvalSequences(data, 10, "test"), batch_size=2, collate_fn=collate)
    popularity = torch.tensor([0.0, 3, 3, 2, 1, 0])  # a most-popular scorer over the training counts above

    def score(batch):
        return popularity.expand(batch.batch_size, -1).clone()

    ranked = rank_users(score, loader, (1, 3), exclude_history=True)
    assert ranked.metrics == pytest.approx(evaluate(score, loader, (1, 3), True))
    # test targets: u0 -> 5 (history 4 items), u1 -> 4 (3 items), u2 -> 5 (5 items)
    assert ranked.targets.tolist() == [5, 4, 5] and ranked.history_lengths.tolist() == [4, 3, 5]
    out = breakdowns(ranked, data, (1, 3), history_edges=[3], popularity_edges=[0, 1], cold_max_count=0)
    assert {g: v["users"] for g, v in out["history_length"].items()} == {"≤3": 1, ">3": 2}
    # item 5: 0 training interactions (u0, u2), item 4: 1 (u2's training part)
    assert {g: v["users"] for g, v in out["target_popularity"].items()} == {"0": 2, "1": 1, ">1": 0}
    assert {g: v["users"] for g, v in out["cold_items"].items()} == {"cold ≤0": 2, "warm >0": 1}
    # u1 saw 1, 2, 5: ranking 3 (score 2), 4 (score 1) -> target 4 at rank 1; u0 and u2 saw everything but 5,
    # which scores 0 -> rank 0 of the remaining item
    assert ranked.ranks.tolist() == [0, 1, 0]
    assert out["cold_items"]["cold ≤0"]["recall@1"] == 1.0 and out["cold_items"]["warm >0"]["recall@1"] == 0.0
