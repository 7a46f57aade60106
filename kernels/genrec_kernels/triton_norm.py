"""Triton kernels of HSTU's fused output path ``y = u ⊙ LayerNorm(x)`` (optional affine ``weight, bias``), forward
and backward: one program normalises ``BLOCK_ROWS`` rows of ``(N, E)`` inputs whole (``E <= BLOCK_E``)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from genrec_kernels.triton_hstu import _check_device


@triton.jit
def _normalise(X, rows, cols, mask, stride_x, E, eps):
    """``x̂ (BLOCK_ROWS, BLOCK_E)`` fp32 (zero outside ``mask``) and ``rstd (BLOCK_ROWS,)``."""
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / E
    centred = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / E + eps)
    return centred * rstd[:, None], rstd


@triton.jit
def _layer_norm_mul_fwd(U, X, W, B, Y, N, E, stride_u, stride_x, eps, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                        BLOCK_ROWS: tl.constexpr, BLOCK_E: tl.constexpr):
    """Grid ``(cdiv(N, BLOCK_ROWS),)``; ``Y`` contiguous ``(N, E)``."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_E)
    mask = (rows[:, None] < N) & (cols[None, :] < E)
    y, _ = _normalise(X, rows, cols, mask, stride_x, E, eps)
    if HAS_W:
        y *= tl.load(W + cols, mask=cols < E, other=0.0).to(tl.float32)[None, :]
    if HAS_B:
        y += tl.load(B + cols, mask=cols < E, other=0.0).to(tl.float32)[None, :]
    u = tl.load(U + rows[:, None] * stride_u + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + rows[:, None] * E + cols[None, :], (u * y).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _layer_norm_mul_bwd(G, U, X, W, B, DU, DX, DW_PART, DB_PART, N, E, stride_u, stride_x, eps,
                        HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_E: tl.constexpr):
    """Grid ``(cdiv(N, BLOCK_ROWS),)``: ``DU, DX`` contiguous ``(N, E)``; this program's sums of ``dweight`` and
    ``dbias`` over its rows in row ``pid`` of ``DW_PART, DB_PART (programs, E)``."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_E)
    mask = (rows[:, None] < N) & (cols[None, :] < E)
    xhat, rstd = _normalise(X, rows, cols, mask, stride_x, E, eps)
    normed = xhat
    w = tl.full((BLOCK_E,), 1.0, tl.float32)
    if HAS_W:
        w = tl.load(W + cols, mask=cols < E, other=0.0).to(tl.float32)
        normed = normed * w[None, :]
    if HAS_B:
        normed += tl.load(B + cols, mask=cols < E, other=0.0).to(tl.float32)[None, :]
    g = tl.load(G + rows[:, None] * E + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + rows[:, None] * stride_u + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    dn = g * u  # d loss / d LayerNorm(x)
    tl.store(DU + rows[:, None] * E + cols[None, :], (g * normed).to(DU.dtype.element_ty), mask=mask)
    dxhat = tl.where(mask, dn * w[None, :], 0.0)
    dx = rstd[:, None] * (dxhat - (tl.sum(dxhat, axis=1) / E)[:, None]
                          - xhat * (tl.sum(dxhat * xhat, axis=1) / E)[:, None])
    tl.store(DX + rows[:, None] * E + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
    if HAS_W:
        tl.store(DW_PART + pid * E + cols, tl.sum(dn * xhat, axis=0), mask=cols < E)
    if HAS_B:
        tl.store(DB_PART + pid * E + cols, tl.sum(tl.where(mask, dn, 0.0), axis=0), mask=cols < E)


def _blocks(e: int) -> dict:
    block_e = max(16, triton.next_power_of_2(e))
    return dict(BLOCK_ROWS=max(1, min(64, 4096 // block_e)), BLOCK_E=block_e)


def _placeholder(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return t if t is not None else like.new_zeros(1)


def layer_norm_mul_forward(u: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                           eps: float) -> torch.Tensor:
    """``u, x (N, E)`` (last dim contiguous) -> ``(N, E)``."""
    _check_device(x)
    (n, e), blocks = x.shape, _blocks(x.shape[1])
    y = torch.empty((n, e), dtype=x.dtype, device=x.device)
    _layer_norm_mul_fwd[(triton.cdiv(n, blocks["BLOCK_ROWS"]),)](
        u, x, _placeholder(weight, x), _placeholder(bias, x), y, n, e, u.stride(0), x.stride(0), eps,
        HAS_W=weight is not None, HAS_B=bias is not None, **blocks)
    return y


def layer_norm_mul_backward(grad: torch.Tensor, u: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                            bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, ...]:
    """``grad (N, E)`` -> ``du, dx (N, E)``, ``dweight, dbias (E,)`` (``None`` where absent)."""
    _check_device(x)
    (n, e), blocks = x.shape, _blocks(x.shape[1])
    programs = triton.cdiv(n, blocks["BLOCK_ROWS"])
    du, dx = (torch.empty((n, e), dtype=t.dtype, device=t.device) for t in (u, x))
    dw_part = torch.zeros(programs, e, device=x.device) if weight is not None else x.new_zeros(1)
    db_part = torch.zeros(programs, e, device=x.device) if bias is not None else x.new_zeros(1)
    _layer_norm_mul_bwd[(programs,)](
        grad.contiguous(), u, x, _placeholder(weight, x), _placeholder(bias, x), du, dx, dw_part, db_part, n, e,
        u.stride(0), x.stride(0), eps, HAS_W=weight is not None, HAS_B=bias is not None, **blocks)
    return (du, dx, dw_part.sum(0).to(weight.dtype) if weight is not None else None,
            db_part.sum(0).to(bias.dtype) if bias is not None else None)
