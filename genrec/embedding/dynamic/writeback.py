"""Asynchronous, bounded write-back of evicted rows to the tier-2 store.

Evicted rows wait in memory, one batch per eviction round (at most ``max_batches``: :meth:`put` blocks while the
queue is full), until a background thread has written them; a read looks in the waiting batches (newest first)
before the store, so a row evicted a moment ago and wanted again is never read stale. A batch leaves the queue only
after the store holds it.
"""
from __future__ import annotations

import threading
import weakref
from collections import deque
from dataclasses import dataclass

import numpy as np

from genrec.storage.stores import RowStore
from genrec.errors import UserError


@dataclass
class _Batch:
    ids: np.ndarray  # (N,) sorted
    records: np.ndarray | None  # (N, record_bytes); None: delete these IDs


class _Channel:
    """What the writer thread shares with its :class:`WriteBack` (not the WriteBack itself, so that an unused one
    can be collected and its thread stopped)."""

    def __init__(self, store: RowStore):
        self.store = store
        self.queue: deque[_Batch] = deque()
        self.cond = threading.Condition()
        self.error: BaseException | None = None
        self.closed = False


def _write(store: RowStore, batch: _Batch) -> None:
    if batch.records is None:
        store.delete(batch.ids)
    else:
        store.put(batch.ids, batch.records)


def _writer(channel: _Channel) -> None:
    """The thread: write the oldest waiting batch, then drop it from the queue; after close, drain and return."""
    while True:
        with channel.cond:
            while not channel.queue and not channel.closed:
                channel.cond.wait()
            if not channel.queue:
                return
            batch = channel.queue[0]
        try:
            _write(channel.store, batch)
        except BaseException as error:  # handed to the training thread at its next put/flush
            with channel.cond:
                channel.error = error
                channel.cond.notify_all()
            return
        with channel.cond:
            channel.queue.popleft()
            channel.cond.notify_all()


def _stop(channel: _Channel, thread: threading.Thread) -> None:
    """Let the writer finish the waiting batches and end (also run at interpreter exit: the store must not be freed
    while the thread is inside it)."""
    with channel.cond:
        channel.closed = True
        channel.cond.notify_all()
    if thread.is_alive():
        thread.join()


class WriteBack:
    """Args: store: tier 2; max_batches: the bound; asynchronous: write in a background thread (else at once)."""

    def __init__(self, store: RowStore, max_batches: int = 4, asynchronous: bool = True):
        self.max_batches, self.asynchronous = max_batches, asynchronous
        self._channel = _Channel(store)
        self._thread = threading.Thread(target=_writer, args=(self._channel,), name="genrec-write-back", daemon=True)
        if asynchronous:
            self._thread.start()
        self._stop = weakref.finalize(self, _stop, self._channel, self._thread)

    @property
    def store(self) -> RowStore:
        return self._channel.store

    @store.setter
    def store(self, store: RowStore) -> None:
        self.flush()
        self._channel.store = store

    def put(self, ids: np.ndarray, records: np.ndarray | None) -> None:
        """Queue rows for the store (``records`` None: delete the IDs from it)."""
        if len(ids) == 0:
            return
        order = np.argsort(ids, kind="stable")
        batch = _Batch(ids[order], None if records is None else records[order])
        if not self.asynchronous:
            _write(self.store, batch)
            return
        channel = self._channel
        with channel.cond:
            while len(channel.queue) >= self.max_batches and channel.error is None:
                channel.cond.wait()
            self._raise()
            channel.queue.append(batch)
            channel.cond.notify_all()

    def get(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(N,)`` IDs -> (``(N,)`` bool found, ``(N,)`` bool deleted, ``(F, record_bytes)`` records of the found
        ones, in order): the waiting batches first (newest wins), then the store."""
        found = np.zeros(len(ids), dtype=bool)
        deleted = np.zeros(len(ids), dtype=bool)
        records = np.zeros((len(ids), self.store.record_bytes), dtype=np.uint8)
        with self._channel.cond:
            waiting = list(self._channel.queue)
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
        channel = self._channel
        with channel.cond:
            while channel.queue and channel.error is None and self._thread.is_alive():
                channel.cond.wait()
            self._raise()

    def close(self) -> None:
        """Write what waits, then stop the thread."""
        self.flush()
        self._stop()

    def _raise(self) -> None:
        error = self._channel.error
        if isinstance(error, UserError):  # one line for the user (a full slab index names its setting)
            raise error
        if error is not None:
            raise RuntimeError("the write-back thread failed") from error
