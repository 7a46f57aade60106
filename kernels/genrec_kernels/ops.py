"""genrec's kernels as torch custom ops in the namespace ``genrec`` (``torch.ops.genrec.*``), each with a fake
(meta) implementation for tracing and an autograd formula, so they compose with autograd and ``torch.compile``.

* ``genrec::hstu_attention`` / ``genrec::hstu_attention_backward`` — the Triton attention kernels.
* ``genrec::layer_norm_mul`` / ``genrec::layer_norm_mul_backward`` — the Triton ``u ⊙ LayerNorm(x)`` kernels.
* ``genrec::jagged_to_padded`` / ``genrec::padded_to_jagged`` — each the other's gradient; ``backend`` is
  ``"triton"`` or ``"cuda"`` (the C++ extension).

The PyTorch references (:mod:`genrec_kernels.reference`) are plain differentiable functions, not ops. Use the
functions of :mod:`genrec_kernels`, which check their inputs and choose a backend, rather than these ops directly.
"""
from typing import Optional

import torch
from torch import Tensor


def _triton_hstu():
    from genrec_kernels import triton_hstu

    return triton_hstu


# ---- HSTU attention ---------------------------------------------------------------------------------------------

@torch.library.custom_op("genrec::hstu_attention", mutates_args=())
def hstu_attention(q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, scale: Tensor, max_len: int,
                   position_bias: Optional[Tensor], time_bias: Optional[Tensor], timestamps: Optional[Tensor],
                   query_timestamps: Optional[Tensor]) -> Tensor:
    """``(N, H, d_v)``; arguments as :func:`genrec_kernels.hstu_attention`."""
    return _triton_hstu().hstu_attention_forward(q, k, v, offsets, scale, max_len, position_bias, time_bias,
                                                 timestamps, query_timestamps)


@hstu_attention.register_fake
def _(q, k, v, offsets, scale, max_len, position_bias, time_bias, timestamps, query_timestamps):
    return v.new_empty(v.shape)


@torch.library.custom_op("genrec::hstu_attention_backward", mutates_args=())
def hstu_attention_backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, offsets: Tensor, scale: Tensor,
                            max_len: int, position_bias: Optional[Tensor], time_bias: Optional[Tensor],
                            timestamps: Optional[Tensor], query_timestamps: Optional[Tensor]
                            ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """``dq, dk, dv, dposition_bias, dtime_bias`` (a bias that is absent gets an empty ``(0,)`` gradient)."""
    grads = _triton_hstu().hstu_attention_backward(grad, q, k, v, offsets, scale, max_len, position_bias,
                                                   time_bias, timestamps, query_timestamps)
    return tuple(g if g is not None else q.new_empty(0) for g in grads)


@hstu_attention_backward.register_fake
def _(grad, q, k, v, offsets, scale, max_len, position_bias, time_bias, timestamps, query_timestamps):
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
            *(b.new_empty(b.shape) if b is not None else q.new_empty(0) for b in (position_bias, time_bias)))


def _attention_setup(ctx, inputs, output):
    q, k, v, offsets, scale, max_len, position_bias, time_bias, timestamps, query_timestamps = inputs
    ctx.save_for_backward(q, k, v, offsets, scale, position_bias, time_bias, timestamps, query_timestamps)
    ctx.max_len = max_len


def _attention_grad(ctx, grad):
    q, k, v, offsets, scale, position_bias, time_bias, timestamps, query_timestamps = ctx.saved_tensors
    dq, dk, dv, dpos, dtime = hstu_attention_backward(grad, q, k, v, offsets, scale, ctx.max_len, position_bias,
                                                      time_bias, timestamps, query_timestamps)
    return (dq, dk, dv, None, None, None, dpos if position_bias is not None else None,
            dtime if time_bias is not None else None, None, None)


hstu_attention.register_autograd(_attention_grad, setup_context=_attention_setup)


# ---- u ⊙ LayerNorm(x) -------------------------------------------------------------------------------------------

