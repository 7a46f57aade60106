"""Make every item's code tuple unique: an extra disambiguating level, or re-assignment to the nearest free code.

Both take ``codes (N, L)`` int64 (row ``i`` = item ``i + 1``) and return unique rows.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from genrec.errors import UserError

STRATEGIES = ("extra_level", "nearest_free")


def _groups(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(N,)`` group index of each row (equal rows share it) and ``(G,)`` group sizes."""
    _, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    return inverse.reshape(-1), counts


def collision_stats(codes: np.ndarray) -> dict[str, Any]:
    """How many items share their whole code tuple with another item.

    Returns ``colliding_items`` (items in a shared tuple), ``collision_rate`` (that over ``N``),
    ``excess_items`` (``N`` minus distinct tuples: items that must move), ``groups`` (shared tuples) and
    ``max_group`` (most items on one tuple).
    """
    group, counts = _groups(codes)
    shared = counts[group] > 1
    return {"colliding_items": int(shared.sum()), "collision_rate": float(shared.mean()) if len(codes) else 0.0,
            "excess_items": int(len(codes) - len(counts)), "groups": int((counts > 1).sum()),
            "max_group": int(counts.max()) if len(counts) else 0}


def add_disambiguation_level(codes: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, int]:
    """Append a level numbering the items of each shared tuple ``0, 1, ...`` by ascending ``order`` (ties: item
    order); an item whose tuple is unique gets 0. Returns ``(N, L + 1)`` codes and that level's size (the
    largest group)."""
    group, counts = _groups(codes)
    sort = np.lexsort((np.arange(len(codes)), order, group))
    sorted_group = group[sort]
    rank = np.arange(len(codes)) - np.searchsorted(sorted_group, sorted_group, side="left")
    extra = np.empty(len(codes), dtype=np.int64)
    extra[sort] = rank
    return np.concatenate([codes, extra[:, None]], axis=1), int(counts.max())


def reassign_to_free_codes(codes: np.ndarray, last_distances: np.ndarray) -> np.ndarray:
    """Keep the nearest item of each shared tuple; move each other one, nearest first, to the last-level code
    nearest to its residual whose whole tuple is still free. Earlier levels never change.

    Args:
        codes: ``(N, L)`` codes.
        last_distances: ``(N, K)`` distance of each item's last-level residual to every last-level code.
    Returns:
        ``(N, L)`` unique codes.
    Raises:
        ValueError: when a prefix of ``L - 1`` codes holds more than ``K`` items (no free code left under it).
    """
    codes = codes.copy()
    n, k = last_distances.shape
    group, counts = _groups(codes)
    own = last_distances[np.arange(n), codes[:, -1]]
    taken = {tuple(row) for row in codes.tolist()}
    movers = np.nonzero(counts[group] > 1)[0]
    # within each group the nearest item keeps the tuple; the others move, group by group, nearest first
    movers = movers[np.lexsort((movers, own[movers], group[movers]))]
    keep = np.ones(len(movers), dtype=bool)
    keep[1:] = group[movers[1:]] != group[movers[:-1]]
    for item in movers[~keep].tolist():
        prefix = tuple(codes[item, :-1].tolist())
        for code in np.argsort(last_distances[item], kind="stable").tolist():
            if prefix + (code,) not in taken:
                codes[item, -1] = code
                taken.add(prefix + (code,))
                break
        else:
            raise UserError(f"prefix {prefix} holds more than {k} items, so no free last-level code is left; use "
                            f"collisions=extra_level or a larger tokenizer.codebook_size")
    return codes


def resolve_collisions(codes: np.ndarray, strategy: str, last_distances: np.ndarray,
                       codebook_sizes: list[int] | None = None) -> tuple[np.ndarray, list[int]]:
    """Apply ``strategy`` (one of :data:`STRATEGIES`) to ``codes (N, L)`` from a quantizer with ``codebook_sizes``
    codes per level (``None``: ``K`` at every level). Returns unique codes and the per-level codebook sizes.
    ``last_distances (N, K)`` ranks the free codes (nearest_free) or orders the items of a shared tuple
    (extra_level: nearest gets 0)."""
    if strategy not in STRATEGIES:
        raise UserError(f"collisions must be one of {STRATEGIES}, got {strategy!r}")
    k = last_distances.shape[1]
    sizes = list(codebook_sizes) if codebook_sizes else [k] * codes.shape[1]
    if strategy == "extra_level":
        own = last_distances[np.arange(len(codes)), codes[:, -1]]
        resolved, extra = add_disambiguation_level(codes, own)
        return resolved, sizes + [extra]
    return reassign_to_free_codes(codes, last_distances), sizes
