"""HSTU attention through genrec_kernels (``kernels/`` in the repository): ``model.encoder.attention=triton`` runs the
Triton kernel (relative bias inside the kernel) and the fused ``u ⊙ LayerNorm(a)`` of HSTU's output path.

It runs on CUDA tensors, and on CPU tensors under ``TRITON_INTERPRET=1`` (Triton's interpreter: for tests, slow);
``auto`` chooses it on CUDA only. genrec_kernels and triton are imported on first use, not with genrec.
"""
from __future__ import annotations

import importlib.util

import torch

from genrec.ops.hstu import RelativeBias
from genrec.models.attention.registry import register
from genrec.ops.jagged import JaggedLayout


def _runs_on(t: torch.Tensor) -> bool:
    if importlib.util.find_spec("genrec_kernels") is None:
        return False
    from genrec_kernels import triton_runs_on

    return triton_runs_on(t)


def triton_hstu_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: JaggedLayout,
                          bias: RelativeBias | None, scale: torch.Tensor) -> torch.Tensor:
    """:func:`genrec_kernels.hstu_attention` with the switch's signature: ``q, k (N, H, d_qk)``, ``v (N, H, d_v)``,
    ``scale (B,)`` -> ``(N, H, d_v)``."""
    from genrec_kernels import hstu_attention

    position = None if bias is None else bias.position
    time = None if bias is None else bias.time
    return hstu_attention(q, k, v, layout.offsets, scale, layout.max_len, position, time,
                          None if time is None else bias.timestamps, None if time is None else bias.query_timestamps,
                          backend="triton")


def triton_layer_norm_mul(u: torch.Tensor, a: torch.Tensor, weight: torch.Tensor | None,
                          bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """``u ⊙ LayerNorm(a)``: ``u, a (N, E)``, ``weight, bias (E,)`` or ``None`` -> ``(N, E)``."""
    from genrec_kernels import layer_norm_mul

    return layer_norm_mul(u, a, weight, bias, eps, backend="triton")


register("hstu", "triton", triton_hstu_attention, available=_runs_on, auto_rank=0,
         auto_available=lambda t: t.is_cuda and _runs_on(t), output=triton_layer_norm_mul,
         requirement="the triton package and CUDA tensors (or CPU tensors with TRITON_INTERPRET=1)")
