"""Jagged <-> padded conversion in plain PyTorch (the reference path; genrec.kernels has faster ones)."""
from __future__ import annotations

import torch


def jagged_index(offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``offsets (B + 1,)`` return ``(row, col)``, each ``(N,)``: sequence index and position of every value."""
    lengths = offsets[1:] - offsets[:-1]
    row = torch.repeat_interleave(torch.arange(len(lengths), device=offsets.device), lengths)
    col = torch.arange(int(offsets[-1]), device=offsets.device) - offsets[:-1][row]
    return row, col


def jagged_to_padded(values: torch.Tensor, offsets: torch.Tensor, max_len: int, pad_value: float = 0.0
                     ) -> torch.Tensor:
    """``(N, *F)`` jagged values -> ``(B, max_len, *F)`` right-padded with ``pad_value``.

    Every sequence must fit: ``max_len >= max(lengths)``.
    """
    row, col = jagged_index(offsets)
    out = values.new_full((len(offsets) - 1, max_len, *values.shape[1:]), pad_value)
    out[row, col] = values
    return out


def padded_to_jagged(padded: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``(B, L, *F)`` right-padded -> ``(N, *F)`` jagged values (padding dropped)."""
    row, col = jagged_index(offsets)
    return padded[row, col]
