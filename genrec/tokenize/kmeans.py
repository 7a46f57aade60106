"""k-means on faiss, nearest-centroid assignment, and a balanced (capacity-constrained) variant.

All arrays are float32 NumPy: points ``(N, D)``, centroids ``(K, D)``.
"""
from __future__ import annotations

import math

import faiss
import numpy as np

from genrec.errors import UserError


def as_points(x: np.ndarray) -> np.ndarray:
    """``x`` as a C-contiguous float32 ``(N, D)`` array (what faiss takes)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"expected points of shape (N, D), got {x.shape}")
    return x


def kmeans_plus_plus(x: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """k-means++ seeding: the first centre uniformly at random, each next one with probability proportional to
    the squared distance to the nearest centre so far. Returns ``(k, D)`` float32 centres."""
    rng = np.random.default_rng(seed)
    norms = (x * x).sum(1)

    def distance_to(i: int) -> np.ndarray:
        return np.maximum(norms + norms[i] - 2.0 * (x @ x[i]), 0.0).astype(np.float64)

    chosen = [int(rng.integers(len(x)))]
    nearest = distance_to(chosen[0])
    for _ in range(1, k):
        total = nearest.sum()
        pick = int(rng.choice(len(x), p=nearest / total)) if total > 0 else int(rng.integers(len(x)))
        chosen.append(pick)
        nearest = np.minimum(nearest, distance_to(pick))
    return x[chosen].copy()


def kmeans(x: np.ndarray, k: int, niter: int = 25, seed: int = 0) -> np.ndarray:
    """k-means on all of ``x``: k-means++ seeding, then ``niter`` faiss Lloyd iterations (an empty cluster is
    re-split from a large one). Returns ``(k, D)`` float32 centroids; deterministic for a given ``seed``."""
    x = as_points(x)
    if len(x) < k:
        raise UserError(f"k-means with k={k} codes needs at least {k} points, got {len(x)}")
    km = faiss.Kmeans(x.shape[1], k, niter=niter, seed=seed, verbose=False,
                      min_points_per_centroid=1, max_points_per_centroid=1 << 30)  # no sampling, no warning
    km.train(x, init_centroids=kmeans_plus_plus(x, k, seed))
    return km.centroids.copy()


def assign(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid by exact L2 search (faiss ``IndexFlatL2``): ``(N,)`` int64 codes and ``(N,)`` squared
    distances."""
    x, centroids = as_points(x), as_points(centroids)
    index = faiss.IndexFlatL2(centroids.shape[1])
    index.add(centroids)
    distances, codes = index.search(x, 1)
    return codes[:, 0].astype(np.int64), distances[:, 0]


def squared_distances(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """``(N, K)`` squared L2 distance of every point to every centroid (float32, one matrix product)."""
    x, centroids = as_points(x), as_points(centroids)
    distances = (x * x).sum(1)[:, None] - 2.0 * (x @ centroids.T) + (centroids * centroids).sum(1)[None, :]
    return np.maximum(distances, 0.0)


def balanced_assign(distances: np.ndarray, capacity: int) -> np.ndarray:
    """Assign each of ``N`` points to a centroid, at most ``capacity`` points per centroid, preferring near ones.

    Rounds of proposals: every unassigned point proposes to its nearest centroid that still has room; each
    centroid accepts its closest proposers up to its remaining room; the rest move on to their next choice.
    Deterministic (ties by point index). Requires ``capacity * K >= N``.

    Args:
        distances: ``(N, K)`` point-to-centroid distances.
        capacity: most points per centroid.
    Returns:
        ``(N,)`` int64 codes.
    """
    n, k = distances.shape
    if capacity * k < n:
        raise UserError(f"capacity {capacity} x {k} centroids cannot hold {n} points")
    preference = np.argsort(distances, axis=1, kind="stable")  # (N, K) centroids by distance
    choice = np.zeros(n, dtype=np.int64)  # position in each point's preference list
    codes = np.full(n, -1, dtype=np.int64)
    load = np.zeros(k, dtype=np.int64)
    todo = np.arange(n)
    while len(todo):
        target = preference[todo, choice[todo]]
        full = load[target] >= capacity
        choice[todo[full]] += 1
        todo, target = todo[~full], target[~full]
        if not len(todo):
            todo = np.nonzero(codes < 0)[0]
            continue
        order = np.lexsort((todo, distances[todo, target], target))  # by centroid, then distance, then index
        todo, target = todo[order], target[order]
        first = np.searchsorted(target, target, side="left")
        rank = np.arange(len(target)) - first  # rank among proposers to the same centroid
        accepted = rank < capacity - load[target]
        codes[todo[accepted]] = target[accepted]
        np.add.at(load, target[accepted], 1)
        choice[todo[~accepted]] += 1
        todo = np.nonzero(codes < 0)[0]
    return codes


def balanced_kmeans(x: np.ndarray, k: int, niter: int = 25, seed: int = 0, balance_iters: int = 10
                    ) -> np.ndarray:
    """k-means whose clusters hold at most ``ceil(N / k)`` points: faiss k-means, then ``balance_iters`` rounds
    of balanced assignment + centroid update. Returns ``(k, D)`` float32 centroids."""
    x = as_points(x)
    centroids = kmeans(x, k, niter, seed)
    capacity = math.ceil(len(x) / k)
    for _ in range(balance_iters):
        codes = balanced_assign(squared_distances(x, centroids), capacity)
        sums = np.zeros_like(centroids, dtype=np.float64)
        np.add.at(sums, codes, x)
        counts = np.bincount(codes, minlength=k)
        centroids = (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)
    return centroids
