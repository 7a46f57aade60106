"""Residual k-means (RQ-KMeans): one faiss k-means per level, each on what the previous levels left over."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from genrec.errors import UserError
from genrec.tokenize.kmeans import as_points, assign, balanced_assign, balanced_kmeans, kmeans, squared_distances


class ResidualKMeans:
    """``num_levels`` codebooks of ``codebook_size`` centroids each.

    Level ``l`` clusters the residuals ``r_l`` (``r_0 = x``) and passes on ``r_{l+1} = u_l - C_l[c_l]``, where
    ``u_l = r_l`` or, with ``normalize_residuals``, ``u_l = r_l / ||r_l||`` (every level then clusters directions,
    so small residuals do not crowd around a few central codes). Decoding sums the chosen centroids, each scaled by
    the product of the mean residual norms of its level and the levels above (all 1 without normalisation).

    Args:
        num_levels: levels ``L``.
        codebook_size: codes per level ``K``.
        first_codebook_size: ``K_0`` of the first level when it differs from ``K`` (``None``: ``K``).
        niter: Lloyd iterations per level.
        normalize_residuals: L2-normalise each item's residual before clustering it.
        balanced: capacity-constrained clusters (at most ``ceil(N / K)`` items per code), so codes are used
            evenly; assignment is then balanced over the items encoded together (the whole catalogue).
        balance_iters: balanced assignment + centroid update rounds after the plain k-means.
    """

    def __init__(self, num_levels: int = 3, codebook_size: int = 256, niter: int = 25,
                 normalize_residuals: bool = False, balanced: bool = False, balance_iters: int = 10,
                 first_codebook_size: int | None = None):
        if num_levels < 1 or codebook_size < 2 or (first_codebook_size is not None and first_codebook_size < 2):
            raise UserError(f"tokenizer.num_levels must be >= 1 and tokenizer.codebook_size (and "
                            f"first_codebook_size) >= 2, got {num_levels}, {codebook_size}, {first_codebook_size}")
        self.num_levels, self.codebook_size, self.niter = num_levels, codebook_size, niter
        self.first_codebook_size = first_codebook_size
        #: ``K_l`` of every level
        self.codebook_sizes = [first_codebook_size or codebook_size] + [codebook_size] * (num_levels - 1)
        self.normalize_residuals, self.balanced, self.balance_iters = normalize_residuals, balanced, balance_iters
        self.codebooks: list[np.ndarray] = []   # L x (K, D)
        self.norm_scales: list[float] = []      # L mean residual norms (1.0 without normalisation)

    def fit(self, x: np.ndarray, seed: int = 0) -> "ResidualKMeans":
        residual = as_points(x)
        self.codebooks, self.norm_scales = [], []
        for level in range(self.num_levels):
            unit, norms = self._normalize(residual)
            fit = balanced_kmeans if self.balanced else kmeans
            extra = {"balance_iters": self.balance_iters} if self.balanced else {}
            centroids = fit(unit, self.codebook_sizes[level], niter=self.niter, seed=seed + level, **extra)
            self.codebooks.append(centroids)
            self.norm_scales.append(float(norms.mean()) if self.normalize_residuals else 1.0)
            residual = unit - centroids[self._assign(unit, centroids)]
        return self

    def _normalize(self, residual: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        norms = np.linalg.norm(residual, axis=1)
        if not self.normalize_residuals:
            return residual, norms
        return (residual / np.maximum(norms, 1e-12)[:, None]).astype(np.float32), norms

    def _assign(self, points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
        if self.balanced:
            return balanced_assign(squared_distances(points, centroids), math.ceil(len(points) / len(centroids)))
        return assign(points, centroids)[0]

    def _levels(self, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """``(N, L)`` codes and the ``L`` inputs ``u_l (N, D)`` each level quantised."""
        if not self.codebooks:
            raise RuntimeError("ResidualKMeans.fit must run before encoding")
        residual, inputs, codes = as_points(x), [], []
        for centroids in self.codebooks:
            unit, _ = self._normalize(residual)
            code = self._assign(unit, centroids)
            inputs.append(unit)
            codes.append(code)
            residual = unit - centroids[code]
        return np.stack(codes, axis=1), inputs

    def encode(self, x: np.ndarray) -> np.ndarray:
        return self._levels(x)[0]

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """``(N, L)`` codes -> ``(N, D)`` sum of the chosen centroids, scaled as described in the class doc."""
        out = np.zeros((len(codes), self.codebooks[0].shape[1]), dtype=np.float32)
        scale = 1.0
        for level, centroids in enumerate(self.codebooks):
            scale *= self.norm_scales[level]
            out += scale * centroids[codes[:, level]]
        return out

    def reconstruct(self, x: np.ndarray) -> np.ndarray:
        return self.decode(self.encode(x))

    def last_level_distances(self, x: np.ndarray) -> np.ndarray:
        _, inputs = self._levels(x)
        return squared_distances(inputs[-1], self.codebooks[-1])

    def describe(self) -> dict[str, Any]:
        return {"method": "residual_kmeans", "num_levels": self.num_levels, "codebook_size": self.codebook_size,
                "first_codebook_size": self.first_codebook_size,
                "niter": self.niter, "normalize_residuals": self.normalize_residuals, "balanced": self.balanced,
                "norm_scales": [round(s, 6) for s in self.norm_scales]}
