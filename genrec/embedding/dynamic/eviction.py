"""Which rows leave tier 0 when it is full: LRU or LFU with decay. Both cost ``O(1)`` per ID, whatever the size.

Both keep, per slot, the step (batch number) of its last use. A slot used by one of the last ``pinned`` batches
(the batches that may still be training while a later one is mapped) is never a victim.

- :class:`LRU` is exact at batch granularity: victims are the slots whose last use is oldest, ties broken by raw ID
  (a batch's slots are queued in ID order). A FIFO of (slot, step) records with lazy deletion: a use appends a
  record, a record is stale once its slot was used again; the queue is compacted when it fills (amortised ``O(1)``).
- :class:`LFU` scores a slot by its decayed count ``sum_t count_t * decay^(now - t)`` and evicts the lowest scores
  among ``sample * k`` slots drawn at random (seeded by (seed, step)): the Redis approach, which avoids sorting the
  table (what makes TorchRec's MCH cost grow with its size). bench_dynamic compares its hit rate with exact LFU.
"""
from __future__ import annotations

import math

import numpy as np

from genrec.errors import UserError

EVICTION_POLICIES = ("lru", "lfu")


class NotEnoughRows(UserError):
    """Tier 0 cannot hold the rows of the batches in flight (``embedding.capacity`` is too small for them: with the
    full softmax every item is a candidate of every step)."""


class Eviction:
    """Per-slot last use; subclasses choose victims."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.last_step = np.full(capacity, -1, dtype=np.int64)  # -1: free slot

    def pin(self, slots: np.ndarray, step: int) -> None:
        """Mark slots as used by batch ``step`` (so they are not victims while it is mapped) before :meth:`touch`."""
        self.last_step[slots] = step

    def touch(self, slots: np.ndarray, step: int, counts: np.ndarray) -> None:
        """Slots (distinct, in ascending raw-ID order) used ``counts`` times in batch ``step``."""
        self.last_step[slots] = step

    def free(self, slots: np.ndarray) -> None:
        self.last_step[slots] = -1

    def victims(self, k: int, pin_from: int, step: int) -> np.ndarray:
        """``k`` occupied slots last used before step ``pin_from``."""
        raise NotImplementedError

    def counts_of(self, slots: np.ndarray, step: int) -> np.ndarray:
        """``(k,)`` float64 decayed counts as of each slot's last use (what travels with a row to the store)."""
        return np.zeros(len(slots))

    def restore_counts(self, slots: np.ndarray, counts: np.ndarray, last_steps: np.ndarray) -> None:
        """Rows coming back from the store (or a checkpoint) with their decayed counts as of ``last_steps``."""


class LRU(Eviction):
    def __init__(self, capacity: int):
        super().__init__(capacity)
        self._slot = np.empty(2 * capacity + 1, dtype=np.int64)
        self._step = np.empty(2 * capacity + 1, dtype=np.int64)
        self._head = self._tail = 0

    def touch(self, slots: np.ndarray, step: int, counts: np.ndarray) -> None:
        super().touch(slots, step, counts)
        if self._tail + len(slots) > len(self._slot):
            self._compact()
        self._slot[self._tail:self._tail + len(slots)] = slots
        self._step[self._tail:self._tail + len(slots)] = step
        self._tail += len(slots)

    def _compact(self) -> None:
        slots, steps = self._slot[self._head:self._tail], self._step[self._head:self._tail]
        valid = self.last_step[slots] == steps
        n = int(valid.sum())
        self._slot[:n], self._step[:n] = slots[valid], steps[valid]
        self._head, self._tail = 0, n

    def victims(self, k: int, pin_from: int, step: int) -> np.ndarray:
        found: list[np.ndarray] = []
        needed = k
        while needed:
            end = min(self._tail, self._head + max(2 * needed, 1024))
            slots, steps = self._slot[self._head:end], self._step[self._head:end]
            pinned = np.flatnonzero(steps >= pin_from)
            stop = pinned[0] if len(pinned) else len(slots)
            valid = np.flatnonzero(self.last_step[slots[:stop]] == steps[:stop])
            if len(valid) >= needed:
                found.append(slots[valid[:needed]])
                self._head += int(valid[needed - 1]) + 1
                break
            found.append(slots[valid])
            needed -= len(valid)
            self._head += stop
            if stop < len(slots) or end == self._tail:
                raise NotEnoughRows(f"tier 0 holds {self.capacity} rows, too few for the distinct IDs (inputs and the loss's candidates) of the last "
                                    f"{step - pin_from + 1} batches; raise embedding.capacity")
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    def rebuild(self, slots: np.ndarray, ids: np.ndarray) -> None:
        """The queue of occupied ``slots`` (holding raw ``ids``) from their last use: order (last step, raw ID)."""
        order = np.lexsort((ids, self.last_step[slots]))
        self._head, self._tail = 0, len(slots)
        self._slot[:len(slots)] = slots[order]
        self._step[:len(slots)] = self.last_step[slots[order]]


