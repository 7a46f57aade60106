"""A slab store: fixed-size records in one file of slots, an in-memory ID -> slot index and a free list.

Made for the rows of a dynamic table (every record has the same size): a write is a write of the record in its
slot — an ID written before is overwritten in place, a new one takes a freed slot or the end of the file — so
nothing is ever rewritten later (no flush, no compaction), and a read is one ``pread``. The loops run in C
(``slab.c``, built with the system compiler at first use and called through ctypes, which releases the interpreter
lock: a write-back thread writing a batch leaves the training thread's Python running).

Layout of the folder: ``slab.bin``, slot ``s`` at byte ``s * (8 + record_bytes)``: the int64 ID, then the record.
The index (``cache_mib`` MiB, 8 bytes a position: a 32-bit fingerprint of the ID and the slot; linear probing, at
most 90% full, so it holds up to ``0.9 * cache_mib * 2^20 / 8`` rows, ~118,000 per MiB) lives in memory only; a
store with more rows is a one-line error naming ``embedding.store.cache_mib``. Freed slots (deleted rows) are a
stack reused first. Memory: the index (allocated and written whole when the store opens), write buffers of twice
the largest batch written, and 8 bytes per freed slot not yet reused; reads and writes go through the OS page
cache, which is not this process's memory (no mapping).

Snapshot (:meth:`SlabStore.checkpoint`): a copy of ``slab.bin`` with ``free.npy`` (the free stack) and
``slab.json`` (record size, slots, rows), taken under the store's lock; opening a snapshot (or a live copy of one)
rebuilds the index from the slots' IDs, so the same IDs get the same slots and the free stack the same order. The
live file has no durability of its own: a run resumes from its last checkpoint's snapshot. A snapshot is a full
copy (the live file is overwritten in place), so its cost grows with the table, where a RocksDB checkpoint links
its immutable files.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from genrec.storage import compiled
from genrec.storage.stores import RowStore
from genrec.errors import ConfigError, DataError

SOURCE = Path(__file__).with_name("slab.c")
SLAB_FILE, META_FILE, FREE_FILE = "slab.bin", "slab.json", "free.npy"
FORMAT = 1
ENTRY_BYTES = 8
MAX_LOAD = 0.9
_FULL = -1_000_000_000  # slab_put: the index would pass MAX_LOAD (slab.c's FULL)
_I64, _U64, _PTR, _INT = ctypes.c_int64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int
_SIGNATURES = {
    "slab_find": ([_PTR, _U64, _INT, _I64, _PTR, _I64, _PTR], _I64),
    "slab_live": ([_PTR, _U64, _PTR, _PTR, _I64, _PTR], None),
    "slab_index": ([_PTR, _U64, _INT, _I64, _PTR, _PTR, _I64], _I64),
    "slab_get": ([_PTR, _U64, _INT, _I64, _PTR, _I64, _PTR, _PTR], _I64),
    "slab_delete": ([_PTR, _U64, _INT, _I64, _PTR, _I64, _PTR], _I64),
    "slab_put": ([_PTR, _U64, _INT, _I64, _PTR, _PTR, _I64, _PTR, _PTR, _PTR, _PTR, _I64, _PTR, _PTR, _PTR], _I64),
    "slab_copy": ([_INT, _INT, _I64, _PTR, _I64], _I64),
}
_library: list[ctypes.CDLL] = []


def library() -> ctypes.CDLL:
    """``slab.c``, built once and loaded; no compiler is a one-line error (the slab store has no numpy twin)."""
    if not _library:
        try:
            _library.append(compiled.compile_library(SOURCE, _SIGNATURES))
        except subprocess.CalledProcessError as err:
            raise ConfigError("embedding.store.backend", f"slab: compiling {SOURCE} failed "
                              f"({(err.stderr or '').strip()[:300]}); choose rocksdb or lmdb") from None
        except OSError as err:
            raise ConfigError("embedding.store.backend", f"slab: cannot build or load {SOURCE.name} ({err}); install "
                              "a C compiler (cc, gcc or $CC) or choose rocksdb or lmdb") from None
    return _library[0]


def _check(result: int, path: Path) -> int:
    if result < 0:
        raise OSError(-result, os.strerror(-result), str(path))
    return result


def index_positions(cache_mib: int) -> int:
    """Positions of the index of a store of ``cache_mib``."""
    return max(64, (cache_mib << 20) // ENTRY_BYTES)


class SlabStore(RowStore):
    """Args: path: the store's folder (created if missing; a snapshot folder or a live copy of one is opened as
    it was); record_bytes: bytes per record; cache_mib: the index's memory (the most rows, above); read_only: open
    a snapshot for reading (its index sized to its rows, ``cache_mib`` unused)."""

    def __init__(self, path: str | Path, record_bytes: int, cache_mib: int = 64, read_only: bool = False):
        super().__init__(path, record_bytes)
        self._lib = library()
        self.slot_bytes = 8 + record_bytes
        self.read_only, self.cache_mib = read_only, cache_mib
        self._lock = threading.Lock()
        file, meta_file = self.path / SLAB_FILE, self.path / META_FILE
        if not read_only:
            self.path.mkdir(parents=True, exist_ok=True)
        slots, rows, free = 0, 0, np.zeros(0, dtype=np.int64)
        if meta_file.exists():
            slots, rows, free = self._read_meta()
        elif file.exists() or read_only:
            raise DataError(meta_file, "missing: a slab store opens empty or from a snapshot (slab.bin with "
                                       "slab.json and free.npy)")
        positions = int(rows / 0.75) + 64 if read_only else index_positions(cache_mib)
        self.max_rows = int(MAX_LOAD * positions)
        if rows > self.max_rows:
            raise self._full(rows)
        self.index = np.empty(positions, dtype=np.uint64)
        self.index.fill(0)  # every page written now: the memory the store reports is resident from the start
        self._free = np.zeros(max(1024, 2 * len(free)), dtype=np.int64)
        self._free[:len(free)] = free
        self._counts = np.array([len(free), slots, rows], dtype=np.int64)  # free top, slots used, live rows
        self._staged = self._slots_scratch = self._order_scratch = np.zeros(0, dtype=np.uint8)
        self._fd: int | None = os.open(file, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT, 0o644)
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: reads are single slots
        if slots:
            self._rebuild(file)
        if not read_only:  # what the live store does next is in memory: a stale meta must never be read again
            meta_file.unlink(missing_ok=True)
            (self.path / FREE_FILE).unlink(missing_ok=True)

    # ------------------------------------------------------------------ opening
    def _read_meta(self) -> tuple[int, int, np.ndarray]:
        meta_file, file = self.path / META_FILE, self.path / SLAB_FILE
        try:
            meta = json.loads(meta_file.read_text())
            free = np.load(self.path / FREE_FILE).astype(np.int64)
        except (OSError, ValueError) as err:
            raise DataError(meta_file.parent, f"not a readable slab snapshot: {err}") from None
        if meta.get("format") != FORMAT or meta.get("record_bytes") != self.record_bytes:
            raise DataError(meta_file, f"slab of format {meta.get('format')} with {meta.get('record_bytes')}-byte "
                                       f"records; expected format {FORMAT} with {self.record_bytes}")
        slots, rows = int(meta["slots"]), int(meta["rows"])
        size = file.stat().st_size if file.exists() else -1
        if size != slots * self.slot_bytes:
            raise DataError(file, f"{size} bytes; the snapshot has {slots} slots of {self.slot_bytes} bytes "
                                  f"({slots * self.slot_bytes} bytes): truncated or not this snapshot's")
        if (len(np.unique(free)) != len(free) or (len(free) and (free.min() < 0 or free.max() >= slots))
                or rows != slots - len(free)):
            raise DataError(self.path / FREE_FILE, f"free slots inconsistent with {slots} slots and {rows} rows")
        return slots, rows, free

    def _rebuild(self, file: Path, chunk: int = 65536) -> None:
        """Index every slot not on the free stack by the ID written in it."""
        free = np.zeros(self.slots_used, dtype=bool)
        free[self._free[:self.free_top]] = True
        for start in range(0, self.slots_used, chunk):
            slots = np.arange(start, min(start + chunk, self.slots_used), dtype=np.int64)
            ids = self._read_slots(start, len(slots))[:, :8].copy().view(np.int64).reshape(-1)
            live = ~free[slots]
            ids, slots = np.ascontiguousarray(ids[live]), np.ascontiguousarray(slots[live])
            result = self._lib.slab_index(compiled.ptr(self.index), len(self.index), self._fd, self.slot_bytes,
                                          compiled.ptr(ids), compiled.ptr(slots), len(ids))
            if result > 0:
                raise DataError(file, f"ID {ids[result - 1]} is in two slots (the second: {slots[result - 1]}): "
                                      "a corrupt slab")
            _check(result, file)

    def _read_slots(self, start: int, count: int) -> np.ndarray:
        """``(count, slot_bytes)`` uint8: slots ``start ..`` as they are in the file."""
        out = np.empty((count, self.slot_bytes), dtype=np.uint8)
        got = os.preadv(self._fd, [out], start * self.slot_bytes)
        if got != out.nbytes:
            raise DataError(self.path / SLAB_FILE, f"short read at slot {start}: {got} of {out.nbytes} bytes")
        return out

    # ------------------------------------------------------------------ counts
    @property
    def free_top(self) -> int:
        return int(self._counts[0])

    @property
    def slots_used(self) -> int:
        return int(self._counts[1])

    @property
    def rows(self) -> int:
        return int(self._counts[2])

    def _counter(self, k: int) -> int:
        return self._counts.ctypes.data + 8 * k

    def _full(self, rows: int) -> ConfigError:
        return ConfigError("embedding.store.cache_mib", f"the slab store {self.path} would hold {rows} rows; its ID "
                           f"index of {self.cache_mib} MiB holds at most {self.max_rows} (8 bytes a position, "
                           f"filled to {MAX_LOAD:.0%}): raise it")

    # ------------------------------------------------------------------ rows
    def put(self, ids: np.ndarray, records: np.ndarray) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        records = np.ascontiguousarray(records, dtype=np.uint8).reshape(len(ids), self.record_bytes)
        if not (ids[1:] > ids[:-1]).all() and len(np.unique(ids)) != len(ids):  # the last record of an ID wins
            _, last = np.unique(ids[::-1], return_index=True)
            keep = np.sort(len(ids) - 1 - last)
            ids, records = ids[keep], np.ascontiguousarray(records[keep])
        with self._lock:
            if len(self._staged) < len(ids):  # scratch of slab_put, kept: fresh pages would fault at every call
                self._slots_scratch = np.empty(2 * len(ids), dtype=np.int64)
                self._order_scratch = np.empty(2 * len(ids), dtype=np.uint64)
                self._staged = np.empty((2 * len(ids), self.slot_bytes), dtype=np.uint8)
            result = self._lib.slab_put(compiled.ptr(self.index), len(self.index), self._fd, self.slot_bytes,
                                        compiled.ptr(ids), compiled.ptr(records), len(ids), compiled.ptr(self._free),
                                        self._counter(0), self._counter(1), self._counter(2), self.max_rows,
                                        compiled.ptr(self._slots_scratch), compiled.ptr(self._order_scratch),
                                        compiled.ptr(self._staged))
            if result == _FULL:
                raise self._full(self.rows + int((self._slots(ids) < 0).sum()))
            _check(result, self.path / SLAB_FILE)

    def delete(self, ids: np.ndarray) -> None:
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        freed = np.empty(len(ids), dtype=np.int64)
        with self._lock:
            removed = _check(self._lib.slab_delete(compiled.ptr(self.index), len(self.index), self._fd,
                                                   self.slot_bytes, compiled.ptr(ids), len(ids), compiled.ptr(freed)),
                             self.path / SLAB_FILE)
            top = self.free_top
            if top + removed > len(self._free):
                self._free = np.concatenate([self._free, np.zeros(max(len(self._free), removed), np.int64)])
            self._free[top:top + removed] = freed[:removed]
            self._counts[0] += removed
            self._counts[2] -= removed

    def get(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        found = np.zeros(len(ids), dtype=bool)
        out = np.empty((len(ids), self.record_bytes), dtype=np.uint8)
        with self._lock:
            hits = _check(self._lib.slab_get(compiled.ptr(self.index), len(self.index), self._fd, self.slot_bytes,
                                             compiled.ptr(ids), len(ids), compiled.ptr(found), compiled.ptr(out)),
                          self.path / SLAB_FILE)
        return found, out[:hits]

    def slots_of(self, ids: np.ndarray) -> np.ndarray:
        """``(N,)`` IDs -> ``(N,)`` their slots in the file, -1 where absent."""
        with self._lock:
            return self._slots(np.ascontiguousarray(ids, dtype=np.int64))

    def _slots(self, ids: np.ndarray) -> np.ndarray:
        slots = np.empty(len(ids), dtype=np.int64)
        _check(self._lib.slab_find(compiled.ptr(self.index), len(self.index), self._fd, self.slot_bytes,
                                   compiled.ptr(ids), len(ids), compiled.ptr(slots)), self.path / SLAB_FILE)
        return slots

    def free_slots(self) -> np.ndarray:
        """The free stack, bottom first (the last one is reused first)."""
        with self._lock:
            return self._free[:self.free_top].copy()

    def scan(self, chunk: int = 65536) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every ``(ids, records)`` in slot order (not ID order), ``chunk`` slots at a time."""
        for start in range(0, self.slots_used, chunk):
            with self._lock:
                count = min(chunk, self.slots_used - start)
                raw = self._read_slots(start, count)
                ids = raw[:, :8].copy().view(np.int64).reshape(-1)
                slots = np.arange(start, start + count, dtype=np.int64)
                live = np.zeros(count, dtype=bool)
                self._lib.slab_live(compiled.ptr(self.index), len(self.index), compiled.ptr(ids), compiled.ptr(slots),
                                    count, compiled.ptr(live))
            yield ids[live], raw[live, 8:]

    # ------------------------------------------------------------------ snapshots
    def checkpoint(self, dest: str | Path) -> None:
        """A copy of the slots in use, the free stack and the counts in the new folder ``dest``."""
        dest = Path(dest)
        dest.mkdir(parents=True)
        with self._lock:
            size = self.slots_used * self.slot_bytes
            copy_out = os.open(dest / SLAB_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                copied = 0
                while copied < size:
                    step = os.copy_file_range(self._fd, copy_out, size - copied, copied, copied)
                    if step == 0:
                        raise DataError(self.path / SLAB_FILE, f"ended at {copied} of {size} bytes while copied")
                    copied += step
            finally:
                os.close(copy_out)
            np.save(dest / FREE_FILE, self._free[:self.free_top])
            (dest / META_FILE).write_text(json.dumps({"format": FORMAT, "record_bytes": self.record_bytes,
                                                      "slot_bytes": self.slot_bytes, "slots": self.slots_used,
                                                      "rows": self.rows}))

    def memory_bytes(self) -> int:
        """The index, the free stack and the write buffers (twice the largest batch written)."""
        if self._fd is None:
            return 0
        return self.index.nbytes + self._free.nbytes + self._staged.nbytes + 16 * len(self._slots_scratch)

    def memory_bound_bytes(self) -> int:
        """The index (``cache_mib``); the free stack adds 8 bytes per deleted row not yet replaced."""
        return self.index.nbytes

    def close(self) -> None:
        """Close the file (again: nothing)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
                self.index = np.zeros(0, dtype=np.uint64)


def copy_in_pages(src: str | Path, dst: str | Path) -> None:
    """Copy a snapshot's ``slab.bin`` to a live store in small writes (a copy in large writes would leave large
    page-cache folios behind, and every later single-slot write into one costs in proportion to it: slab.c)."""
    lib = library()
    buffer = np.empty(1 << 20, dtype=np.uint8)
    src_fd = os.open(src, os.O_RDONLY)
    try:
        dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _check(lib.slab_copy(src_fd, dst_fd, os.fstat(src_fd).st_size, compiled.ptr(buffer), len(buffer)), dst)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
