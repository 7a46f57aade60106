"""Asynchronous, bounded write-back of evicted rows to the tier-2 store.

Evicted rows wait in memory, one batch per eviction round (at most ``max_batches``: :meth:`put` blocks while the
queue is full), until a background thread has written them; a read looks in the waiting batches (newest first)
before the store, so a row evicted a moment ago and wanted again is never read stale. A batch leaves the queue only
after the store holds it.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import numpy as np

from genrec.embedding.dynamic.store import RowStore


@dataclass
class _Batch:
    ids: np.ndarray  # (N,) sorted
    records: np.ndarray | None  # (N, record_bytes); None: delete these IDs


class WriteBack:
    """Args: store: tier 2; max_batches: the bound; asynchronous: write in a background thread (else at once)."""

    def __init__(self, store: RowStore, max_batches: int = 4, asynchronous: bool = True):
        self.store, self.max_batches, self.asynchronous = store, max_batches, asynchronous
        self._queue: deque[_Batch] = deque()
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="genrec-write-back", daemon=True)
        if asynchronous:
            self._thread.start()

    def put(self, ids: np.ndarray, records: np.ndarray | None) -> None:
        """Queue rows for the store (``records`` None: delete the IDs from it)."""
        if len(ids) == 0:
            return
        order = np.argsort(ids, kind="stable")
        batch = _Batch(ids[order], None if records is None else records[order])
        if not self.asynchronous:
            self._write(batch)
            return
        with self._cond:
            while len(self._queue) >= self.max_batches and self._error is None:
                self._cond.wait()
            self._raise()
            self._queue.append(batch)
            self._cond.notify_all()

    def get(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(N,)`` IDs -> (``(N,)`` bool found, ``(N,)`` bool deleted, ``(F, record_bytes)`` records of the found
        ones, in order): the waiting batches first (newest wins), then the store."""
        found = np.zeros(len(ids), dtype=bool)
        deleted = np.zeros(len(ids), dtype=bool)
        records = np.zeros((len(ids), self.store.record_bytes), dtype=np.uint8)
        with self._cond:
            waiting = list(self._queue)
        for batch in reversed(waiting):
            open_ = ~(found | deleted)
            if not open_.any():
                break
            where = np.searchsorted(batch.ids, ids)
            hit = open_ & (where < len(batch.ids))
            hit[hit] = batch.ids[where[hit]] == ids[hit]
            if batch.records is None:
                deleted |= hit
            else:
                found |= hit
                records[hit] = batch.records[where[hit]]
        rest = ~(found | deleted)
        if rest.any():
            in_store, stored = self.store.get(ids[rest])
            index = np.flatnonzero(rest)[in_store]
            found[index] = True
            records[index] = stored
        return found, deleted, records[found]

    def flush(self) -> None:
        """Wait until every waiting batch is in the store."""
        with self._cond:
            while self._queue and self._error is None:
                self._cond.wait()
            self._raise()

    def close(self) -> None:
        if self.asynchronous and self._thread.is_alive():
            self.flush()
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join()

    def _write(self, batch: _Batch) -> None:
        if batch.records is None:
            self.store.delete(batch.ids)
        else:
            self.store.put(batch.ids, batch.records)

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError("the write-back thread failed") from self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                batch = self._queue[0]
            try:
                self._write(batch)
            except BaseException as error:  # handed to the training thread at its next put/flush
                with self._cond:
                    self._error = error
                    self._cond.notify_all()
                return
            with self._cond:
                self._queue.popleft()
                self._cond.notify_all()
