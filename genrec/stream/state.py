"""The trainer's per-key state in embedded stores that outlive the process: each user's recent history and the
event IDs already seen.

Both live in a store of :mod:`genrec.storage.stores` (RocksDB by default: memory bounded by its block
cache, which its memtables are charged to; or LMDB) under the run's ``live/`` folder. The live store is scratch
space with no write-ahead log: what survives a crash is the snapshot inside the last checkpoint (RocksDB's
Checkpoint or LMDB's copy), which :meth:`KeyedState.restore` turns back into the live store.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from genrec.storage.stores import directory_bytes, open_store, restore_snapshot


class KeyedState:
    """Fixed-size int64 records keyed by int64 in a store at ``path`` (emptied when built)."""

    def __init__(self, path: str | Path, width: int, backend: str = "rocksdb", cache_mib: int = 32):
        self.path, self.width, self.backend, self.cache_mib = Path(path), width, backend, cache_mib
        restore_snapshot_or_empty(None, self.path)
        self.store = open_store(backend, self.path, 8 * width, cache_mib=cache_mib)

    def get(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(K,)`` keys -> (``(K,)`` bool found, ``(K, width)`` int64 records, zeros where not found)."""
        found, raw = self.store.get(np.asarray(keys, dtype=np.int64))
        out = np.zeros((len(keys), self.width), dtype=np.int64)
        out[found] = raw.view(np.int64).reshape(-1, self.width)
        return found, out

    def put(self, keys: np.ndarray, records: np.ndarray) -> None:
        """Write ``(K, width)`` int64 records under ``(K,)`` distinct keys."""
        if len(keys):
            self.store.put(np.asarray(keys, dtype=np.int64),
                           np.ascontiguousarray(records, dtype=np.int64).view(np.uint8).reshape(len(keys), -1))

    def checkpoint(self, dest: Path) -> None:
        """A consistent snapshot in the new folder ``dest``."""
        self.store.checkpoint(dest)

    def restore(self, snapshot: Path | None) -> None:
        """Replace the live store by a copy of ``snapshot`` (``None``: an empty store)."""
        self.store.close()
        restore_snapshot_or_empty(snapshot, self.path)
        self.store = open_store(self.backend, self.path, 8 * self.width, cache_mib=self.cache_mib)

    def disk_bytes(self) -> int:
        return directory_bytes(self.path)

    def memory_bytes(self) -> int:
        return self.store.memory_bytes()

    def close(self) -> None:
        self.store.close()


def restore_snapshot_or_empty(snapshot: Path | None, path: Path) -> None:
    """Make ``path`` a live copy of ``snapshot``, or an empty folder when ``snapshot`` is ``None``."""
    if snapshot is None:
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
    else:
        restore_snapshot(snapshot, path)


class UserHistories(KeyedState):
    """Each user's last ``max_len`` events: record ``[length, items (max_len), times (max_len)]``, oldest first."""

    def __init__(self, path: str | Path, max_len: int, backend: str = "rocksdb", cache_mib: int = 32):
        super().__init__(path, 1 + 2 * max_len, backend, cache_mib)
        self.max_len = max_len

    def histories(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(U,)`` distinct users -> (``(U,)`` lengths, ``(U, max_len)`` items, ``(U, max_len)`` times); an unknown
        user has length 0."""
        _, records = self.get(users)
        m = self.max_len
        return records[:, 0].copy(), records[:, 1:1 + m], records[:, 1 + m:]

    def write(self, users: np.ndarray, lengths: np.ndarray, items: np.ndarray, times: np.ndarray) -> None:
        """Store ``(U,)`` users' histories (``(U, max_len)`` items and times, the first ``lengths`` valid)."""
        self.put(users, np.concatenate([lengths[:, None], items, times], axis=1))


class SeenEvents(KeyedState):
    """The hashes of the event IDs accepted so far (record: the event's time), for finding duplicates."""

    def __init__(self, path: str | Path, backend: str = "rocksdb", cache_mib: int = 32):
        super().__init__(path, 1, backend, cache_mib)

    def seen(self, keys: np.ndarray) -> np.ndarray:
        """``(K,)`` event-ID hashes -> ``(K,)`` bool already accepted."""
        return self.get(keys)[0]

    def add(self, keys: np.ndarray, times: np.ndarray) -> None:
        self.put(keys, np.asarray(times, dtype=np.int64)[:, None])
