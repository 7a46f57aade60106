"""The interface every sequence encoder implements (SASRec, HSTU, ...)."""
from __future__ import annotations

import torch
from torch import nn


class SequenceEncoder(nn.Module):
    """Jagged item embeddings -> per-position user states, causally (position ``t`` sees positions ``<= t``).

    Subclasses implement :meth:`forward` and set ``self.dim`` (input and output width ``D``).
    """

    dim: int

    def forward(self, embeddings: torch.Tensor, offsets: torch.Tensor, timestamps: torch.Tensor | None = None,
                query_timestamps: torch.Tensor | None = None) -> torch.Tensor:
        """
        Args:
            embeddings: ``(N, D)`` input item embeddings, jagged by ``offsets``.
            offsets: ``(B + 1,)`` int64 sequence boundaries.
            timestamps: ``(N,)`` int64 event times, for encoders that use them.
            query_timestamps: ``(N,)`` int64 time of the event each position predicts (see JaggedBatch).
        Returns:
            ``(N, D)`` user state after each position.
        """
        raise NotImplementedError
