"""One dynamic embedding table in one process: raw IDs -> rows, admission, eviction, tiers, fused optimizer.

Tier 0 is ``weight (capacity + R, D)`` and ``state (capacity + R, S)``: ``capacity`` slots for admitted IDs, then
``R`` default rows read by IDs without a row (see :class:`~genrec.embedding.dynamic.config.DefaultConfig`).
Tier 2 (optional) is a key-value store holding evicted rows with their optimizer state and metadata; a row
moves down when evicted and back up, bit for bit, when its ID is used again. (Tier 1, host memory beside a GPU's
tier 0, would sit between the two with the same record layout.)

A training step is :meth:`DynamicTable.map` (IDs -> rows: admission, eviction, fetching; done in the forward pass
or ahead of it by a :class:`~genrec.embedding.dynamic.prefetch.Prefetcher`), then :func:`lookup` (gather with
autograd) and, in the backward pass, :meth:`DynamicTable.apply_gradients` (the row optimizer on the touched rows,
like FBGEMM's fused kernels: the table never holds a dense gradient). Each mapped batch is one step; the step
number is also the table's version (:mod:`genrec.embedding.dynamic.export` exports rows changed since a version).
"""
from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from genrec.embedding.dynamic.admission import Admission
from genrec.embedding.dynamic.bloom import BloomFilter
from genrec.embedding.dynamic.config import DynamicTableConfig
from genrec.embedding.dynamic.eviction import LFU, LRU, Eviction
from genrec.embedding.dynamic.hashing import init_rows, mix64
from genrec.embedding.dynamic.slot_map import SlotMap
from genrec.storage.stores import open_store
from genrec.embedding.dynamic.writeback import WriteBack

_DEFAULT_SEED = 0xDEFA017
COUNTER_NAMES = ("steps", "lookups", "hits_tier0", "hits_tier2", "not_admitted", "admitted",
                 "evicted", "written_back", "expired", "deleted")


def record_dtype(dim: int, state_width: int) -> np.dtype:
    """The layout of a row outside tier 0 (store, checkpoint): weight, optimizer state, version (step of the
    last change), event time and step of the last use, decayed use count (LFU)."""
    return np.dtype([("weight", "<f4", (dim,)), ("state", "<f4", (state_width,)), ("version", "<i8"),
                     ("time", "<i8"), ("step", "<i8"), ("count", "<f8")])


def tier0_bytes(config: DynamicTableConfig) -> int:
    """Bytes a table of ``config`` holds in process memory (what :meth:`DynamicTable.memory_bytes` reports once
    built): tier 0 (rows, optimizer state, default rows) and its bookkeeping (ID map, per-slot metadata, LRU queue or
    LFU scores, free-slot stack, admission sketch). Tier 2's memory comes on top (``store.cache_mib``: the slab's ID
    index, or RocksDB's block cache with its memtables charged to it)."""
    c, rows = config.capacity, config.capacity + config.default_rows
    index = 1
    while index < 2 * c:
        index *= 2
    total = rows * (config.dim + config.optimizer.state_width(config.dim)) * 4 + 16 * index + 5 * 8 * c
    total += 2 * (2 * c + 1) * 8 if config.eviction.policy == "lru" else 8 * c
    if config.admission.policy == "min_count":
        total += 8 * config.admission.sketch_width * config.admission.sketch_depth
    if config.store.path is not None:
        total += BloomFilter(config.store.filter_mib << 23).words.nbytes
    return total


def as_bytes(records: np.ndarray) -> np.ndarray:
    """``(N,)`` records -> ``(N, itemsize)`` uint8 (what a store holds)."""
    return records.view(np.uint8).reshape(len(records), records.dtype.itemsize)


@dataclass
class MappedBatch:
    """A batch of ``B`` raw IDs mapped to tier-0 rows (admitted rows or default rows).

    Attributes:
        step: the table step that mapped it.
        ids: ``(B,)`` the raw IDs.
        rows: ``(B,)`` int64 tier-0 row of each ID.
        unique_rows: ``(U,)`` the distinct rows; ``inverse``: ``(B,)`` index into it.
    """

    step: int
    ids: np.ndarray
    rows: torch.Tensor
    unique_rows: torch.Tensor
    inverse: torch.Tensor