class LFU(Eviction):
    """Args: decay: per-step factor of the counts (1.0: plain LFU); sample: candidates drawn per victim."""

    _RENORMALISE = 1e100

    def __init__(self, capacity: int, decay: float, sample: int, seed: int = 0):
        super().__init__(capacity)
        self.decay, self.sample, self.seed = decay, sample, seed
        self.score = np.zeros(capacity, dtype=np.float64)  # decayed count * growth^(step - base), base below
        self._log_growth = -math.log(decay)
        self._base = 0

    def _growth(self, step) -> np.ndarray | float:
        return np.exp(self._log_growth * (np.asarray(step, dtype=np.float64) - self._base))

    def touch(self, slots: np.ndarray, step: int, counts: np.ndarray) -> None:
        super().touch(slots, step, counts)
        growth = float(self._growth(step))
        if growth > self._RENORMALISE:  # rescale every score to base = step (order unchanged)
            self.score /= growth
            self._base, growth = step, 1.0
        self.score[slots] += counts * growth

    def free(self, slots: np.ndarray) -> None:
        super().free(slots)
        self.score[slots] = 0.0

    def counts_of(self, slots: np.ndarray, step: int) -> np.ndarray:
        return self.score[slots] / self._growth(self.last_step[slots])

    def restore_counts(self, slots: np.ndarray, counts: np.ndarray, last_steps: np.ndarray) -> None:
        self.score[slots] = counts * self._growth(last_steps)

    def victims(self, k: int, pin_from: int, step: int) -> np.ndarray:
        if k == 0:
            return np.zeros(0, dtype=np.int64)
        rng = np.random.default_rng([self.seed, step])
        draws = self.sample * k
        while draws < self.capacity:  # sampled; draws double while too few candidates are evictable
            candidates = rng.integers(0, self.capacity, draws)
            candidates = candidates[(self.last_step[candidates] >= 0) & (self.last_step[candidates] < pin_from)]
            # the lowest scores with a margin for the (rare) slots drawn twice, then distinct
            lowest = np.unique(self._lowest(candidates, min(len(candidates), k + k // 8 + 16)))
            if len(lowest) >= k:
                return np.sort(self._lowest(lowest, k))
            draws *= 2
        candidates = np.flatnonzero((self.last_step >= 0) & (self.last_step < pin_from))  # exact: whole table
        if len(candidates) < k:
            raise NotEnoughRows(f"tier 0 holds {self.capacity} rows, too few for the distinct IDs (inputs and the loss's candidates) of the last "
                                f"{step - pin_from + 1} batches; raise embedding.capacity")
        return np.sort(self._lowest(candidates, k))

    def _lowest(self, candidates: np.ndarray, k: int) -> np.ndarray:
        """The ``k`` candidates of lowest score (all of them when there are no more than ``k``)."""
        if len(candidates) <= k:
            return candidates
        return candidates[np.argpartition(self.score[candidates], k - 1)[:k]]

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"score": self.score, "base": np.array(self._base)}
