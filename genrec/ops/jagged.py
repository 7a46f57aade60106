"""Jagged <-> padded conversion in plain PyTorch (the reference path; genrec_kernels has faster ones) and the
per-batch :class:`JaggedLayout`."""
from __future__ import annotations

from typing import Any, Callable

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


class JaggedLayout:
    """One batch's sequence boundaries with the index tensors derived from them, computed once per forward and
    shared by every layer (and every attention implementation) that needs them.

    Attributes:
        offsets: ``(B + 1,)`` int64 boundaries.
        lengths: ``(B,)`` sequence lengths.
        max_len: the longest sequence (a Python int).
    """

    def __init__(self, offsets: torch.Tensor):
        self.offsets = offsets
        self.lengths = offsets[1:] - offsets[:-1]
        self.max_len = int(self.lengths.max()) if len(self.lengths) else 0
        self._memo: dict[Any, Any] = {}

    @property
    def batch_size(self) -> int:
        return len(self.lengths)

    def index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(row, col)``, each ``(N,)``: the sequence and the position of every value (see :func:`jagged_index`)."""
        return self.memo("index", lambda: jagged_index(self.offsets))

    def memo(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()`` once per layout and ``key``; later calls return the same object."""
        if key not in self._memo:
            self._memo[key] = build()
        return self._memo[key]
