"""HSTU's pointwise attention on jagged sequences: ``out_i = sum_{j <= i} SiLU(q_i·k_j + rab_ij) · scale · v_j``
within each sequence (no softmax), with the relative attention bias ``rab`` of Zhai et al. (2024).

Two implementations:

* ``"padded"`` pads the whole batch to its longest sequence and writes the formula out with a 0/1 causal mask: the
  test oracle, and the baseline of ``scripts/bench/bench_hstu.py``.
* ``"jagged"`` sorts the sequences by length and computes groups of similar length, each padded only to its own
  longest (groups chosen by :func:`length_groups`), so the work follows ``sum_i n_i²`` rather than
  ``B · max_i n_i²``. It gives the same result as ``"padded"``, through
  :func:`~genrec.ops.hstu.fused_pointwise_attention` (a hand-written backward that keeps one ``(G, H, L, L)``
  tensor per group and layer, and the causal mask times the scale computed once per batch for all layers).

Both take the bias as its inputs (:class:`~genrec.ops.hstu.RelativeBias`) rather than as a dense matrix, so a fused
kernel can build it in place, and share :func:`~genrec.ops.hstu.pointwise_attention`. Padding uses fbgemm's
jagged <-> dense ops (fbgemm comes with TorchRec; imported on first use).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from genrec.models.attention.registry import register
from genrec.ops.hstu import RelativeBias, causal_weight, fused_pointwise_attention, pointwise_attention
from genrec.ops.jagged import JaggedLayout

#: fixed cost of one length group of the jagged path, in attention-score elements: a group of G sequences padded
#: to L costs G·L² + GROUP_OVERHEAD (about the per-group operator overhead of a CPU training step).
GROUP_OVERHEAD = 32_768


def _to_padded(values: torch.Tensor, offsets: torch.Tensor, length: int) -> torch.Tensor:
    """``(n, H, d)`` jagged -> ``(G, H, L, d)`` zero-padded."""
    import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)

    n, heads, d = values.shape
    dense = torch.ops.fbgemm.jagged_to_padded_dense(values.reshape(n, heads * d), [offsets], [length], 0.0)
    return dense.view(len(offsets) - 1, length, heads, d).transpose(1, 2)


def _to_jagged(padded: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``(G, H, L, d)`` -> ``(n, H, d)``."""
    g, heads, length, d = padded.shape
    values = torch.ops.fbgemm.dense_to_jagged(padded.transpose(1, 2).reshape(g, length, heads * d), [offsets])[0]
    return values.view(-1, heads, d)


def padded_hstu_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: JaggedLayout,
                          bias: RelativeBias | None, scale: torch.Tensor) -> torch.Tensor:
    """The reference: pad the batch to ``(B, H, L, ·)``, ``SiLU(q kᵀ + rab) · scale`` times a causal 0/1 mask,
    times ``v``, unpad. ``q, k (N, H, d_qk)``, ``v (N, H, d_v)``, ``scale (B,)`` -> ``(N, H, d_v)``."""
    length, offsets = layout.max_len, layout.offsets
    rab = None
    if bias is not None:
        buckets = None
        if bias.time is not None:
            buckets = layout.memo("rab_time_buckets", lambda: bias.time_buckets(offsets[:-1], length))
        rab = bias.dense(length, buckets)
    out = pointwise_attention(_to_padded(q, offsets, length), _to_padded(k, offsets, length), _to_padded(v, offsets, length),
                  rab, scale)
    return _to_jagged(out, offsets)


