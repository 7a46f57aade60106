"""Triton kernels of jagged <-> padded conversion on ``(N, D)`` rows: one program copies ``BLOCK_L`` positions of one
sequence, ``BLOCK_D`` columns at a time."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from genrec_kernels.triton_hstu import _check_device


@triton.jit
def _jagged_to_padded(VALUES, OFFSETS, PADDED, pad_value, max_len, D, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    """Grid ``(B, cdiv(max_len, BLOCK_L))``: ``PADDED[b, l] = VALUES[offsets[b] + l]`` or ``pad_value``."""
    b, pid_l = tl.program_id(0), tl.program_id(1)
    start = tl.load(OFFSETS + b)
    n = tl.load(OFFSETS + b + 1) - start
    offs_l = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    inside = offs_l < n
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        mask_d = offs_d[None, :] < D
        x = tl.load(VALUES + (start + offs_l)[:, None] * D + offs_d[None, :], mask=inside[:, None] & mask_d,
                    other=pad_value)
        tl.store(PADDED + (b * max_len + offs_l)[:, None] * D + offs_d[None, :], x,
                 mask=(offs_l < max_len)[:, None] & mask_d)


@triton.jit
def _padded_to_jagged(PADDED, OFFSETS, VALUES, max_len, D, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    """Grid ``(B, cdiv(max_len, BLOCK_L))``: ``VALUES[offsets[b] + l] = PADDED[b, l]`` for ``l < n_b``."""
    b, pid_l = tl.program_id(0), tl.program_id(1)
    start = tl.load(OFFSETS + b)
    n = tl.load(OFFSETS + b + 1) - start
    offs_l = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    inside = offs_l < n
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        mask = inside[:, None] & (offs_d[None, :] < D)
        x = tl.load(PADDED + (b * max_len + offs_l)[:, None] * D + offs_d[None, :], mask=mask)
        tl.store(VALUES + (start + offs_l)[:, None] * D + offs_d[None, :], x, mask=mask)


def _blocks(d: int) -> dict:
    block_d = min(128, max(16, triton.next_power_of_2(d)))
    return dict(BLOCK_L=max(1, 2048 // block_d), BLOCK_D=block_d)


def jagged_to_padded(values: torch.Tensor, offsets: torch.Tensor, max_len: int, pad_value: float) -> torch.Tensor:
    """``values (N, D)`` contiguous -> ``(B, max_len, D)``."""
    _check_device(values)
    blocks = _blocks(values.shape[1])
    padded = values.new_empty(len(offsets) - 1, max_len, values.shape[1])
    grid = (len(offsets) - 1, triton.cdiv(max_len, blocks["BLOCK_L"]))
    if padded.numel() == 0:
        return padded
    _jagged_to_padded[grid](values, offsets, padded, pad_value, max_len, values.shape[1], **blocks)
    return padded


def padded_to_jagged(padded: torch.Tensor, offsets: torch.Tensor, total: int) -> torch.Tensor:
    """``padded (B, L, D)`` contiguous -> ``(total, D)``."""
    _check_device(padded)
    blocks = _blocks(padded.shape[2])
    values = padded.new_empty(total, padded.shape[2])
    grid = (len(offsets) - 1, triton.cdiv(padded.shape[1], blocks["BLOCK_L"]))
    if values.numel() == 0:
        return values
    _padded_to_jagged[grid](padded, offsets, values, padded.shape[1], padded.shape[2], **blocks)
    return values
