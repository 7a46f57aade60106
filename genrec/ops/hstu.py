"""HSTU's relative attention bias and pointwise attention on padded tensors, in plain PyTorch: shared by the
attention implementations of :mod:`genrec.models.attention.hstu` and the reference of genrec_kernels.

``out_i = sum_{j <= i} SiLU(q_i·k_j + rab_ij) · scale · v_j`` within each sequence (no softmax), with the relative
attention bias ``rab`` of Zhai et al. (2024) built from :class:`RelativeBias`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: width of one time bucket in log-seconds (Meta's HSTU: bucket = floor(ln(max(|Δt|, 1)) / 0.301)).
TIME_BUCKET_WIDTH = 0.301
def time_bucket(delta: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """``floor(ln(max(|Δt|, 1)) / 0.301)`` clamped to ``[0, num_buckets]``: ``(*,)`` int64 seconds -> ``(*,)`` int64.

    Gaps of 0-1 s fall in bucket 0 and each later bucket is e^0.301 ≈ 1.35 times wider (a minute is bucket 13, an
    hour 27, a day 37); 128 buckets reach far beyond any real gap. Computed in float32, as Meta's code does.
    """
    return (torch.log(delta.abs().clamp(min=1).float()) / TIME_BUCKET_WIDTH).long().clamp(max=num_buckets)


@dataclass
class RelativeBias:
    """The inputs of HSTU's relative attention bias for one batch:
    ``rab_ij = position[i - j] + time[time_bucket(query_timestamps[i] - timestamps[j])]`` for key ``j`` at or
    before query ``i`` in one sequence (``i, j`` positions within it; ``query_timestamps[i]`` is the time of the
    event position ``i`` predicts). A part whose weights are ``None`` is left out.

    Attributes:
        position: ``(P,)`` learned bias per relative distance ``0..P-1`` (``P >=`` the longest sequence), or ``None``.
        time: ``(T + 1,)`` learned bias per time bucket ``0..T``, or ``None``.
        timestamps / query_timestamps: ``(N,)`` int64 seconds, jagged like the batch (needed with ``time``).
    """

    position: torch.Tensor | None = None
    time: torch.Tensor | None = None
    timestamps: torch.Tensor | None = None
    query_timestamps: torch.Tensor | None = None

    def time_buckets(self, starts: torch.Tensor, length: int) -> torch.Tensor:
        """``(G, L, L)`` time bucket of every (query, key) pair of the sequences starting at ``starts (G,)``, padded
        to ``length`` (pairs beyond a sequence's end read a neighbour's times: unspecified, masked later). They
        depend on the timestamps only, so a layer stack computes them once per batch."""
        index = (starts[:, None] + torch.arange(length, device=starts.device)).clamp(max=len(self.timestamps) - 1)
        delta = self.query_timestamps[index][:, :, None] - self.timestamps[index][:, None, :]
        return time_bucket(delta, len(self.time) - 1)

    def dense(self, length: int, buckets: torch.Tensor | None) -> torch.Tensor | None:
        """The bias padded to ``length``: ``(G, L, L)`` (or ``(1, L, L)`` with the position part only, ``None``
        with no part), given the :meth:`time_buckets` of the ``G`` sequences when the time part is on. Entries above
        the diagonal or beyond a sequence's end are unspecified (every implementation masks them)."""
        bias = None
        if self.position is not None:
            pos = torch.arange(length, device=self.position.device)
            distance = (pos[:, None] - pos[None, :]).clamp(min=0)
            bias = self.position.index_select(0, distance.reshape(-1)).view(1, length, length)
        if self.time is not None:
            time = self.time.index_select(0, buckets.reshape(-1)).view(buckets.shape)
            bias = time if bias is None else bias + time
        return bias


def pointwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rab: torch.Tensor | None, scale: torch.Tensor
            ) -> torch.Tensor:
    """Causal pointwise attention on padded sequences: ``SiLU(q kᵀ + rab) · scale`` times a causal 0/1 mask, times
    ``v``. ``q, k (G, H, L, d_qk)``, ``v (G, H, L, d_v)``, ``rab (G|1, L, L)`` or ``None``, ``scale (G,)`` ->
    ``(G, H, L, d_v)``."""
    scores = q @ k.transpose(-1, -2)
    if rab is not None:
        scores = scores + rab[:, None]
    causal = torch.ones(q.shape[-2], q.shape[-2], device=q.device, dtype=q.dtype).tril()
    return (F.silu(scores) * scale[:, None, None, None] * causal) @ v


class _FusedPointwiseAttention(torch.autograd.Function):
    """:func:`pointwise_attention` with a hand-written backward that keeps one ``(G, H, L, L)`` tensor (the scores
    before SiLU) instead of autograd's several, and a precomputed ``weight = causal · scale``.

    Under autocast (``trainer.precision=bf16-mixed``) the forward's matmuls run in bf16 and the backward, which
    autocast does not cover, runs its matmuls in the scores' dtype too; the bias gradient is summed in fp32 (or
    wider) and every gradient has its input's dtype."""

    @staticmethod
    def forward(ctx, q, k, v, rab, weight):
        scores = q @ k.transpose(-1, -2)
        if rab is not None:
            scores += rab[:, None]
        ctx.save_for_backward(q, k, v, scores, weight)
        ctx.rab_shape, ctx.rab_dtype = (None, None) if rab is None else (rab.shape, rab.dtype)
        return (F.silu(scores) * weight) @ v

    @staticmethod
    def backward(ctx, grad):
        q, k, v, scores, weight = ctx.saved_tensors
        dtype = scores.dtype  # the forward's matmul dtype (bf16 under autocast; no casts without it)
        grad, weight, q_, k_, v_ = (t.to(dtype) for t in (grad, weight, q, k, v))
        grad_v = (F.silu(scores) * weight).transpose(-1, -2) @ grad
        grad_scores = torch.ops.aten.silu_backward((grad @ v_.transpose(-1, -2)).mul_(weight), scores)
        grad_rab = None
        if ctx.rab_shape is not None:
            grad_rab = grad_scores.sum(1, dtype=torch.promote_types(dtype, torch.float32))
            if ctx.rab_shape[0] == 1:
                grad_rab = grad_rab.sum(0, keepdim=True)
            grad_rab = grad_rab.to(ctx.rab_dtype)
        return ((grad_scores @ k_).to(q.dtype), (grad_scores.transpose(-1, -2) @ q_).to(k.dtype), grad_v.to(v.dtype),
                grad_rab, None)


def fused_pointwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rab: torch.Tensor | None,
                              weight: torch.Tensor) -> torch.Tensor:
    """:func:`pointwise_attention` given ``weight (G, 1, L, L)`` = the causal 0/1 mask times each sequence's scale
    (:func:`causal_weight`, computed once for all layers); same shapes and result, less memory and fewer passes
    over the ``(G, H, L, L)`` scores."""
    return _FusedPointwiseAttention.apply(q, k, v, rab, weight)


def causal_weight(scale: torch.Tensor, length: int) -> torch.Tensor:
    """``(G, 1, L, L)``: ``scale[g]`` on and below the diagonal, 0 above; ``scale (G,)``."""
    causal = torch.ones(length, length, device=scale.device, dtype=scale.dtype).tril()
    return scale[:, None, None, None] * causal