@torch.library.custom_op("genrec::layer_norm_mul", mutates_args=())
def layer_norm_mul(u: Tensor, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float) -> Tensor:
    """``(N, E)``; arguments as :func:`genrec_kernels.layer_norm_mul`."""
    from genrec_kernels import triton_norm

    return triton_norm.layer_norm_mul_forward(u, x, weight, bias, eps)


@layer_norm_mul.register_fake
def _(u, x, weight, bias, eps):
    return x.new_empty(x.shape)


@torch.library.custom_op("genrec::layer_norm_mul_backward", mutates_args=())
def layer_norm_mul_backward(grad: Tensor, u: Tensor, x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                            eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``du, dx, dweight, dbias`` (an absent weight or bias gets an empty ``(0,)`` gradient)."""
    from genrec_kernels import triton_norm

    grads = triton_norm.layer_norm_mul_backward(grad, u, x, weight, bias, eps)
    return tuple(g if g is not None else x.new_empty(0) for g in grads)


@layer_norm_mul_backward.register_fake
def _(grad, u, x, weight, bias, eps):
    return (u.new_empty(u.shape), x.new_empty(x.shape),
            *(p.new_empty(p.shape) if p is not None else x.new_empty(0) for p in (weight, bias)))


def _norm_setup(ctx, inputs, output):
    u, x, weight, bias, eps = inputs
    ctx.save_for_backward(u, x, weight, bias)
    ctx.eps = eps


def _norm_grad(ctx, grad):
    u, x, weight, bias = ctx.saved_tensors
    du, dx, dweight, dbias = layer_norm_mul_backward(grad, u, x, weight, bias, ctx.eps)
    return du, dx, dweight if weight is not None else None, dbias if bias is not None else None, None


layer_norm_mul.register_autograd(_norm_grad, setup_context=_norm_setup)


# ---- jagged <-> padded ------------------------------------------------------------------------------------------

def _jagged_module(backend: str):
    if backend == "cuda":
        from genrec_kernels import cuda_ext

        return cuda_ext
    from genrec_kernels import triton_jagged

    return triton_jagged


@torch.library.custom_op("genrec::jagged_to_padded", mutates_args=())
def jagged_to_padded(values: Tensor, offsets: Tensor, max_len: int, pad_value: float, backend: str) -> Tensor:
    """``values (N, D)`` -> ``(B, max_len, D)``."""
    return _jagged_module(backend).jagged_to_padded(values, offsets, max_len, pad_value)


@jagged_to_padded.register_fake
def _(values, offsets, max_len, pad_value, backend):
    return values.new_empty(offsets.shape[0] - 1, max_len, values.shape[1])


@torch.library.custom_op("genrec::padded_to_jagged", mutates_args=())
def padded_to_jagged(padded: Tensor, offsets: Tensor, total: int, backend: str) -> Tensor:
    """``padded (B, L, D)`` -> ``(total, D)``, ``total = offsets[-1]``."""
    return _jagged_module(backend).padded_to_jagged(padded, offsets, total)


@padded_to_jagged.register_fake
def _(padded, offsets, total, backend):
    return padded.new_empty(total, padded.shape[2])


def _to_padded_setup(ctx, inputs, output):
    values, offsets, max_len, pad_value, backend = inputs
    ctx.save_for_backward(offsets)
    ctx.total, ctx.backend = values.shape[0], backend


def _to_padded_grad(ctx, grad):
    (offsets,) = ctx.saved_tensors
    return padded_to_jagged(grad.contiguous(), offsets, ctx.total, ctx.backend), None, None, None, None


def _to_jagged_setup(ctx, inputs, output):
    padded, offsets, total, backend = inputs
    ctx.save_for_backward(offsets)
    ctx.max_len, ctx.backend = padded.shape[1], backend


def _to_jagged_grad(ctx, grad):
    (offsets,) = ctx.saved_tensors
    return jagged_to_padded(grad.contiguous(), offsets, ctx.max_len, 0.0, ctx.backend), None, None, None


jagged_to_padded.register_autograd(_to_padded_grad, setup_context=_to_padded_setup)
padded_to_jagged.register_autograd(_to_jagged_grad, setup_context=_to_jagged_setup)
