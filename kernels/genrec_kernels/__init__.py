"""genrec_kernels: fused kernels for genrec's jagged sequence models (``kernels/`` in the genrec repository; the
import name is ``genrec_kernels`` so that it never collides with the unrelated PyPI package ``kernels``).

Ops (each a PyTorch reference, :mod:`genrec_kernels.reference`, and kernels registered as ``torch.ops.genrec.*``
custom ops with autograd, :mod:`genrec_kernels.ops`):

* :func:`hstu_attention` — HSTU's jagged causal pointwise attention with the relative position and time-bucket bias
  built inside the kernel (Triton), forward and backward.
* :func:`layer_norm_mul` — HSTU's output path ``u ⊙ LayerNorm(x)`` fused (Triton), forward and backward.
* :func:`jagged_to_padded` / :func:`padded_to_jagged` — conversion (Triton, and CUDA C++ as a torch extension).

``backend``: ``"pytorch"`` (the reference: any device), ``"triton"`` (CUDA tensors; CPU tensors when
``TRITON_INTERPRET=1`` was set before the kernels were first used: Triton's interpreter, for tests), ``"cuda"``
(jagged ops only; CUDA tensors, built with nvcc on first use) or ``"auto"``: Triton on CUDA tensors, the reference
elsewhere. See docs/KERNELS.md.
"""
from __future__ import annotations

import importlib.util
import math
import os
import sys

import torch

from genrec_kernels import reference

BACKENDS = ("auto", "pytorch", "triton", "cuda")


def interpreting() -> bool:
    """Whether the Triton kernels run in Triton's CPU interpreter: the mode they were built in once imported,
    before that ``TRITON_INTERPRET=1`` in the environment."""
    built = sys.modules.get("genrec_kernels.triton_hstu")
    return built.INTERPRETED if built is not None else os.environ.get("TRITON_INTERPRET", "0") == "1"


def triton_runs_on(t: torch.Tensor) -> bool:
    """Whether the Triton kernels can run on tensors like ``t``: CUDA tensors, or CPU ones in the interpreter."""
    return importlib.util.find_spec("triton") is not None and t.device.type == ("cpu" if interpreting() else "cuda")


