"""Raw int64 ID -> slot: a vectorised open-addressing hash map (linear probing) in numpy.

The index has ``2^k >= 2 * capacity`` positions (load <= 0.5), each holding a key and a value (the slot, ``-1``
empty, ``-2`` deleted) side by side (one cache line per probe, what dominates at tens of millions of slots). A batch of IDs is probed together: every round reads one position per unresolved ID and
advances the rest by one, so the cost of a batch is ``O(B * probe length)`` whatever the table size (the expected
probe length at load 0.5 is 1.5 for a hit, 2.5 for a miss). Deleted positions are reused by inserts; when deleted
plus live positions pass 3/4 of the index it is rebuilt in place (amortised ``O(1)`` per delete).
Raw IDs may take any int64 value: emptiness is kept in the value array, not in a reserved key.
"""
from __future__ import annotations

import numpy as np

from genrec.embedding.dynamic.hashing import mix64

EMPTY, DELETED = -1, -2
_INDEX_SEED = 0x1D_5107


class SlotMap:
    """Up to ``capacity`` distinct IDs, each mapped to one int64 value (its slot).

    Args:
        capacity: the most IDs held at once.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        size = 1
        while size < 2 * capacity:
            size *= 2
        self._mask = size - 1
        self.entries = np.zeros((size, 2), dtype=np.int64)  # (key, value) per position
        self.entries[:, 1] = EMPTY
        self.live, self.deleted = 0, 0

    def __len__(self) -> int:
        return self.live

    def _start(self, ids: np.ndarray) -> np.ndarray:
        return (mix64(ids, _INDEX_SEED) & np.uint64(self._mask)).astype(np.int64)

    def _probe(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(B,)`` IDs -> (``(B,)`` values or -1, ``(B,)`` index position or -1)."""
        found = np.full(len(ids), EMPTY, dtype=np.int64)
        where = np.full(len(ids), -1, dtype=np.int64)
        position = self._start(ids)
        todo = np.arange(len(ids))
        while len(todo):
            p = position[todo]
            entries = self.entries[p]
            value = entries[:, 1]
            hit = (value >= 0) & (entries[:, 0] == ids[todo])
            found[todo[hit]], where[todo[hit]] = value[hit], p[hit]
            todo = todo[~hit & (value != EMPTY)]
            position[todo] = (position[todo] + 1) & self._mask
        return found, where

    def find(self, ids: np.ndarray) -> np.ndarray:
        """``(B,)`` int64 IDs -> ``(B,)`` their values, ``-1`` where absent."""
        return self._probe(np.asarray(ids, dtype=np.int64))[0]

    def insert(self, ids: np.ndarray, values: np.ndarray) -> None:
        """Add ``(B,)`` distinct IDs that are not in the map, with ``(B,)`` non-negative values."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.live + len(ids) > self.capacity:
            raise OverflowError(f"SlotMap holds at most {self.capacity} IDs; {self.live} + {len(ids)} asked")
        if self.live + self.deleted + len(ids) > 3 * (self._mask + 1) // 4:
            self._rebuild()
        position = self._start(ids)
        todo = np.arange(len(ids))
        while len(todo):
            p = position[todo]
            free = self.entries[p, 1] < 0
            candidates, targets = todo[free], p[free]
            _, first = np.unique(targets, return_index=True)  # one winner per free position
            winners, spots = candidates[first], targets[first]
            self.deleted -= int((self.entries[spots, 1] == DELETED).sum())
            self.entries[spots, 0], self.entries[spots, 1] = ids[winners], values[winners]
            placed = np.zeros(len(ids), dtype=bool)
            placed[winners] = True
            todo = todo[~placed[todo]]
            position[todo] = (position[todo] + 1) & self._mask
        self.live += len(ids)

    def remove(self, ids: np.ndarray) -> None:
        """Remove ``(B,)`` distinct IDs that are in the map."""
        _, where = self._probe(np.asarray(ids, dtype=np.int64))
        if (where < 0).any():
            raise KeyError(f"SlotMap.remove: {int((where < 0).sum())} IDs are not in the map")
        self.entries[where, 1] = DELETED
        self.live -= len(ids)
        self.deleted += len(ids)

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """Every ``(ids, values)`` pair, in index order."""
        live = np.flatnonzero(self.entries[:, 1] >= 0)
        return self.entries[live, 0], self.entries[live, 1]

    def _rebuild(self) -> None:
        ids, values = self.items()
        self.entries[:, 1] = EMPTY
        self.live, self.deleted = 0, 0
        for start in range(0, len(ids), 1 << 20):
            self.insert(ids[start:start + (1 << 20)], values[start:start + (1 << 20)])

    @property
    def nbytes(self) -> int:
        return self.entries.nbytes
