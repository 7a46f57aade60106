"""The settings of a dynamic table (the ``embedding=dynamic`` config group), checked once, with one-line errors.

Every bad value raises :class:`genrec.errors.ConfigError` naming its key (``embedding.capacity``,
``embedding.eviction.policy``, ``embedding.store.path``) and what was expected.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from genrec.embedding.dynamic.admission import ADMISSION_POLICIES
from genrec.embedding.dynamic.eviction import EVICTION_POLICIES
from genrec.embedding.dynamic.optim import SPARSE_OPTIMIZERS, RowOptimizer
from genrec.storage.stores import STORE_BACKENDS
from genrec.errors import ConfigError

KEY = "embedding"
DEFAULT_KINDS = ("zeros", "unknown", "hashed")


@dataclass(frozen=True)
class AdmissionConfig:
    """``policy``: always | min_count | probability (see :class:`~genrec.embedding.dynamic.admission.Admission`)."""

    policy: str = "always"
    min_count: int = 2
    probability: float = 1.0
    sketch_width: int = 1 << 20
    sketch_depth: int = 4


@dataclass(frozen=True)
class EvictionConfig:
    """``policy``: lru | lfu, which rows leave tier 0 when it is full (capacity-triggered). ``lfu_decay``: per-step
    factor of LFU counts; ``lfu_sample``: candidates drawn per LFU victim. ``ttl``: a row unused for longer than
    this (event time: the batch's largest timestamp, or the step count when none is given) is deleted from every
    tier; checked every ``ttl_every`` steps (tier 0) and when a stored row is read back (tier 2). ``null``: never.
    """

    policy: str = "lru"
    lfu_decay: float = 0.99
    lfu_sample: int = 16
    ttl: float | None = None
    ttl_every: int = 100


@dataclass(frozen=True)
class DefaultConfig:
    """What a not-admitted ID reads: ``zeros`` (a frozen zero row), ``unknown`` (one trained row shared by all
    of them) or ``hashed`` (``hashed_rows`` trained rows, chosen by a hash of the ID)."""

    kind: str = "zeros"
    hashed_rows: int = 1024


@dataclass(frozen=True)
class StoreConfig:
    """Tier 2. ``path``: folder of the store (each process uses ``<path>/rank<r>``, emptied when the table is
    built: the live store is scratch space, a run resumes from a checkpoint); ``null``: no tier 2 (a row
    evicted from tier 0 is deleted). ``backend``: slab (:mod:`genrec.storage.slab`) | rocksdb | lmdb.
    ``cache_mib``: the store's memory: RocksDB's block cache (memtables charged to it); the slab's ID index, which
    holds at most ~118,000 rows per MiB (8 bytes a position, 90% full; more is an error naming this key).
    ``write_back_batches``: evicted batches waiting to be written (the bound of the asynchronous write-back).
    ``filter_mib``: Bloom filter of the IDs in tier 2 (a never-seen ID costs no store lookup; ~8M IDs per MiB at
    1% false positives)."""

    path: str | None = None
    backend: str = "slab"
    cache_mib: int = 64
    write_back_batches: int = 4
    filter_mib: int = 32


@dataclass(frozen=True)
class DynamicTableConfig:
    """One dynamic table.

    Attributes:
        dim: row width ``D``.
        capacity: tier-0 rows (process memory; GPU memory on CUDA).
        init_std: a new row is uniform in ``±sqrt(3) * init_std`` from (seed, raw ID).
        seed: the table's seed (row init, admission hashes, LFU sampling).
        pinned_batches: a row used by one of this many previous batches is never evicted (they may still be
            training while the next batch is mapped); the prefetch depth must be smaller.
        prefetch_depth: batches mapped ahead in a background thread (0: map in the forward pass).
    """

    dim: int
    capacity: int
    init_std: float = 0.02
    seed: int = 0
    pinned_batches: int = 2
    prefetch_depth: int = 0
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    eviction: EvictionConfig = field(default_factory=EvictionConfig)
    default: DefaultConfig = field(default_factory=DefaultConfig)
    optimizer: RowOptimizer = field(default_factory=RowOptimizer)
    store: StoreConfig = field(default_factory=StoreConfig)

    @property
    def init_bound(self) -> float:
        return math.sqrt(3.0) * self.init_std

    @classmethod
    def build(cls, dim: int, capacity: int, **settings: Any) -> "DynamicTableConfig":
        """From plain values and dicts (Hydra's), checked: bad values raise ConfigError naming the key."""
        nested = {"admission": AdmissionConfig, "eviction": EvictionConfig, "default": DefaultConfig,
                  "optimizer": RowOptimizer, "store": StoreConfig}
        known = {f.name for f in fields(cls)}
        unknown = set(settings) - known
        if unknown:
            raise ConfigError(f"{KEY}.{sorted(unknown)[0]}", f"unknown setting; expected one of {sorted(known)}")
        values: dict[str, Any] = {"dim": dim, "capacity": capacity}
        for name, value in settings.items():
            if name in nested:
                value = _nested(nested[name], name, value)
            values[name] = value
        config = cls(**values)
        config.check()
        return config

    def check(self) -> None:
        def need(ok: bool, key: str, message: str) -> None:
            if not ok:
                raise ConfigError(f"{KEY}.{key}" if key else KEY, message)

        need(self.dim >= 1, "dim", f"must be a positive integer, got {self.dim}")
        need(isinstance(self.capacity, int) and self.capacity >= 1, "capacity",
             f"must be a positive number of tier-0 rows, got {self.capacity}")
        need(self.init_std >= 0, "init_std", f"must be >= 0, got {self.init_std}")
        need(self.pinned_batches >= 1, "pinned_batches", f"must be >= 1, got {self.pinned_batches}")
        need(0 <= self.prefetch_depth < self.pinned_batches, "prefetch_depth",
             f"must be in [0, pinned_batches={self.pinned_batches}), got {self.prefetch_depth}")
        a, e, d, s = self.admission, self.eviction, self.default, self.store
        need(a.policy in ADMISSION_POLICIES, "admission.policy", f"must be one of {ADMISSION_POLICIES}, got {a.policy!r}")
        need(a.min_count >= 1, "admission.min_count", f"must be >= 1, got {a.min_count}")
        need(0.0 <= a.probability <= 1.0, "admission.probability", f"must be in [0, 1], got {a.probability}")
        need(a.sketch_width >= 1 and a.sketch_depth >= 1, "admission.sketch_width",
             f"sketch width and depth must be >= 1, got {a.sketch_width} x {a.sketch_depth}")
        need(e.policy in EVICTION_POLICIES, "eviction.policy", f"must be one of {EVICTION_POLICIES}, got {e.policy!r}")
        need(0.0 < e.lfu_decay <= 1.0, "eviction.lfu_decay", f"must be in (0, 1], got {e.lfu_decay}")
        need(e.lfu_sample >= 1, "eviction.lfu_sample", f"must be >= 1, got {e.lfu_sample}")
        need(e.ttl is None or e.ttl > 0, "eviction.ttl", f"must be positive or null, got {e.ttl}")
        need(e.ttl_every >= 1, "eviction.ttl_every", f"must be >= 1, got {e.ttl_every}")
        need(d.kind in DEFAULT_KINDS, "default.kind", f"must be one of {DEFAULT_KINDS}, got {d.kind!r}")
        need(d.hashed_rows >= 1, "default.hashed_rows", f"must be >= 1, got {d.hashed_rows}")
        need(self.optimizer.lr > 0, "optimizer.lr", f"must be positive, got {self.optimizer.lr}")
        need(s.backend in STORE_BACKENDS, "store.backend", f"must be one of {STORE_BACKENDS}, got {s.backend!r}")
        need(s.cache_mib >= (4 if s.backend == "rocksdb" else 1), "store.cache_mib",
             f"must be >= {4 if s.backend == 'rocksdb' else 1} (MiB) for store.backend={s.backend}, got {s.cache_mib}")
        need(s.write_back_batches >= 1, "store.write_back_batches", f"must be >= 1, got {s.write_back_batches}")
        need(s.filter_mib >= 1, "store.filter_mib", f"must be >= 1, got {s.filter_mib}")
        if s.path is not None:
            need(_writable(Path(s.path)), "store.path", f"{s.path} is not a writable folder (nor can it be created)")

    @property
    def default_rows(self) -> int:
        return self.default.hashed_rows if self.default.kind == "hashed" else 1


def _nested(kind: type, name: str, value: Any) -> Any:
    if isinstance(value, kind):
        return value
    if not isinstance(value, dict):
        value = dict(value)  # a DictConfig
    known = {f.name for f in fields(kind)}
    unknown = set(value) - known
    if unknown:
        raise ConfigError(f"{KEY}.{name}.{sorted(unknown)[0]}", f"unknown setting; expected one of {sorted(known)}")
    if kind is RowOptimizer:
        if value.get("name", "adagrad") not in SPARSE_OPTIMIZERS:
            raise ConfigError(f"{KEY}.optimizer.name", f"must be one of {SPARSE_OPTIMIZERS}, got {value['name']!r}")
        if "betas" in value:
            value = {**value, "betas": tuple(value["betas"])}
    return kind(**value)


def _writable(path: Path) -> bool:
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            return False
        existing = existing.parent
    return existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)
