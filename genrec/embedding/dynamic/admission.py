"""Feature admission: which new IDs get a row. ``always``, ``min_count`` (a count-min sketch), ``probability``.

An ID that is not admitted has no row and no optimizer state; the table gives it its default vector. Decisions are
functions of the stream alone (the sketch's counts, or a hash of (seed, ID, step)), so replays agree.
"""
from __future__ import annotations

import math

import numpy as np

from genrec.embedding.dynamic.hashing import mix64, uniform01

ADMISSION_POLICIES = ("always", "min_count", "probability")


class CountMinSketch:
    """Approximate occurrence counts in ``depth x width`` int64 counters (Cormode & Muthukrishnan 2005).

    Each ID increments one counter per row (row ``r`` hashes it with seed ``seed + r``); its estimate is the
    minimum over rows. Error bound: the estimate is never below the true count, and with ``N`` the total of all
    counts added, ``estimate <= true + (e / width) * N`` with probability at least ``1 - exp(-depth)`` for each
    query. Memory: ``8 * depth * width`` bytes, whatever the number of distinct IDs.

    Args:
        width: counters per row (the error's ``e / width`` factor).
        depth: rows (the failure probability's ``exp(-depth)``).
        seed: hash seed of row 0.
    """

    def __init__(self, width: int, depth: int, seed: int = 0):
        self.width, self.depth, self.seed = width, depth, seed
        self.counts = np.zeros((depth, width), dtype=np.int64)
        self.total = 0

    def _columns(self, ids: np.ndarray) -> np.ndarray:
        """``(B,)`` -> ``(depth, B)`` counter index per row."""
        return np.stack([(mix64(ids, self.seed + r) % np.uint64(self.width)).astype(np.int64)
                         for r in range(self.depth)])

    def add(self, ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Add ``(B,)`` occurrence ``counts`` of ``(B,)`` IDs; returns their ``(B,)`` estimates after the add."""
        columns = self._columns(ids)
        for r in range(self.depth):
            np.add.at(self.counts[r], columns[r], counts)
        self.total += int(counts.sum())
        return self.counts[np.arange(self.depth)[:, None], columns].min(axis=0)

    def estimate(self, ids: np.ndarray) -> np.ndarray:
        """``(B,)`` IDs -> ``(B,)`` estimated counts."""
        return self.counts[np.arange(self.depth)[:, None], self._columns(ids)].min(axis=0)

    def error_bound(self) -> float:
        """The additive error ``(e / width) * N`` that an estimate exceeds with probability <= ``exp(-depth)``."""
        return math.e / self.width * self.total


class Admission:
    """Admission policy of one table.

    Args:
        policy: ``always`` | ``min_count`` (admit once an ID's estimated count reaches ``min_count``) |
            ``probability`` (each batch in which a not-yet-admitted ID occurs admits it with probability
            ``probability``, decided by a hash of (seed, ID, step): an ID seen in ``n`` batches has been admitted
            with probability ``1 - (1 - p)^n``).
        min_count: the count threshold (``min_count``).
        probability: the per-batch probability (``probability``).
        sketch_width / sketch_depth: the count-min sketch of ``min_count`` (see :class:`CountMinSketch`).
        seed: hash seed.
    """

    def __init__(self, policy: str = "always", min_count: int = 2, probability: float = 1.0,
                 sketch_width: int = 1 << 20, sketch_depth: int = 4, seed: int = 0):
        if policy not in ADMISSION_POLICIES:
            raise ValueError(f"admission policy must be one of {ADMISSION_POLICIES}, got {policy!r}")
        self.policy, self.min_count, self.probability, self.seed = policy, min_count, probability, seed
        self.sketch = CountMinSketch(sketch_width, sketch_depth, seed) if policy == "min_count" else None

    def admit(self, ids: np.ndarray, counts: np.ndarray, step: int) -> np.ndarray:
        """``(B,)`` distinct IDs that have no row, with their ``(B,)`` occurrence counts in batch ``step`` ->
        ``(B,)`` bool: which to admit now."""
        if self.policy == "always":
            return np.ones(len(ids), dtype=bool)
        if self.policy == "min_count":
            return self.sketch.add(ids, counts) >= self.min_count
        return uniform01(ids, self.seed, salt=step) < self.probability

    def state_dict(self) -> dict[str, np.ndarray]:
        if self.sketch is None:
            return {}
        return {"sketch": self.sketch.counts, "sketch_total": np.array(self.sketch.total)}

    def load_state_dict(self, states: list[dict[str, np.ndarray]]) -> None:
        """Load the states of one or more shards of a table: sketches are summed (each shard counted only the IDs
        it owns, so the sum is the sketch of the whole stream)."""
        if self.sketch is None:
            return
        self.sketch.counts = sum(s["sketch"] for s in states).astype(np.int64)
        self.sketch.total = int(sum(int(s["sketch_total"]) for s in states))
