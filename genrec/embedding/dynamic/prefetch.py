"""Map batches ahead of training in a background thread (TorchRec's prefetch pipeline, for a dynamic table).

While batch ``i`` trains, batch ``i + 1``'s IDs are mapped: admitted, fetched from tier 2 into tier 0, with room
made by eviction. Both queues are bounded by ``depth``. The table never evicts a row used by one of its last
``pinned_batches`` batches and ``depth < pinned_batches``, so a batch mapped ahead cannot take the rows of the
batch that is training; the mapping of every batch is the same with and without prefetching (same order of
steps, same victims), so training gives the same result.
"""
from __future__ import annotations

import queue
import threading
import weakref

import numpy as np
import torch

from genrec.embedding.dynamic.table import DynamicTable, MappedBatch, _numpy


def _mapper(todo: queue.Queue, done: queue.Queue, table: DynamicTable) -> None:
    """The thread: map each submitted batch in order; None ends it."""
    while True:
        item = todo.get()
        if item is None:
            return
        try:
            done.put(table.map(*item))
        except BaseException as error:  # handed to the training thread by take()
            done.put(error)


def _stop(todo: queue.Queue, done: queue.Queue, thread: threading.Thread) -> None:
    """End the thread, dropping batches not mapped yet (also run at interpreter exit, so that no mapping is under
    way while the store is freed)."""
    while thread.is_alive():
        try:
            todo.put_nowait(None)
        except queue.Full:
            _drain(todo)
        _drain(done)
        thread.join(timeout=0.05)


def _drain(q: queue.Queue) -> None:
    try:
        while True:
            q.get_nowait()
    except queue.Empty:
        pass


class Prefetcher:
    """Args: table: the table to map for; depth: batches mapped ahead (``1 <= depth < pinned_batches``)."""

    def __init__(self, table: DynamicTable, depth: int = 1):
        if not 1 <= depth < table.config.pinned_batches:
            raise ValueError(f"prefetch depth must be in [1, pinned_batches={table.config.pinned_batches}), "
                             f"got {depth}")
        self.table = table
        self._todo: queue.Queue = queue.Queue(maxsize=depth)
        self._done: queue.Queue = queue.Queue(maxsize=depth)
        self._submitted = 0
        self._thread = threading.Thread(target=_mapper, args=(self._todo, self._done, table), name="genrec-prefetch",
                                        daemon=True)
        self._thread.start()
        self.close = weakref.finalize(self, _stop, self._todo, self._done, self._thread)

    @property
    def pending(self) -> int:
        """Batches submitted and not yet taken."""
        return self._submitted

    def submit(self, ids: np.ndarray | torch.Tensor, times: np.ndarray | torch.Tensor | None = None) -> None:
        """Queue a future batch (blocks while ``depth`` batches wait to be mapped)."""
        self._todo.put((_numpy(ids), None if times is None else _numpy(times)))
        self._submitted += 1

    def take(self, ids: np.ndarray | torch.Tensor) -> MappedBatch:
        """The mapping of the oldest submitted batch, which must be ``ids``."""
        if not self._submitted:
            raise RuntimeError("Prefetcher.take: no batch was submitted")
        result = self._done.get()
        self._submitted -= 1
        if isinstance(result, BaseException):
            raise RuntimeError("mapping a prefetched batch failed") from result
        if not np.array_equal(result.ids, _numpy(ids)):
            raise RuntimeError(f"prefetched batch (step {result.step}) differs from the batch being trained: "
                               "batches must be submitted in training order")
        return result
