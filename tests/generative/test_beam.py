"""Beam search over semantic IDs against exhaustive enumeration, with a decoder whose log-probabilities are a
fixed random table per user and prefix (so every tuple's exact score is known); the same beam steered by an item
distribution (:class:`GuidedDecoder`)."""
import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from genrec.eval.metrics import Evaluator
from genrec.models.beam import GuidedDecoder, beam_search
from genrec.models.semantic_ids import SemanticIDs
from genrec.models.trie import BruteForceConstraint, PrefixTrie
from tests.generative.helpers import eval_batch, make_table

SIZES = (4, 5, 3)


class TableDecoder:
    """``logits[l]`` is ``(B, prod(K_<l), K_l)``: user ``b``'s next-code logits after the prefix with key ``p``."""

    def __init__(self, logits: list[torch.Tensor]):
        self.logits, self.sizes = logits, [t.shape[2] for t in logits]

    def start(self):
        self.users = torch.arange(self.logits[0].shape[0])
        self.keys = torch.zeros_like(self.users)
        return F.log_softmax(self.logits[0][self.users, 0], -1)

    def select(self, rows):
        self.users, self.keys = self.users[rows], self.keys[rows]

    def step(self, codes, level):
        self.keys = self.keys * self.sizes[level] + codes
        return F.log_softmax(self.logits[level + 1][self.users, self.keys], -1)


def _logits(batch: int, sizes=SIZES, seed=0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, int(np.prod(sizes[:level])), k, generator=g) * 2 for level, k in enumerate(sizes)]


def _exact_scores(logits: list[torch.Tensor], tuples: torch.Tensor) -> torch.Tensor:
    """``(B, M)`` exact log-probability of every tuple ``(M, L)`` for every user."""
    total, keys = torch.zeros(logits[0].shape[0], len(tuples)), torch.zeros(len(tuples), dtype=torch.long)
    for level, table in enumerate(logits):
        total += F.log_softmax(table[:, keys], -1)[:, torch.arange(len(tuples)), tuples[:, level]]
        keys = keys * table.shape[2] + tuples[:, level]
    return total


def _setup(num_items=40, batch=3):
    table = make_table(num_items, SIZES)
    sids = SemanticIDs(table)
    return sids, PrefixTrie(sids.codes[1:], SIZES), _logits(batch)


@pytest.mark.parametrize("top_k", [1, 5, 40])
def test_wide_beam_equals_exhaustive_enumeration(top_k):
    sids, trie, logits = _setup()
    result = beam_search(TableDecoder(logits), sids, beam=40, top_k=top_k, trie=trie)
    exact = _exact_scores(logits, sids.codes[1:])  # (B, N): item i + 1 in column i
    scores, order = exact.sort(dim=1, descending=True, stable=True)
    assert torch.equal(result.items, order[:, :top_k] + 1)
    assert torch.allclose(result.scores, scores[:, :top_k], atol=1e-5)
    assert torch.equal(result.codes, sids.codes[result.items])
    assert not result.invalid.any()


def test_renormalized_scores_are_a_distribution_over_the_items():
    """Renormalised over the allowed codes at every level, the item probabilities sum to 1 (raw: the mass on
    tuples that are no item is missing), and no item's probability falls."""
    sids, trie, logits = _setup()
    raw = beam_search(TableDecoder(logits), sids, beam=40, top_k=40, trie=trie)
    renormalized = beam_search(TableDecoder(logits), sids, beam=40, top_k=40, trie=trie, renormalize=True)
    assert torch.allclose(renormalized.scores.logsumexp(1), torch.zeros(3), atol=1e-5)
    assert (raw.scores.logsumexp(1) < -0.01).all()
    items = torch.arange(1, 41)
    assert (renormalized.score_matrix(41)[:, items] >= raw.score_matrix(41)[:, items] - 1e-6).all()
    with pytest.raises(ValueError, match="renormalize needs a trie"):
        beam_search(TableDecoder(logits), sids, beam=40, top_k=40, renormalize=True)


def test_narrow_beam_returns_valid_items_with_their_exact_scores():
    sids, trie, logits = _setup()
    result = beam_search(TableDecoder(logits), sids, beam=4, top_k=4, trie=trie)
    exact = _exact_scores(logits, sids.codes[1:])
    assert (result.items > 0).all()
    assert torch.allclose(result.scores, exact.gather(1, result.items - 1), atol=1e-5)
    assert (result.scores[:, :-1] >= result.scores[:, 1:]).all()  # best first
    assert (exact.max(1).values >= result.scores[:, 0] - 1e-6).all()  # never better than the best item


def test_history_is_removed_in_the_last_step():
    sids, trie, logits = _setup()
    histories = [[1, 2, 3, 4, 5, 6, 7, 8], [10, 20], [40]]
    batch = eval_batch(histories)
    result = beam_search(TableDecoder(logits), sids, beam=40, top_k=10, trie=trie,
                         seen=(batch.seen_ids, batch.seen_offsets))
    exact = _exact_scores(logits, sids.codes[1:])
    for b, seen in enumerate(histories):
        exact[b, torch.tensor(seen) - 1] = float("-inf")
    assert torch.equal(result.items, exact.sort(dim=1, descending=True, stable=True).indices[:, :10] + 1)