def length_groups(lengths: np.ndarray, overhead: float) -> list[np.ndarray]:
    """Split sequences, sorted by length, into runs minimising ``sum over runs (size · longest² + overhead)``,
    exactly, by dynamic programming. Returns the sequence indices of each run, shortest run first."""
    order = np.argsort(lengths, kind="stable")
    squares = lengths[order].astype(np.float64) ** 2
    best, cut = np.zeros(len(order) + 1), np.zeros(len(order) + 1, dtype=np.int64)
    for end in range(1, len(order) + 1):
        costs = best[:end] + (end - np.arange(end)) * squares[end - 1] + overhead
        cut[end] = int(np.argmin(costs))
        best[end] = costs[cut[end]]
    groups, end = [], len(order)
    while end > 0:
        groups.append(order[cut[end]:end])
        end = int(cut[end])
    return groups[::-1]


@dataclass
class _Group:
    """Sequences ``seqs (G,)`` computed together, padded to ``length``: ``rows`` consecutive rows of the
    length-sorted order with local ``offsets (G + 1,)``; ``starts (G,)`` are their first rows in the batch order."""

    seqs: torch.Tensor
    starts: torch.Tensor
    offsets: torch.Tensor
    rows: int
    length: int


@dataclass
class _Plan:
    """The jagged path's layout of one batch: ``order (N,)`` rows in length-sorted sequence order and its
    ``inverse``, and the groups."""

    order: torch.Tensor
    inverse: torch.Tensor
    groups: list[_Group]


def _plan(layout: JaggedLayout) -> _Plan:
    device, lengths, offsets = layout.offsets.device, layout.lengths, layout.offsets
    groups, rows = [], []
    for seqs_np in length_groups(lengths.cpu().numpy(), GROUP_OVERHEAD):
        seqs = torch.from_numpy(seqs_np).to(device)
        group_lengths = lengths[seqs]
        group_offsets = torch.cat([group_lengths.new_zeros(1), group_lengths.cumsum(0)])
        size = int(group_offsets[-1])
        groups.append(_Group(seqs, offsets[seqs], group_offsets, size, int(group_lengths.max())))
        rows.append(torch.repeat_interleave(offsets[seqs], group_lengths)
                    + torch.arange(size, device=device) - torch.repeat_interleave(group_offsets[:-1], group_lengths))
    order = torch.cat(rows)
    return _Plan(order, torch.empty_like(order).index_copy_(0, order, torch.arange(len(order), device=device)),
                 groups)


class _Permute(torch.autograd.Function):
    """``x.index_select(0, order)`` whose backward is the inverse permutation (a gather, not a scatter-add)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, order: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(inverse)
        return x.index_select(0, order)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (inverse,) = ctx.saved_tensors
        return grad.index_select(0, inverse), None, None


def jagged_hstu_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: JaggedLayout,
                          bias: RelativeBias | None, scale: torch.Tensor) -> torch.Tensor:
    """Length-grouped jagged attention (see the module doc), equal to :func:`padded_hstu_attention`.
    ``q, k (N, H, d_qk)``, ``v (N, H, d_v)``, ``scale (B,)`` -> ``(N, H, d_v)``."""
    plan = layout.memo("hstu_plan", lambda: _plan(layout))
    sizes = [g.rows for g in plan.groups]
    q, k, v = (_Permute.apply(t, plan.order, plan.inverse).split(sizes) for t in (q, k, v))
    parts = []
    for i, g in enumerate(plan.groups):
        rab = None
        if bias is not None:
            buckets = None
            if bias.time is not None:
                buckets = layout.memo(("rab_time_buckets", i), lambda: bias.time_buckets(g.starts, g.length))
            rab = bias.dense(g.length, buckets)
        gq, gk, gv = (_to_padded(t[i], g.offsets, g.length) for t in (q, k, v))
        weight = layout.memo(("causal_weight", i), lambda: causal_weight(scale[g.seqs], g.length))
        parts.append(_to_jagged(fused_pointwise_attention(gq, gk, gv, rab, weight), g.offsets))
    return _Permute.apply(torch.cat(parts), plan.inverse, plan.order)


register("hstu", "padded", padded_hstu_attention)
register("hstu", "jagged", jagged_hstu_attention, auto_rank=10)
