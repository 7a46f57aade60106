"""genrec/eval/cold_start.py by hand: TIGER's ε slots, restriction to some items, the beam among the unseen items'
semantic IDs, and metrics split by cold target."""
import numpy as np
import pytest
import torch

from genrec.eval.breakdown import RankedUsers
from genrec.eval.cold_start import (among, cold_split_metrics, reserve_share, reserved_slots,
                                     unseen_items_beam, unseen_items_by_first_code)
from genrec.models.sasrec import SASRec
from genrec.models.sid_generator import SIDGenerator
from genrec.models.trie import PrefixTrie
from tests.generative.helpers import eval_batch, make_table

INF = float("-inf")


def test_reserved_slots_are_evenly_spaced_block_ends():
    assert reserved_slots(20, 0.1) == [9, 19] and reserved_slots(20, 0.05) == [19]
    assert reserved_slots(20, 0.2) == [4, 9, 14, 19] and reserved_slots(10, 0.0) == []


def test_reserve_share_fills_its_slots_from_the_reserved_ranking_and_the_rest_in_order():
    """k = 5, ε = 0.4: ranks 3 and 5 (0-based 2 and 4) hold the reserved ranking's best two; an item both
    rankings hold is listed once; a row with one reserved candidate gives its second slot back to the primary."""
    primary = torch.tensor([[INF, 9., 8., 7., 6., 5., 4., INF],
                            [INF, 1., 2., 3., 4., 5., 6., INF]])
    reserved = torch.tensor([[INF, INF, INF, INF, INF, INF, 2., 3.],   # item 7 first, then 6
                             [INF, INF, INF, INF, INF, INF, INF, 1.]])  # only item 7
    out = reserve_share(primary, reserved, 0.4, 5)
    order = [[int(i) for i in row.argsort(descending=True)[:int(torch.isfinite(row).sum())]] for row in out]
    assert order[0] == [1, 2, 7, 3, 6]
    assert order[1] == [6, 5, 7, 4, 3]
    assert out[0, 7] == 3 and out[0, 1] == 5 and (out[0, [0, 4, 5]] == INF).all()


def test_among_keeps_the_allowed_columns_only():
    scores = torch.arange(6.).view(2, 3)
    out = among(scores, torch.tensor([False, True, True]))
    assert out.tolist() == [[INF, 1., 2.], [INF, 4., 5.]] and scores[0, 0] == 0


@pytest.mark.parametrize("model_beam, beam", [(10, None), (4, 10)])
def test_the_unseen_items_beam_returns_only_those_items_by_code_log_probability(model_beam, beam):
    """A beam over the unseen items' trie returns exactly their top items by teacher-forced code log-probability
    (a beam as wide as the set keeps every prefix: the model's own, or one given wider than the model's), never one
    of the user's history."""
    table = make_table(40, (4, 5, 3))
    torch.manual_seed(0)
    model = SIDGenerator(table, SASRec(dim=16, num_layers=1, num_heads=2, max_len=40, dropout=0.0), beam=model_beam,
                         top_k=4).eval()
    unseen = torch.tensor([3, 8, 11, 17, 22, 29, 31, 36, 38, 40])
    trie = PrefixTrie(model.sids.codes[unseen], model.sids.codebook_sizes)
    batch = eval_batch([[1, 2, 3], [8, 5], [12]])
    found = unseen_items_beam(model, batch, trie, beam)
    with torch.no_grad():
        exact = model.item_log_probs(batch, unseen.expand(3, -1))
    for user, history in enumerate([[1, 2, 3], [8, 5], [12]]):
        allowed = [(float(s), int(i)) for s, i in zip(exact[user], unseen) if int(i) not in history]
        best = sorted(allowed, reverse=True)[:4]
        assert found.items[user].tolist() == [i for _, i in best]
        assert found.scores[user].tolist() == pytest.approx([s for s, _ in best], abs=1e-5)


def test_cold_split_metrics_partition_the_users():
    ranks = np.array([0, 3, 40, 1, 12])
    targets = np.array([5, 7, 5, 9, 2])
    ranked = RankedUsers(ranks, targets, np.zeros(5), 50, {"recall@10": 0.6})
    out = cold_split_metrics(ranked, np.array([5, 9]), (10,))
    assert out["cold"]["users"] == 3 and out["cold"]["recall@10"] == pytest.approx(2 / 3)
    assert out["warm"]["users"] == 2 and out["warm"]["recall@10"] == pytest.approx(1 / 2)
    assert out["all"] == {"users": 5, "recall@10": 0.6}


def test_the_cold_items_by_first_code_are_ordered_by_the_first_level_then_the_second():
    """Per-level log-probabilities add up to the item's code log-probability, the first is the decoder's start
    distribution, and the ranking sorts the unseen items by (first level, second level), the history left out."""
    table = make_table(40, (2, 5, 5))  # two first codes: many items share one
    torch.manual_seed(0)
    model = SIDGenerator(table, SASRec(dim=16, num_layers=1, num_heads=2, max_len=40, dropout=0.0), beam=10,
                         top_k=4).eval()
    unseen = torch.tensor([3, 8, 11, 17, 22, 29, 31, 36, 38, 40])
    histories = [[1, 2, 3], [8, 5], [12]]
    batch = eval_batch(histories)
    with torch.no_grad():
        levels = model.first_levels_log_probs(batch, unseen.expand(3, -1), 3)
        assert levels.sum(2) == pytest.approx(model.item_log_probs(batch, unseen.expand(3, -1)), abs=1e-5)
        start = model.decoder(batch).start()
        assert levels[..., 0] == pytest.approx(start[:, model.sids.codes[unseen, 0]], abs=1e-6)
        scores = unseen_items_by_first_code(model, batch, unseen)
    assert len({round(float(v), 6) for v in levels[0, :, 0]}) == 2  # ties on the first level to break
    for user, history in enumerate(histories):
        keys = {int(i): (float(levels[user, m, 0]), float(levels[user, m, 1])) for m, i in enumerate(unseen)}
        expected = sorted((i for i in keys if i not in history), key=lambda i: keys[i], reverse=True)
        listed = scores[user].argsort(descending=True)[:len(expected)].tolist()
        assert listed == expected
        assert torch.isinf(scores[user]).sum() == model.num_items + 1 - len(expected)