class DynamicTable:
    """Args: config: the table's settings; rank / world_size: this process's shard (its store folder is
    ``<store.path>/rank<rank>``); device: where tier 0 lives."""

    def __init__(self, config: DynamicTableConfig, rank: int = 0, world_size: int = 1,
                 device: torch.device | str = "cpu"):
        self.config, self.rank, self.world_size = config, rank, world_size
        c, dim = config.capacity, config.dim
        self.state_width = config.optimizer.state_width(dim)
        self.dtype = record_dtype(dim, self.state_width)
        self.weight = torch.zeros(c + config.default_rows, dim, device=device)
        self.state = torch.zeros(c + config.default_rows, self.state_width, device=device)
        if config.default.kind != "zeros":
            defaults = -np.arange(1, config.default_rows + 1, dtype=np.int64)
            self.weight[c:] = torch.from_numpy(init_rows(defaults, dim, config.seed ^ _DEFAULT_SEED,
                                                         config.init_bound))
        self.slot_ids = np.zeros(c, dtype=np.int64)
        self.slot_version = np.zeros(c, dtype=np.int64)
        self.slot_time = np.zeros(c, dtype=np.int64)
        self.index = SlotMap(c)
        self._free = np.arange(c - 1, -1, -1, dtype=np.int64)  # a stack: slot 0 is taken first
        self._free_top = c
        e = config.eviction
        self.eviction: Eviction = (LRU(c) if e.policy == "lru" else LFU(c, e.lfu_decay, e.lfu_sample, config.seed))
        a = config.admission
        self.admission = Admission(a.policy, a.min_count, a.probability, a.sketch_width, a.sketch_depth, config.seed)
        self.store = self.write_back = self.stored = None
        if config.store.path is not None:
            self.stored = BloomFilter(config.store.filter_mib << 23)  # IDs that went down to tier 2
            shutil.rmtree(self.store_path, ignore_errors=True)  # the live store is scratch: runs resume from checkpoints
            self.store = open_store(config.store.backend, self.store_path, self.dtype.itemsize,
                                    cache_mib=config.store.cache_mib)
            self.write_back = WriteBack(self.store, config.store.write_back_batches)
        self.step = 0
        self.clock = 0
        self.deletions = DeletionLog()
        self.counts = dict.fromkeys(COUNTER_NAMES, 0)
        self.lock = threading.RLock()

    @property
    def store_path(self) -> Path:
        return Path(self.config.store.path) / f"rank{self.rank}"

    # ---------------------------------------------------------------- mapping (training)
    def map(self, ids: np.ndarray | torch.Tensor, times: np.ndarray | torch.Tensor | None = None,
            counted: np.ndarray | torch.Tensor | None = None) -> MappedBatch:
        """Map one training batch of ``(B,)`` raw IDs (with optional ``(B,)`` event times) to tier-0 rows: admit new
        IDs, fetch stored rows, evict to make room. One call = one step.

        ``counted``: ``(B,)`` bool, the IDs that are occurrences of the feature and count towards admission (None:
        all of them); the others (the items a loss scores: its positives and negatives) are looked up, and read
        their row if they have one, but neither count nor, under ``probability``, draw an admission."""
        ids = _numpy(ids)
        with self.lock:
            self.step += 1
            step = self.step
            self.clock = max(self.clock, int(_numpy(times).max()) if times is not None and len(times) else step)
            if self.config.eviction.ttl is not None and step % self.config.eviction.ttl_every == 0:
                self._expire_tier0(step)
            unique, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
            occurrences = counts if counted is None else np.bincount(
                inverse[_numpy(counted).astype(bool)], minlength=len(unique))
            rows = self.index.find(unique)
            hit = rows >= 0
            self.eviction.pin(rows[hit], step)

            missing = np.flatnonzero(~hit)
            stored, records = self._fetch(unique[missing])
            new = missing[~stored]
            admitted = new[self.admission.admit(unique[new], occurrences[new], step)]
            incoming = np.sort(np.concatenate([missing[stored], admitted]))  # positions in `unique`
            slots = self._allocate(len(incoming), step)
            rows[incoming] = slots
            self.index.insert(unique[incoming], slots)
            self.slot_ids[slots] = unique[incoming]

            from_store = np.isin(incoming, missing[stored], assume_unique=True)
            self._load_records(slots[from_store], records)
            self._init_rows(slots[~from_store], unique[incoming[~from_store]], step)

            resident = rows >= 0
            self.eviction.touch(rows[resident], step, counts[resident])
            self.slot_time[rows[resident]] = self.clock
            outside = ~resident
            rows[outside] = self.config.capacity + self._default_index(unique[outside])

            c = self.counts
            c["steps"] += 1
            c["lookups"] += len(ids)
            c["hits_tier0"] += int(counts[hit].sum()) + int(counts[incoming].sum()) - len(incoming)
            c["hits_tier2"] += int(stored.sum())
            c["admitted"] += len(admitted)
            c["not_admitted"] += int(counts[outside].sum())
            unique_rows, row_inverse = np.unique(rows, return_inverse=True)
            return MappedBatch(step, ids, torch.from_numpy(rows[inverse]), torch.from_numpy(unique_rows),
                               torch.from_numpy(row_inverse[inverse]))

    def _default_index(self, ids: np.ndarray) -> np.ndarray:
        if self.config.default.kind != "hashed":
            return np.zeros(len(ids), dtype=np.int64)
        return (mix64(ids, self.config.seed ^ _DEFAULT_SEED) % np.uint64(self.config.default_rows)).astype(np.int64)

    def _fetch(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of lower tiers: ``(N,)`` bool found and the ``(F,)`` records (TTL-expired rows are deleted)."""
        if self.write_back is None or len(ids) == 0:
            return np.zeros(len(ids), dtype=bool), np.zeros(0, dtype=self.dtype)
        found, records = self._stored(ids)
        ttl = self.config.eviction.ttl
        if ttl is not None and len(records):
            expired = records["time"] < self.clock - ttl
            if expired.any():
                gone = ids[found][expired]
                self.write_back.put(gone, None)
                self._log_deleted(gone, "expired")
                found[np.flatnonzero(found)[expired]] = False
                records = records[~expired]
        return found, records

    def _stored(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(N,)`` IDs -> (``(N,)`` bool found in tier 2 (write-back queue or store), ``(F,)`` their records)."""
        maybe = self.stored.maybe(ids)
        found = np.zeros(len(ids), dtype=bool)
        found[maybe], _, raw = self.write_back.get(ids[maybe])
        return found, raw.view(self.dtype).reshape(-1)

    def store_rows(self, ids: np.ndarray, records: np.ndarray) -> None:
        """Send ``(N,)`` records of ``(N,)`` IDs down to tier 2."""
        self.stored.add(ids)
        self.write_back.put(ids, as_bytes(records))

    def _allocate(self, k: int, step: int) -> np.ndarray:
        """``k`` free tier-0 slots: free ones first, then evicted ones."""
        take = min(k, self._free_top)
        slots = self._free[self._free_top - take:self._free_top][::-1].copy()
        self._free_top -= take
        if k > take:
            victims = self.eviction.victims(k - take, pin_from=step - self.config.pinned_batches, step=step)
            self._evict(victims, step)
            slots = np.concatenate([slots, victims])
        return slots

    def _evict(self, slots: np.ndarray, step: int) -> None:
        """Move rows out of tier 0: to tier 2, or deleted when there is none."""
        ids = self.slot_ids[slots]
        if self.write_back is not None:
            self.store_rows(ids, self._records(slots, step))
            self.counts["written_back"] += len(slots)
        else:
            self._log_deleted(ids, None)
        self.index.remove(ids)
        self.eviction.free(slots)
        self.counts["evicted"] += len(slots)

    def _expire_tier0(self, step: int) -> None:
        """Delete the tier-0 rows unused for longer than the TTL (not those of batches in flight)."""
        occupied = self.eviction.last_step >= 0
        old = np.flatnonzero(occupied & (self.slot_time < self.clock - self.config.eviction.ttl)
                             & (self.eviction.last_step < step - self.config.pinned_batches))
        if len(old) == 0:
            return
        ids = self.slot_ids[old]
        self.index.remove(ids)
        self.eviction.free(old)
        self._free[self._free_top:self._free_top + len(old)] = old[::-1]
        self._free_top += len(old)
        if self.write_back is not None:
            self.write_back.put(ids, None)  # a stale copy may be in the store
        self._log_deleted(ids, "expired")

    def expire_store(self) -> None:
        """Delete every tier-2 row unused for longer than the TTL (tier 2 otherwise expires a row when it is read
        back): a full scan, run before an export so that a delta lists those deletions."""
        if self.config.eviction.ttl is None or self.store is None:
            return
        with self.lock:
            self.write_back.flush()
            cutoff, gone = self.clock - self.config.eviction.ttl, []
            for ids, raw in self.store.scan():
                old = (raw.view(self.dtype).reshape(-1)["time"] < cutoff) & (self.index.find(ids) < 0)
                gone.append(ids[old])
            gone_ids = np.concatenate(gone) if gone else np.zeros(0, dtype=np.int64)
            self.write_back.put(gone_ids, None)
            self._log_deleted(gone_ids, "expired")

    def _log_deleted(self, ids: np.ndarray, reason: str | None) -> None:
        self.deletions.add(ids, self.step)
        self.counts["deleted"] += len(ids)
        if reason:
            self.counts[reason] += len(ids)

    def _records(self, slots: np.ndarray, step: int) -> np.ndarray:
        """``(k,)`` records of tier-0 ``slots``."""
        out = np.zeros(len(slots), dtype=self.dtype)
        index = torch.from_numpy(slots)
        out["weight"] = self.weight.index_select(0, index).cpu().numpy()
        out["state"] = self.state.index_select(0, index).cpu().numpy()
        out["version"] = self.slot_version[slots]
        out["time"] = self.slot_time[slots]
        out["step"] = self.eviction.last_step[slots]
        out["count"] = self.eviction.counts_of(slots, step)
        return out

    def _load_records(self, slots: np.ndarray, records: np.ndarray) -> None:
        index = torch.from_numpy(slots)
        self.weight.index_copy_(0, index, torch.from_numpy(records["weight"]).to(self.weight.device))
        self.state.index_copy_(0, index, torch.from_numpy(records["state"]).to(self.state.device))
        self.slot_version[slots] = records["version"]
        self.slot_time[slots] = records["time"]
        self.eviction.restore_counts(slots, records["count"], records["step"])

    def _init_rows(self, slots: np.ndarray, ids: np.ndarray, step: int) -> None:
        index = torch.from_numpy(slots)
        rows = init_rows(ids, self.config.dim, self.config.seed, self.config.init_bound)
        self.weight.index_copy_(0, index, torch.from_numpy(rows).to(self.weight.device))
        self.state.index_fill_(0, index, 0.0)
        self.slot_version[slots] = step

    # ---------------------------------------------------------------- training
    def apply_gradients(self, mapped: MappedBatch, grad: torch.Tensor) -> None:
        """The fused update of a mapped batch: ``grad (B, D)`` summed per row, then :meth:`apply_summed`."""
        summed = grad.new_zeros(len(mapped.unique_rows), grad.shape[1]).index_add_(0, mapped.inverse, grad)
        self.apply_summed(mapped, summed)

    def apply_summed(self, mapped: MappedBatch, summed: torch.Tensor) -> None:
        """The row optimizer on ``mapped.unique_rows`` with their summed gradients ``(U, D)`` (the frozen zero
        default row excepted); the updated rows' version becomes the batch's step."""
        rows = mapped.unique_rows
        if self.config.default.kind == "zeros":
            keep = rows < self.config.capacity
            rows, summed = rows[keep], summed[keep]
        self.config.optimizer.step(self.weight, self.state, rows, summed)
        slots = rows[rows < self.config.capacity].numpy()
        self.slot_version[slots] = mapped.step

    # ---------------------------------------------------------------- reading (evaluation, export)
    @torch.no_grad()
    def read(self, ids: np.ndarray | torch.Tensor) -> torch.Tensor:
        """``(B,)`` raw IDs -> ``(B, D)`` rows without changing anything: tier 0, else a lower tier, else the
        default."""
        ids = _numpy(ids)
        with self.lock:
            unique, inverse = np.unique(ids, return_inverse=True)
            rows = self.index.find(unique)
            out = torch.empty(len(unique), self.config.dim, device=self.weight.device)
            hit = rows >= 0
            out[torch.from_numpy(hit)] = self.weight.index_select(0, torch.from_numpy(rows[hit]))
            missing = np.flatnonzero(~hit)
            stored = np.zeros(len(missing), dtype=bool)
            if self.write_back is not None and len(missing):
                stored, records = self._stored(unique[missing])
                if self.config.eviction.ttl is not None:  # expired rows read the default (deleted at next use)
                    live = records["time"] >= self.clock - self.config.eviction.ttl
                    stored[np.flatnonzero(stored)[~live]] = False
                    records = records[live]
                out[torch.from_numpy(missing[stored])] = torch.from_numpy(records["weight"]).to(out.device)
            rest = missing[~stored]
            out[torch.from_numpy(rest)] = self.weight.index_select(
                0, torch.from_numpy(self.config.capacity + self._default_index(unique[rest])))
            return out[torch.from_numpy(inverse)]

    def tier0_records(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows in tier 0: ``(N,)`` raw IDs, ``(N,)`` slots and ``(N,)`` records, in slot order."""
        slots = np.flatnonzero(self.eviction.last_step >= 0)
        return self.slot_ids[slots].copy(), slots, self._records(slots, self.step)

    def rows(self, chunk: int = 65536):
        """Every admitted row, as ``(ids (N,), records (N,))`` chunks: tier 0, then tier 2 minus the IDs in tier 0
        (the store may keep a stale copy of a row that moved up). Flushes the write-back first."""
        ids, _, records = self.tier0_records()
        yield ids, records
        if self.store is None:
            return
        self.write_back.flush()
        ttl = self.config.eviction.ttl
        for ids, raw in self.store.scan(chunk):
            records = raw.view(self.dtype).reshape(-1)
            keep = self.index.find(ids) < 0
            if ttl is not None:
                keep &= records["time"] >= self.clock - ttl
            yield ids[keep], records[keep]

    # ---------------------------------------------------------------- bookkeeping
    def counters(self) -> dict[str, float]:
        """Totals since the table was built (or loaded): lookups, hits per tier, admissions, evictions; live rows;
        hit rates (per lookup: tier 0, tier 2)."""
        out: dict[str, float] = dict(self.counts)
        out["live_rows_tier0"] = self.index.live
        out["capacity"] = self.config.capacity
        lookups = max(self.counts["lookups"], 1)
        out["hit_rate_tier0"] = self.counts["hits_tier0"] / lookups
        out["hit_rate_tier2"] = self.counts["hits_tier2"] / lookups
        return out

    def memory_bytes(self) -> int:
        """Bytes of tier 0 and its bookkeeping (map, metadata, LRU queue / LFU scores, admission sketch)."""
        arrays = [self.slot_ids, self.slot_version, self.slot_time, self._free, self.eviction.last_step]
        arrays += [getattr(self.eviction, name) for name in ("_slot", "_step", "score") if hasattr(self.eviction, name)]
        sketch = self.admission.sketch.counts.nbytes if self.admission.sketch is not None else 0
        sketch += self.stored.words.nbytes if self.stored is not None else 0
        tensors = self.weight.numel() * 4 + self.state.numel() * 4
        return tensors + self.index.nbytes + sum(a.nbytes for a in arrays) + sketch

    def close(self) -> None:
        if self.write_back is not None:
            self.write_back.close()
            self.store.close()


class DeletionLog:
    """Raw IDs deleted (evicted with no tier 2, or expired) and the step of their deletion, for delta exports;
    keeps about the last ``limit`` deletions (:attr:`start`: the step up to which deletions may be forgotten)."""

    def __init__(self, limit: int = 1 << 22):
        self.limit = limit
        self._chunks: list[tuple[np.ndarray, int]] = []
        self._size = 0
        self.start = 0

    def add(self, ids: np.ndarray, step: int) -> None:
        if len(ids) == 0:
            return
        self._chunks.append((ids.copy(), step))
        self._size += len(ids)
        while self._size - len(self._chunks[0][0]) >= self.limit:
            dropped, self.start = self._chunks.pop(0)
            self._size -= len(dropped)

    @property
    def ids(self) -> np.ndarray:
        return np.concatenate([c[0] for c in self._chunks]) if self._chunks else np.zeros(0, dtype=np.int64)

    @property
    def steps(self) -> np.ndarray:
        return (np.concatenate([np.full(len(c[0]), c[1], dtype=np.int64) for c in self._chunks]) if self._chunks
                else np.zeros(0, dtype=np.int64))

    def load(self, ids: np.ndarray, steps: np.ndarray, start: int) -> None:
        self._chunks = [(ids[steps == s], int(s)) for s in np.unique(steps)]
        self._size, self.start = len(ids), start

    def since(self, version: int) -> np.ndarray:
        """IDs deleted after ``version`` (raises if some of those deletions were forgotten)."""
        if version < self.start:
            raise ValueError(f"deletions up to step {self.start} were forgotten: export everything instead of a "
                             f"delta since {version}")
        return np.unique(np.concatenate([c[0] for c in self._chunks if c[1] > version] or [np.zeros(0, np.int64)]))


def _numpy(x: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().astype(np.int64, copy=False)
    return np.asarray(x, dtype=np.int64)


class _FusedLookup(torch.autograd.Function):
    """Gather the mapped rows; in backward, apply the table's optimizer to them (no gradient flows further)."""

    @staticmethod
    def forward(ctx, anchor: torch.Tensor, table: DynamicTable, mapped: MappedBatch) -> torch.Tensor:
        ctx.table, ctx.mapped = table, mapped
        return table.weight.index_select(0, mapped.rows.to(table.weight.device))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        ctx.table.apply_gradients(ctx.mapped, grad.contiguous())
        return None, None, None


_ANCHOR = torch.zeros(0, requires_grad=True)


def lookup(table: DynamicTable, mapped: MappedBatch) -> torch.Tensor:
    """``(B, D)`` rows of a mapped batch, differentiable: the backward pass updates the rows in place."""
    return _FusedLookup.apply(_ANCHOR, table, mapped)
