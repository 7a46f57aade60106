"""What the SID pipeline needs from a residual quantizer (residual k-means, RQ-VAE, ...)."""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class Quantizer(Protocol):
    """Maps item embeddings ``(N, D)`` to ``num_levels`` codes, level ``l``'s in ``0..codebook_sizes[l]-1``.

    ``fit`` learns the codebooks on the whole catalogue; the other methods take the same kind of input.
    """

    num_levels: int
    codebook_size: int
    codebook_sizes: list[int]

    def fit(self, x: np.ndarray, seed: int = 0) -> "Quantizer":
        """Learn from ``(N, D)`` float32 embeddings; deterministic for a given ``seed``."""

    def encode(self, x: np.ndarray) -> np.ndarray:
        """``(N, D)`` -> ``(N, num_levels)`` int64 codes."""

    def reconstruct(self, x: np.ndarray) -> np.ndarray:
        """``(N, D)`` -> ``(N, D)``: the input rebuilt from its codes (decoded), for the reconstruction error."""

    def last_level_distances(self, x: np.ndarray) -> np.ndarray:
        """``(N, codebook_size)`` squared distance of each item's last-level residual to every last-level code
        (what re-assignment to the nearest free code ranks by)."""

    def describe(self) -> dict[str, Any]:
        """Settings and fit statistics for metrics.json."""