def _backend(backend: str, t: torch.Tensor, choices: tuple[str, ...]) -> str:
    if backend not in ("auto", *choices):
        raise ValueError(f"backend must be one of {('auto', *choices)}, got {backend!r}")
    if backend == "auto":
        return "triton" if t.is_cuda and triton_runs_on(t) else "pytorch"
    if backend == "triton" and not triton_runs_on(t):
        raise ValueError(f"backend='triton' needs the triton package and CUDA tensors (or CPU tensors with "
                         f"TRITON_INTERPRET=1 set before first use); got {t.device} tensors"
                         f"{' in interpreter mode' if interpreting() else ''}")
    if backend == "cuda" and not (t.is_cuda and torch.version.cuda):
        raise ValueError(f"backend='cuda' needs CUDA tensors and a CUDA build of torch; got {t.device} tensors")
    return backend


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def hstu_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor, scale: torch.Tensor,
                   max_len: int, position_bias: torch.Tensor | None = None, time_bias: torch.Tensor | None = None,
                   timestamps: torch.Tensor | None = None, query_timestamps: torch.Tensor | None = None,
                   backend: str = "auto") -> torch.Tensor:
    """HSTU's attention on jagged sequences: ``out_i = sum_{j <= i} SiLU(q_i·k_j + rab_ij) · scale_b · v_j`` within
    each sequence ``b``, ``rab_ij = position_bias[i - j] + time_bias[bucket(query_timestamps_i - timestamps_j)]``.

    Args:
        q, k: ``(N, H, d_qk)``; v: ``(N, H, d_v)`` (any row and head strides).
        offsets: ``(B + 1,)`` int64 sequence boundaries.
        scale: ``(B,)`` per-sequence factor (HSTU's ``1 / n``); not differentiated.
        max_len: at least the longest sequence.
        position_bias: ``(P,)`` bias per distance ``0..P-1``, ``P >= max_len``, or ``None``.
        time_bias: ``(T + 1,)`` bias per time bucket ``0..T``, or ``None``; needs ``timestamps`` and
            ``query_timestamps``, each ``(N,)`` int64 seconds.
        backend: ``"auto"``, ``"pytorch"`` or ``"triton"``.
    Returns:
        ``(N, H, d_v)``.
    """
    n, heads = q.shape[:2] if q.dim() == 3 else (None, None)
    if q.dim() != 3 or k.shape != q.shape or v.dim() != 3 or v.shape[:2] != (n, heads):
        raise ValueError(f"hstu_attention: expected q, k (N, H, d_qk) and v (N, H, d_v); got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if offsets.dim() != 1 or offsets.dtype != torch.int64 or scale.shape != (len(offsets) - 1,):
        raise ValueError(f"hstu_attention: expected offsets (B + 1,) int64 and scale (B,); got {offsets.dtype} "
                         f"{tuple(offsets.shape)} and {tuple(scale.shape)}")
    longest = int((offsets[1:] - offsets[:-1]).max()) if len(offsets) > 1 else 0
    if longest > max_len:
        raise ValueError(f"hstu_attention: a sequence has {longest} positions but max_len={max_len}")
    if position_bias is not None and (position_bias.dim() != 1 or len(position_bias) < max_len):
        raise ValueError(f"hstu_attention: position_bias must be (P,) with P >= max_len={max_len}, "
                         f"got {tuple(position_bias.shape)}")
    if time_bias is not None and (timestamps is None or query_timestamps is None
                                  or timestamps.shape != (n,) or query_timestamps.shape != (n,)):
        raise ValueError(f"hstu_attention: time_bias needs timestamps and query_timestamps, each ({n},) int64")
    args = (offsets, scale, max_len, position_bias, time_bias,
            timestamps if time_bias is not None else None, query_timestamps if time_bias is not None else None)
    if _backend(backend, q, ("pytorch", "triton")) == "pytorch":
        return reference.hstu_attention(q, k, v, *args)
    from genrec_kernels import ops

    return ops.hstu_attention(*(_last_dim_contiguous(t) for t in (q, k, v)), *args)


def layer_norm_mul(u: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None = None,
                   bias: torch.Tensor | None = None, eps: float = 1e-5, backend: str = "auto") -> torch.Tensor:
    """``u ⊙ LayerNorm(x)`` over the last dim: ``u, x (N, E)``, ``weight, bias (E,)`` or ``None`` -> ``(N, E)``."""
    if x.dim() != 2 or u.shape != x.shape or any(p is not None and p.shape != x.shape[1:] for p in (weight, bias)):
        raise ValueError(f"layer_norm_mul: expected u, x (N, E) and weight, bias (E,); got {tuple(u.shape)}, "
                         f"{tuple(x.shape)}, {None if weight is None else tuple(weight.shape)}, "
                         f"{None if bias is None else tuple(bias.shape)}")
    if _backend(backend, x, ("pytorch", "triton")) == "pytorch":
        return reference.layer_norm_mul(u, x, weight, bias, eps)
    from genrec_kernels import ops

    return ops.layer_norm_mul(_last_dim_contiguous(u), _last_dim_contiguous(x), weight, bias, eps)


def jagged_to_padded(values: torch.Tensor, offsets: torch.Tensor, max_len: int, pad_value: float = 0.0,
                     backend: str = "auto") -> torch.Tensor:
    """``values (N, *F)`` jagged by ``offsets (B + 1,)`` -> ``(B, max_len, *F)`` right-padded with ``pad_value``;
    ``max_len`` at least the longest sequence. Backends ``"pytorch"``, ``"triton"``, ``"cuda"``."""
    longest = int((offsets[1:] - offsets[:-1]).max()) if len(offsets) > 1 else 0
    if offsets.dim() != 1 or offsets.dtype != torch.int64 or longest > max_len:
        raise ValueError(f"jagged_to_padded: offsets must be (B + 1,) int64 with every sequence <= max_len="
                         f"{max_len}; got {offsets.dtype} {tuple(offsets.shape)}, longest {longest}")
    backend = _backend(backend, values, ("pytorch", "triton", "cuda"))
    if backend == "pytorch":
        return reference.jagged_to_padded(values, offsets, max_len, pad_value)
    from genrec_kernels import ops

    rows = values.reshape(len(values), math.prod(values.shape[1:])).contiguous()
    padded = ops.jagged_to_padded(rows, offsets, max_len, float(pad_value), backend)
    return padded.view(len(offsets) - 1, max_len, *values.shape[1:])


def padded_to_jagged(padded: torch.Tensor, offsets: torch.Tensor, backend: str = "auto") -> torch.Tensor:
    """``padded (B, L, *F)`` -> ``(N, *F)`` jagged values (padding dropped). Backends as :func:`jagged_to_padded`."""
    if offsets.dim() != 1 or offsets.dtype != torch.int64 or padded.dim() < 2 or len(offsets) != len(padded) + 1:
        raise ValueError(f"padded_to_jagged: expected padded (B, L, *F) and offsets (B + 1,) int64; got "
                         f"{tuple(padded.shape)} and {offsets.dtype} {tuple(offsets.shape)}")
    backend = _backend(backend, padded, ("pytorch", "triton", "cuda"))
    if backend == "pytorch":
        return reference.padded_to_jagged(padded, offsets)
    from genrec_kernels import ops

    b, length = padded.shape[:2]
    total = int(offsets[-1])
    values = ops.padded_to_jagged(padded.reshape(b, length, math.prod(padded.shape[2:])).contiguous(), offsets,
                                  total, backend)
    return values.view(total, *padded.shape[2:])


__all__ = ["BACKENDS", "hstu_attention", "interpreting", "jagged_to_padded", "layer_norm_mul", "padded_to_jagged",
           "triton_runs_on"]
