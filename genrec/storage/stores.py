"""Tier 2: rows (with their optimizer state) on SSD in an embedded key-value store, keyed by raw ID.

A record is a fixed number of bytes (the table decides the layout, :mod:`genrec.embedding.dynamic.rows`); keys are
the raw int64 IDs, big-endian with the sign bit flipped, so the store's byte order is the IDs' numeric order.

Three backends, measured side by side by bench_dynamic (``stores``, ``prefetch``, ``larger_than_memory``):
:class:`~genrec.storage.slab.SlabStore` (``slab``: a file of fixed-size slots, an in-memory ID index of
``cache_mib``; a row costs one write, never a compaction), :class:`RocksStore` (RocksDB through ``rocksdict``:
memory bounded by a block cache of a set size whatever the rows, writes rewritten by flushes and compactions) and
:class:`LmdbStore` (LMDB through ``lmdb``: it maps the file and every page read counts in the process's RSS). The
live store needs no durability of its own (no write-ahead log): a run restarts from a checkpoint, and
:meth:`checkpoint` writes a consistent snapshot with the store's own mechanism (RocksDB Checkpoint: a flush and hard
links to the immutable table files; LMDB ``copy``; a copy of the slab file).
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

STORE_BACKENDS = ("slab", "rocksdb", "lmdb")
_SIGN = np.uint64(1 << 63)


def encode_keys(ids: np.ndarray) -> list[bytes]:
    raw = (np.asarray(ids, dtype=np.int64).view(np.uint64) ^ _SIGN).astype(">u8").tobytes()
    return [raw[i:i + 8] for i in range(0, len(raw), 8)]


def decode_keys(keys: list[bytes]) -> np.ndarray:
    return (np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64) ^ _SIGN).view(np.int64)


def _split(records: np.ndarray) -> list[bytes]:
    raw, width = records.tobytes(), records.shape[1]
    return [raw[i:i + width] for i in range(0, len(raw), width)]


def directory_bytes(path: str | Path) -> int:
    """Bytes the files under ``path`` occupy on disk (allocated blocks, so LMDB's sparse map counts as used)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


class RowStore:
    """The interface of a tier-2 store: ``(N,)`` int64 IDs and ``(N, record_bytes)`` uint8 records."""

    def __init__(self, path: str | Path, record_bytes: int):
        self.path, self.record_bytes = Path(path), record_bytes

    def put(self, ids: np.ndarray, records: np.ndarray) -> None:
        raise NotImplementedError

    def delete(self, ids: np.ndarray) -> None:
        raise NotImplementedError

    def get(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(N,)`` IDs -> (``(N,)`` bool found, ``(F, record_bytes)`` records of the found ones, in order)."""
        raise NotImplementedError

    def scan(self, chunk: int = 65536) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every ``(ids, records)``, ``chunk`` rows at a time (RocksDB, LMDB: in ID order; slab: in slot order)."""
        raise NotImplementedError

    def checkpoint(self, dest: str | Path) -> None:
        """A consistent snapshot of the store in the new folder ``dest``."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def disk_bytes(self) -> int:
        return directory_bytes(self.path)

    def memory_bytes(self) -> int:
        """Process memory the store holds itself (0 for LMDB: its pages belong to the OS page cache)."""
        return 0

    def memory_bound_bytes(self) -> int:
        """The most :meth:`memory_bytes` is configured to reach."""
        return 0

    def _assemble(self, values: list[bytes | None]) -> tuple[np.ndarray, np.ndarray]:
        found = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
        data = b"".join(v for v in values if v is not None)
        return found, np.frombuffer(data, dtype=np.uint8).reshape(-1, self.record_bytes).copy()


class RocksStore(RowStore):
    """RocksDB: no compression (rows of floats do not compress), bloom filters, no WAL, and one memory bound.

    The store's memory is its block cache of ``cache_mib``: the cache holds the data blocks read, the table files'
    index and filter blocks (``cache_index_and_filter_blocks``, partitioned, so the table readers hold almost
    nothing outside it and a lookup reads a few small partitions), and a reservation for the memtables (a
    ``WriteBufferManager`` charging them to the cache: two memtables of ``cache_mib / 4`` each, flushed when they
    pass about ``cache_mib / 2`` together). At most ``max_open_files`` table files are kept open.
    :meth:`memory_bytes` reports what the store holds now, :meth:`memory_bound_bytes` the bound (RocksDB's cache
    capacity is not strict: entries in use may pass it for a moment, and a single write larger than a memtable
    goes into one).

    Args:
        path: the database folder (created if missing).
        record_bytes: bytes per record.
        cache_mib: the store's memory (at least 4).
        max_open_files: table files kept open.
        read_only: open an existing database (a snapshot) for reading.
    """

    def __init__(self, path: str | Path, record_bytes: int, cache_mib: int = 64, max_open_files: int = 512,
                 read_only: bool = False):
        super().__init__(path, record_bytes)
        import rocksdict

        if cache_mib < 4:
            raise ValueError(f"a RocksDB store needs cache_mib >= 4, got {cache_mib}")
        self._rocksdict = rocksdict
        self.cache_bytes = cache_mib << 20
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_compression_type(rocksdict.DBCompressionType.none())
        options.set_write_buffer_size(self.cache_bytes // 4)
        options.set_max_write_buffer_number(2)
        options.set_max_background_jobs(2)
        options.set_max_open_files(max_open_files)
        self.cache = rocksdict.Cache(self.cache_bytes)
        options.set_write_buffer_manager(rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            self.cache_bytes // 2, False, self.cache))
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(10, False)
        table.set_block_cache(self.cache)
        table.set_cache_index_and_filter_blocks(True)
        # partitioned index and filters: a lookup reads small partitions through the cache, not a table file's
        # whole filter (megabytes at millions of keys, evicted and read again in a small cache)
        table.set_index_type(rocksdict.BlockBasedIndexType.two_level_index_search())
        table.set_partition_filters(True)
        table.set_pin_top_level_index_and_filter(True)
        options.set_block_based_table_factory(table)
        access = rocksdict.AccessType.read_only() if read_only else rocksdict.AccessType.read_write()
        self.db = rocksdict.Rdict(str(path), options, access_type=access)
        self._closed = False
        writes = rocksdict.WriteOptions()
        writes.disable_wal = True
        self.db.set_write_options(writes)

    def put(self, ids: np.ndarray, records: np.ndarray) -> None:
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        for key, value in zip(encode_keys(ids), _split(records)):
            batch.put(key, value)
        self.db.write(batch)

    def delete(self, ids: np.ndarray) -> None:
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        for key in encode_keys(ids):
            batch.delete(key)
        self.db.write(batch)

    def get(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(ids) == 0:
            return np.zeros(0, dtype=bool), np.zeros((0, self.record_bytes), dtype=np.uint8)
        return self._assemble(self.db.get(encode_keys(ids)))

    def scan(self, chunk: int = 65536) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        keys, values = [], []
        for key, value in self.db.items():
            keys.append(key)
            values.append(value)
            if len(keys) == chunk:
                yield decode_keys(keys), np.frombuffer(b"".join(values), np.uint8).reshape(-1, self.record_bytes)
                keys, values = [], []
        if keys:
            yield decode_keys(keys), np.frombuffer(b"".join(values), np.uint8).reshape(-1, self.record_bytes)

    def memory_bytes(self) -> int:
        """What RocksDB holds in process memory now: the block cache's usage (blocks, index and filter blocks, the
        memtables' reservation) and the table readers' memory outside it."""
        return self.cache.get_usage() + self.db.property_int_value("rocksdb.estimate-table-readers-mem")

    def memory_bound_bytes(self) -> int:
        return self.cache_bytes

    def checkpoint(self, dest: str | Path) -> None:
        self.db.flush()  # the memtables (no WAL: what is not flushed would not be in the snapshot)
        self._rocksdict.Checkpoint(self.db).create_checkpoint(str(dest))

    def close(self) -> None:
        """Close the database (again: nothing; a table whose snapshot failed to load closes a closed store)."""
        if not self._closed:
            self.db.close()
            self._closed = True


class LmdbStore(RowStore):
    """LMDB: one memory-mapped B+tree file (``map_gib`` of address space, allocated as it fills); no fsync."""

    def __init__(self, path: str | Path, record_bytes: int, map_gib: int = 256, read_only: bool = False):
        super().__init__(path, record_bytes)
        import lmdb

        Path(path).mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(path), map_size=map_gib << 30, sync=False, metasync=False, readahead=False,
                             readonly=read_only, lock=not read_only)

    def put(self, ids: np.ndarray, records: np.ndarray) -> None:
        with self.env.begin(write=True) as txn, txn.cursor() as cursor:
            cursor.putmulti(list(zip(encode_keys(ids), _split(records))))

    def delete(self, ids: np.ndarray) -> None:
        with self.env.begin(write=True) as txn:
            for key in encode_keys(ids):
                txn.delete(key)

    def get(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with self.env.begin() as txn:
            return self._assemble([txn.get(key) for key in encode_keys(ids)])

    def scan(self, chunk: int = 65536) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        with self.env.begin() as txn, txn.cursor() as cursor:
            keys, values = [], []
            for key, value in cursor:
                keys.append(bytes(key))
                values.append(bytes(value))
                if len(keys) == chunk:
                    yield decode_keys(keys), np.frombuffer(b"".join(values), np.uint8).reshape(-1, self.record_bytes)
                    keys, values = [], []
            if keys:
                yield decode_keys(keys), np.frombuffer(b"".join(values), np.uint8).reshape(-1, self.record_bytes)

    def checkpoint(self, dest: str | Path) -> None:
        Path(dest).mkdir(parents=True)
        self.env.copy(str(dest))

    def close(self) -> None:
        self.env.close()


def open_store(backend: str, path: str | Path, record_bytes: int, cache_mib: int = 64, read_only: bool = False
               ) -> RowStore:
    """A store of ``backend`` (one of :data:`STORE_BACKENDS`) at ``path``."""
    if backend == "rocksdb":
        return RocksStore(path, record_bytes, cache_mib=cache_mib, read_only=read_only)
    if backend == "lmdb":
        return LmdbStore(path, record_bytes, read_only=read_only)
    if backend == "slab":
        from genrec.storage.slab import SlabStore  # genrec.storage.slab builds on this module's RowStore

        return SlabStore(path, record_bytes, cache_mib=cache_mib, read_only=read_only)
    raise ValueError(f"store backend must be one of {STORE_BACKENDS}, got {backend!r}")


def restore_snapshot(snapshot: str | Path, path: str | Path) -> None:
    """Make ``path`` (removed first) a live copy of a closed snapshot folder written by ``checkpoint``: its files
    are immutable, so hard links where the file system allows (what RocksDB's checkpoints do), copies else."""
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(snapshot, path, copy_function=_link_or_copy)


def _link_or_copy(src: str, dst: str) -> None:
    from genrec.storage.slab import SLAB_FILE, copy_in_pages

    if os.path.basename(src).endswith(".sst"):
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    if os.path.basename(src) == SLAB_FILE:  # rewritten slot by slot once live: copied in 4 KiB writes
        copy_in_pages(src, dst)
        return
    shutil.copy2(src, dst)
