"""The most-popular and item-transition baselines, updated online: the same scores as
:mod:`genrec.eval.baselines` (counts, popularity tie-break), from every event seen before the micro-batch instead of
a dataset's training parts. Items are columns of an :class:`ItemIndex` (the items seen so far, in order of first
appearance), which is also the candidate set of the prequential evaluation.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np


class ItemIndex:
    """Raw item IDs seen so far -> columns ``0..C-1`` in order of first appearance."""

    def __init__(self):
        self.ids = np.zeros(0, dtype=np.int64)
        self._sorted = np.zeros(0, dtype=np.int64)
        self._columns = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.ids)

    def columns(self, raw: np.ndarray) -> np.ndarray:
        """``(n,)`` raw IDs -> ``(n,)`` columns, ``-1`` for items not seen."""
        raw = np.asarray(raw, dtype=np.int64)
        if len(self._sorted) == 0:
            return np.full(len(raw), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._sorted, raw), len(self._sorted) - 1)
        return np.where(self._sorted[at] == raw, self._columns[at], -1)

    def add(self, raw: np.ndarray) -> np.ndarray:
        """Add the new ones of ``(n,)`` raw IDs (in order of appearance); returns ``(n,)`` their columns."""
        raw = np.asarray(raw, dtype=np.int64)
        unique, first = np.unique(raw, return_index=True)
        new = unique[self.columns(unique) < 0]
        if len(new):
            new = raw[np.sort(first[np.isin(unique, new)])]
            self.load(np.concatenate([self.ids, new]))
        return self.columns(raw)

    def load(self, ids: np.ndarray) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(self.ids, kind="stable")
        self._sorted, self._columns = self.ids[order], order.astype(np.int64)


class OnlinePopularity:
    """Counts of every item's events so far; scores = counts (the most-popular baseline)."""

    def __init__(self):
        self.counts = np.zeros(0, dtype=np.float64)

    def update(self, columns: np.ndarray, size: int) -> None:
        """Count ``(n,)`` events' item columns (``size``: columns known now)."""
        if len(self.counts) < size:
            self.counts = np.concatenate([self.counts, np.zeros(size - len(self.counts))])
        np.add.at(self.counts, columns, 1.0)

    def scores(self, contexts: list[np.ndarray], size: int) -> np.ndarray:
        """``(M, size)`` the same popularity for every target."""
        row = np.zeros(size)
        row[:len(self.counts)] = self.counts[:size]
        return np.broadcast_to(row, (len(contexts), size)).copy()


class OnlineTransitions:
    """Item-to-item transition counts from every user's consecutive events, as
    :class:`genrec.models.counts.ItemTransitions` scores them: ``sum_j decay**j * C[h_{-1-j}, i]`` over the
    ``num_last`` most recent items of the context, plus ``popularity(i) / (1 + max popularity) * 1e-3``; with
    ``skip``, ``C`` also counts items two steps apart, weighted ``skip_weight``."""

    def __init__(self, popularity: OnlinePopularity, num_last: int = 1, decay: float = 0.5, skip: bool = False,
                 skip_weight: float = 0.5):
        self.popularity, self.num_last, self.decay = popularity, num_last, decay
        self.gaps = [(1, 1.0)] + ([(2, skip_weight)] if skip else [])
        self.rows: dict[int, dict[int, float]] = defaultdict(dict)

    def update(self, sequences: list[np.ndarray], new_from: list[int]) -> None:
        """Count the transitions into the new events: for each user's column sequence (kept history + new events),
        the pairs ending at a position ``>= new_from``."""
        for seq, start in zip(sequences, new_from):
            for gap, weight in self.gaps:
                for p in range(max(start, gap), len(seq)):
                    row = self.rows[int(seq[p - gap])]
                    row[int(seq[p])] = row.get(int(seq[p]), 0.0) + weight

    def scores(self, contexts: list[np.ndarray], size: int) -> np.ndarray:
        """``contexts``: each target's history as columns (``-1``: an item not seen before) -> ``(M, size)``."""
        counts = np.zeros(size)
        counts[:len(self.popularity.counts)] = self.popularity.counts[:size]
        fill = counts / (1.0 + counts.max(initial=0.0)) * 1e-3
        out = np.broadcast_to(fill, (len(contexts), size)).copy()
        for m, context in enumerate(contexts):
            for j in range(min(self.num_last, len(context))):
                row = self.rows.get(int(context[len(context) - 1 - j]))
                if row:
                    cols = np.fromiter(row.keys(), dtype=np.int64, count=len(row))
                    weights = np.fromiter(row.values(), dtype=np.float64, count=len(row))
                    keep = cols < size
                    out[m, cols[keep]] += self.decay ** j * weights[keep]
        return out

    def state(self) -> dict[str, np.ndarray]:
        src = [a for a, row in self.rows.items() for _ in row]
        dst = [b for row in self.rows.values() for b in row]
        weight = [w for row in self.rows.values() for w in row.values()]
        return {"src": np.array(src, dtype=np.int64), "dst": np.array(dst, dtype=np.int64),
                "weight": np.array(weight, dtype=np.float64)}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.rows = defaultdict(dict)
        for a, b, w in zip(state["src"].tolist(), state["dst"].tolist(), state["weight"].tolist()):
            self.rows[a][b] = w


#: the baselines a prequential evaluation can run, by name (the names of genrec.eval.baselines.BASELINES)
ONLINE_BASELINES = {
    "most_popular": lambda popularity: popularity,
    "transitions": lambda popularity: OnlineTransitions(popularity, num_last=1),
    "transitions_last3_skip": lambda popularity: OnlineTransitions(popularity, num_last=3, decay=0.5, skip=True,
                                                                   skip_weight=0.5),
}