def test_unconstrained_beam_enumerates_every_tuple_and_flags_invalid_ones():
    sids, _, logits = _setup()
    every = torch.tensor(list(itertools.product(*[range(k) for k in SIZES])))
    result = beam_search(TableDecoder(logits), sids, beam=len(every), top_k=len(every), trie=None)
    exact = _exact_scores(logits, every)
    scores, order = exact.sort(dim=1, descending=True, stable=True)
    assert torch.equal(result.codes, every[order])
    assert torch.allclose(result.scores, scores, atol=1e-5)
    assert int(result.invalid.sum(1)[0]) == len(every) - sids.num_items  # every tuple that is no item
    assert torch.equal(result.items, sids.item_of(result.codes))


def test_fewer_items_than_top_k_are_padded_as_not_found():
    sids, trie, logits = _setup(num_items=3)
    result = beam_search(TableDecoder(logits), sids, beam=8, top_k=8, trie=trie)
    assert (result.found.sum(1) == 3).all() and (result.items[:, 3:] == 0).all()
    assert torch.equal(result.items[:, :3].sort(1).values, torch.tensor([[1, 2, 3]] * 3))


def test_score_matrix_ranks_exactly_the_returned_list():
    sids, trie, logits = _setup()
    result = beam_search(TableDecoder(logits), sids, beam=10, top_k=5, trie=trie)
    targets = torch.stack([result.items[0, 0], result.items[1, 3], torch.tensor(0)])  # rank 0, rank 3, missed
    missing = next(i for i in range(1, 41) if i not in result.items[2].tolist())
    targets[2] = missing
    batch = eval_batch([[0], [0], [0]], targets.tolist())
    batch.seen_ids = torch.zeros(0, dtype=torch.long)
    batch.seen_offsets = torch.zeros(4, dtype=torch.long)
    evaluator = Evaluator(ks=(1, 5))
    ranks = evaluator.update(result.score_matrix(sids.num_items + 1), batch)
    assert ranks.tolist() == [0, 3, sids.num_items + 1]
    metrics = evaluator.compute()
    assert metrics["recall@5"] == pytest.approx(2 / 3) and metrics["mrr"] == pytest.approx((1 + 1 / 4) / 3)


def test_top_k_above_beam_is_refused():
    sids, trie, logits = _setup()
    with pytest.raises(ValueError, match="top_k"):
        beam_search(TableDecoder(logits), sids, beam=4, top_k=5, trie=trie)


def test_brute_force_constraint_decodes_like_the_trie():
    sids, trie, logits = _setup()
    naive = BruteForceConstraint(sids.codes[1:], SIZES)
    for beam in (3, 10):
        a = beam_search(TableDecoder(logits), sids, beam=beam, top_k=3, trie=trie)
        b = beam_search(TableDecoder(logits), sids, beam=beam, top_k=3, trie=naive)
        assert torch.equal(a.items, b.items) and torch.equal(a.scores, b.scores)


def _item_log_probs(batch: int, num_items: int, seed=1) -> torch.Tensor:
    """``(B, num_items + 1)`` a random distribution over the items (padding column 0: ``-inf``)."""
    logits = torch.randn(batch, num_items + 1, generator=torch.Generator().manual_seed(seed)) * 2
    logits[:, 0] = float("-inf")
    return F.log_softmax(logits, dim=1)


@pytest.mark.parametrize("code_weight", [0.0, 0.5, 1.0])
def test_wide_guided_beam_ranks_every_unseen_item_by_weighted_code_plus_item_log_probability(code_weight):
    """A beam that keeps every prefix returns the exhaustive ranking by ``w x code + item`` log-probability; at
    ``w = 0`` that is the item distribution's own top items."""
    sids, trie, logits = _setup()
    histories = [[1, 2, 3], [10], [40, 7]]
    batch = eval_batch(histories)
    items = _item_log_probs(3, sids.num_items)
    for b, seen in enumerate(histories):
        items[b, seen] = float("-inf")
    decoder = GuidedDecoder(TableDecoder(logits), trie, trie.prefix_log_mass(items), code_weight)
    result = beam_search(decoder, sids, beam=40, top_k=10, trie=trie, seen=(batch.seen_ids, batch.seen_offsets))
    exact = code_weight * _exact_scores(logits, sids.codes[1:]) + items[:, 1:]
    scores, order = exact.sort(dim=1, descending=True, stable=True)
    assert torch.equal(result.items, order[:, :10] + 1)
    assert torch.allclose(result.scores, scores[:, :10], atol=1e-5)
    if code_weight == 0:
        assert torch.equal(result.items, items.topk(10, dim=1).indices)


def test_guided_beam_of_one_follows_the_item_mass_not_the_first_code():
    """All item mass on one item whose first code the code model likes least: the plain beam of one never reaches
    it, the guided beam of one does (at any code weight, since its prefix keeps almost all the mass)."""
    sids, trie, logits = _setup(batch=1)
    first = F.log_softmax(logits[0][0, 0], -1)
    target = next(i for i in range(1, 41) if int(sids.codes[i, 0]) == int(first.argmin()))
    items = torch.full((1, 41), -30.0)
    items[0, 0], items[0, target] = float("-inf"), 0.0
    items = F.log_softmax(items, dim=1)
    plain = beam_search(TableDecoder(logits), sids, beam=1, top_k=1, trie=trie)
    assert int(sids.codes[plain.items[0, 0], 0]) == int(first.argmax()) != int(first.argmin())
    for code_weight in (0.0, 1.0):
        guided = beam_search(GuidedDecoder(TableDecoder(logits), trie, trie.prefix_log_mass(items), code_weight),
                             sids, beam=1, top_k=1, trie=trie)
        assert guided.items.tolist() == [[target]]
