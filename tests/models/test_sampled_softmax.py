"""The sampled softmax of HSTU's training step: the fused candidate scores equal the gathered ones (values and
gradients), the loss gathered from the whole table equals the loss over looked-up rows, and the per-position loss
equals Meta's reference (its own code, from ../shared/peers) in value and gradients on the same negatives."""
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from genrec.models.losses import SampledSoftmaxLoss
from genrec.ops.hstu import causal_weight, fused_pointwise_attention, pointwise_attention
from genrec.ops.sampled_softmax import sampled_logits

PEER = Path(__file__).resolve().parents[2].parent / "shared" / "peers" / "meta-generative-recommenders"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sampled_logits_equal_the_gathered_products_with_gradients(dtype):
    torch.manual_seed(0)
    queries = torch.randn(300, 8, dtype=dtype, requires_grad=True)
    table = torch.randn(41, 8, dtype=dtype, requires_grad=True)
    candidates = torch.randint(0, 41, (300, 17))
    candidates[:, 3] = candidates[:, 4]  # a row may repeat a candidate
    weights = torch.randn(300, 17, dtype=dtype)
    got = sampled_logits(queries, table, candidates)
    grads = torch.autograd.grad((got * weights).sum(), (queries, table))
    expected = torch.einsum("md,mkd->mk", queries, table[candidates])
    expected_grads = torch.autograd.grad((expected * weights).sum(), (queries, table))
    tol = 1e-12 if dtype == torch.float64 else 1e-4
    assert got.dtype == dtype and torch.allclose(got, expected, atol=tol)
    for g, e in zip(grads, expected_grads):
        assert torch.allclose(g, e, atol=tol)


def _per_position_loss(rows_mode: bool, temperature: float = 0.05):
    """Loss and gradients (queries, table) of 128 negatives per position, from the whole table or from rows."""
    torch.manual_seed(0)
    num_items, m = 50 if not rows_mode else 5000, 6
    table = torch.randn(num_items + 1, 8, requires_grad=True)
    queries = torch.randn(m, 8, requires_grad=True)
    positives = torch.randint(1, num_items + 1, (m,))
    loss_fn = SampledSoftmaxLoss(num_negatives=128, temperature=temperature, per_position=True)
    torch.manual_seed(1)
    ids = loss_fn.item_ids(positives, num_items)
    assert (ids is None) != rows_mode
    vectors = F.normalize(table if ids is None else table[ids], dim=-1)
    loss = loss_fn(F.normalize(queries, dim=-1), positives, ids, vectors)
    return loss, torch.autograd.grad(loss, (queries, table)), (queries, table, positives)


@pytest.mark.parametrize("rows_mode", [False, True])
def test_per_position_loss_equals_the_written_out_formula(rows_mode):
    """Every position against its own 128 uniform negatives, accidental hits masked, L2-normalised, / 0.05."""
    loss, grads, (queries, table, positives) = _per_position_loss(rows_mode)
    torch.manual_seed(1)
    negatives = torch.randint(1, len(table), (len(positives), 128))
    q, t = F.normalize(queries, dim=-1), F.normalize(table, dim=-1)
    logits = torch.cat([(q * t[positives]).sum(-1, keepdim=True), torch.einsum("md,mrd->mr", q, t[negatives])], 1)
    logits[:, 1:] = logits[:, 1:].masked_fill(negatives == positives[:, None], float("-inf"))
    expected = F.cross_entropy(logits / 0.05, torch.zeros(len(positives), dtype=torch.long))
    assert torch.allclose(loss, expected, atol=1e-5)
    for g, e in zip(grads, torch.autograd.grad(expected, (queries, table))):
        assert torch.allclose(g, e, atol=1e-5)


@pytest.mark.parametrize("negatives,per_position", [("uniform", False), ("mixed", False), ("in_batch", False),
                                                    ("mixed", True)])
def test_whole_table_equals_looked_up_rows(negatives, per_position, monkeypatch):
    """The two ways to get the vectors (the whole table when it is smaller than the lookup, else the rows) give the
    same loss and gradients on the same negatives."""
    torch.manual_seed(0)
    table = torch.randn(31, 8, requires_grad=True)
    queries = torch.randn(5, 8, requires_grad=True)
    positives = torch.tensor([3, 5, 5, 9, 30])
    loss_fn = SampledSoftmaxLoss(num_negatives=7, negatives=negatives, temperature=0.2, per_position=per_position)
    results = []
    for whole in (True, False):
        torch.manual_seed(1)
        draw = loss_fn._draw(5, 30, torch.device("cpu"))
        monkeypatch.setattr(loss_fn, "_draw", lambda *args: draw)
        ids = None if whole else torch.cat([positives, draw if loss_fn._uniform else draw[:0],
                                            torch.unique(positives) if loss_fn._in_batch else draw[:0]])
        loss = loss_fn(queries, positives, ids, table if whole else table[ids])
        results.append((loss, *torch.autograd.grad(loss, (queries, table))))
    for a, b in zip(*results):
        assert torch.allclose(a, b, atol=1e-6)


