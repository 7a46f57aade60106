"""PyTorch references of genrec's kernels: the CPU path of each op (``backend="pytorch"``) and the oracle its Triton
and CUDA kernels are tested against. The attention reference is HSTU's own padded reference
(:mod:`genrec.ops.hstu`: the same bias construction and the same pointwise attention), padded here with plain
PyTorch indexing instead of fbgemm so that it runs wherever torch does."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from genrec.ops.hstu import RelativeBias, pointwise_attention
from genrec.ops.jagged import jagged_to_padded, padded_to_jagged


def hstu_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor, scale: torch.Tensor,
                   max_len: int, position_bias: torch.Tensor | None = None, time_bias: torch.Tensor | None = None,
                   timestamps: torch.Tensor | None = None, query_timestamps: torch.Tensor | None = None
                   ) -> torch.Tensor:
    """``out_i = sum_{j <= i, same sequence} SiLU(q_i·k_j + rab_ij) · scale_b · v_j`` on the batch padded to
    ``max_len``. ``q, k (N, H, d_qk)``, ``v (N, H, d_v)``, ``offsets (B + 1,)``, ``scale (B,)``,
    ``position_bias (P >= max_len,)``, ``time_bias (T + 1,)``, ``timestamps, query_timestamps (N,)`` int64 ->
    ``(N, H, d_v)``; ``rab`` as in :class:`~genrec.ops.hstu.RelativeBias`."""
    bias = RelativeBias(position_bias, time_bias, timestamps, query_timestamps)
    buckets = bias.time_buckets(offsets[:-1], max_len) if time_bias is not None else None
    rab = bias.dense(max_len, buckets)
    padded = [jagged_to_padded(t, offsets, max_len).transpose(1, 2) for t in (q, k, v)]  # (B, H, L, d)
    return padded_to_jagged(pointwise_attention(*padded, rab, scale).transpose(1, 2), offsets)


def layer_norm_mul(u: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   eps: float) -> torch.Tensor:
    """HSTU's output path ``u ⊙ LayerNorm(x)``: ``u, x (N, E)``, ``weight, bias (E,)`` or ``None`` -> ``(N, E)``."""
    return u * F.layer_norm(x, x.shape[-1:], weight, bias, eps)


__all__ = ["hstu_attention", "jagged_to_padded", "layer_norm_mul", "padded_to_jagged"]