def test_the_whole_table_is_asked_for_when_it_is_smaller_than_the_lookup():
    loss_fn = SampledSoftmaxLoss(num_negatives=128, per_position=True)
    positives = torch.arange(1, 11)
    assert loss_fn.item_ids(positives, 1000) is None  # 1001 rows < 10 * 129
    ids = loss_fn.item_ids(positives, 5000)
    assert ids.shape == (10 * 129,) and torch.equal(ids[:10], positives) and 1 <= ids.min() and ids.max() <= 5000


@pytest.mark.skipif(not PEER.exists(), reason=f"Meta's reference HSTU not found at {PEER}")
def test_per_position_loss_equals_metas_sampled_softmax_with_gradients():
    """Meta's SampledSoftmaxLoss with its LocalNegativesSampler (L2 norm, eps 1e-6) against genrec's loss on the
    same uniform negatives: both draw ``torch.randint`` of the same size after the same seed."""
    sys.path.insert(0, str(PEER))
    try:
        from generative_recommenders.research.modeling.sequential.autoregressive_losses import (
            LocalNegativesSampler)
        from generative_recommenders.research.modeling.sequential.losses.sampled_softmax import (
            SampledSoftmaxLoss as PeerLoss)
    finally:
        sys.path.remove(str(PEER))

    class DotProduct:  # the peer's DotProduct similarity: <query, item> per candidate
        @staticmethod
        def similarity_fn(query_embeddings, item_ids, item_embeddings, **kwargs):
            return torch.einsum("nd,nkd->nk", query_embeddings, item_embeddings), {}

    torch.manual_seed(0)
    num_items, m, dim = 200, 40, 16
    weight = torch.randn(num_items + 1, dim)
    queries = torch.randn(m, dim)
    positives = torch.randint(1, num_items + 1, (m,))

    peer_table = torch.nn.Embedding(num_items + 1, dim, _weight=weight.clone())
    peer_queries = queries.clone().requires_grad_()
    sampler = LocalNegativesSampler(num_items, peer_table, list(range(1, num_items + 1)), l2_norm=True,
                                    l2_norm_eps=1e-6)
    torch.manual_seed(7)
    peer_loss, _ = PeerLoss(128, 0.05, DotProduct()).jagged_forward(
        output_embeddings=F.normalize(peer_queries, dim=-1), supervision_ids=positives,
        supervision_embeddings=peer_table(positives), supervision_weights=torch.ones(m), negatives_sampler=sampler)
    peer_loss.backward()

    table = weight.clone().requires_grad_()
    ours_queries = queries.clone().requires_grad_()
    loss_fn = SampledSoftmaxLoss(num_negatives=128, temperature=0.05, per_position=True)
    torch.manual_seed(7)
    assert loss_fn.item_ids(positives, num_items) is None  # 201 rows < 40 * 129: gathered from the table
    loss = loss_fn(F.normalize(ours_queries, dim=-1), positives, None, F.normalize(table, dim=-1))
    loss.backward()

    assert torch.allclose(loss, peer_loss, atol=1e-5)
    assert torch.allclose(ours_queries.grad, peer_queries.grad, atol=1e-6)
    assert torch.allclose(table.grad, peer_table.weight.grad, atol=1e-6)
    assert table.grad.abs().sum() > 0


@pytest.mark.parametrize("bias", ["per_sequence", "shared", None])
def test_fused_pointwise_attention_equals_the_reference_with_gradients(bias):
    torch.manual_seed(0)
    g, h, length = 3, 2, 7
    q, k, v = (torch.randn(g, h, length, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    rab = {"per_sequence": torch.randn(g, length, length, dtype=torch.float64, requires_grad=True),
           "shared": torch.randn(1, length, length, dtype=torch.float64, requires_grad=True), None: None}[bias]
    scale = torch.rand(g, dtype=torch.float64)
    inputs = [q, k, v] + ([rab] if rab is not None else [])
    weights = torch.randn(g, h, length, 4, dtype=torch.float64)
    got = fused_pointwise_attention(q, k, v, rab, causal_weight(scale, length))
    expected = pointwise_attention(q, k, v, rab, scale)
    assert torch.allclose(got, expected, atol=1e-12)
    for a, b in zip(torch.autograd.grad((got * weights).sum(), inputs),
                    torch.autograd.grad((expected * weights).sum(), inputs)):
        assert torch.allclose(a, b, atol=1e-12)
