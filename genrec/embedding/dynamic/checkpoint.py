"""Checkpoints of dynamic tables: written atomically, readable at another world size.

Layout of a checkpoint folder ``<path>/``: one folder per table shard, ``<table>/rank<r>/`` with ``state.npz`` (the
tier-0 rows as records with their raw IDs and slots, the free-slot stack, the admission sketch, LFU scores, the
deletion log), ``meta.json`` (step, clock, counters, world size, capacity, row layout) and ``store/``: a consistent
snapshot of the shard's tier 2 taken by the store's own mechanism (RocksDB Checkpoint / LMDB copy).

Integrity: ``manifest.json`` (:mod:`genrec.utils.integrity`), written last under ``<path>.tmp/``, holds the run ID
the caller passes and every file's sha256; loading checks it first, so a deleted, truncated or corrupted file (a
store's ``.sst`` or ``MANIFEST``, ``state.npz``) or a snapshot of another run is a one-line
:class:`~genrec.errors.DataError` naming the snapshot's own file, before anything is loaded.

Atomicity: everything is written under ``<path>.tmp/`` (files fsynced); then ``<path>`` (if any) is renamed to
``<path>.old``, ``<path>.tmp`` to ``<path>``, and ``<path>.old`` removed. A process killed at any point leaves
either the previous checkpoint at ``<path>``, or (between the two renames) at ``<path>.old``, which
:func:`resolve` finds. Take a checkpoint with no prefetched batch waiting (they are mapped already).

Loading: at the same world size and capacity, each shard gets back exactly its slots, eviction order and store
(a live copy of the snapshot); otherwise every process reads all old shards and keeps the rows it owns (raw-ID
hash, :func:`~genrec.embedding.dynamic.hashing.owner`): the most recently used fill tier 0, the rest go to tier 2.
"""
from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from genrec.embedding.dynamic.eviction import LFU, LRU
from genrec.embedding.dynamic.hashing import owner
from genrec.storage.durable import fsync_dir, fsync_tree
from genrec.storage.stores import open_store, restore_snapshot
from genrec.embedding.dynamic.table import DynamicTable
from genrec.errors import DataError, writing
from genrec.utils.integrity import check_manifest, write_manifest

FORMAT = 1
STATE_FILE, META_FILE, STORE_DIR = "state.npz", "meta.json", "store"


def resolve(path: str | Path) -> Path:
    """The checkpoint folder to read: ``path``, or ``path.old`` left by a crash between the final renames."""
    path = Path(path)
    if path.exists():
        return path
    old = path.with_name(path.name + ".old")
    if old.exists():
        return old
    raise FileNotFoundError(f"{path}: no dynamic-table checkpoint here")


def save_checkpoint(tables: dict[str, DynamicTable], path: str | Path, barrier: Callable[[], None] = lambda: None,
                    is_rank_zero: bool = True, run_id: str | None = None) -> None:
    """Write every table's shard of this process into the checkpoint ``path``, atomically, bound to the run
    ``run_id``. Collective when several processes hold shards: each passes its tables and a ``barrier`` (e.g.
    ``torch.distributed.barrier``). A full disk is a one-line :class:`~genrec.errors.DiskFullError`."""
    path = Path(path)
    tmp, old = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")
    if is_rank_zero:
        shutil.rmtree(tmp, ignore_errors=True)
    barrier()
    with writing(path):
        for name, table in tables.items():
            save_shard(table, tmp / name / f"rank{table.rank}")
    barrier()
    if is_rank_zero:
        with writing(path):
            write_manifest(tmp, run_id)  # last: every shard is written
        fsync_dir(tmp)
        if path.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.rename(path, old)
        os.rename(tmp, path)
        fsync_dir(path.parent)
        shutil.rmtree(old, ignore_errors=True)
    barrier()


def shard_state(table: DynamicTable) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """This process's shard of ``table`` without its store: ``(arrays, meta)``."""
    with table.lock:
        ids, slots, records = table.tier0_records()
        arrays: dict[str, Any] = {"ids": ids, "slots": slots, "records": records,
                                  "free": table._free[:table._free_top].copy(),
                                  "default_weight": _default(table, "weight"), "default_state": _default(table, "state"),
                                  "deleted_ids": table.deletions.ids, "deleted_steps": table.deletions.steps,
                                  **table.admission.state_dict()}
        if isinstance(table.eviction, LFU):
            arrays["lfu_score"], arrays["lfu_base"] = table.eviction.score.copy(), np.array(table.eviction._base)
        if table.stored is not None:
            arrays["stored_filter"] = table.stored.words.copy()
        meta = {"format": FORMAT, "step": table.step, "clock": table.clock, "counts": dict(table.counts),
                "rank": table.rank, "world_size": table.world_size, "capacity": table.config.capacity,
                "dim": table.config.dim, "state_width": table.state_width, "deletions_start": table.deletions.start,
                "store": table.store is not None}
    return arrays, meta


def save_shard(table: DynamicTable, folder: Path) -> None:
    """One shard: ``state.npz``, ``meta.json`` and ``store/`` (flushes the write-back first)."""
    folder.mkdir(parents=True)
    with table.lock:
        arrays, meta = shard_state(table)
        with open(folder / STATE_FILE, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        _write_text(folder / META_FILE, json.dumps(meta, indent=1))
        if table.store is not None:
            table.write_back.flush()
            table.store.checkpoint(folder / STORE_DIR)
            fsync_tree(folder / STORE_DIR)


def load_checkpoint(tables: dict[str, DynamicTable], path: str | Path, run_id: str | None = None,
                    checked: bool = False) -> None:
    """Load every table's shard from the checkpoint ``path`` (any world size), written by the run ``run_id``
    (checked first, against its manifest, unless the caller ``checked`` it already). Tables must be freshly built.
    A damaged checkpoint is a :class:`~genrec.errors.DataError` naming its file."""
    root = resolve(path)
    if not checked:
        check_manifest(root, run_id)
    for name, table in tables.items():
        shards = sorted((root / name).glob("rank*"), key=lambda p: int(p.name[4:]))
        if not shards:
            raise FileNotFoundError(f"{root / name}: no shard of table {name!r} in the checkpoint")
        load_state(table, [_read_state(s / STATE_FILE) for s in shards], [_read_meta(s / META_FILE) for s in shards],
                   [s / STORE_DIR if (s / STORE_DIR).exists() else None for s in shards])


def _read_state(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as arrays:
            return dict(arrays)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise DataError(path, f"not a readable table state (truncated or corrupt): {err}") from None


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DataError(path, f"not a readable table meta: {err}") from None


def _open_snapshot(table: DynamicTable, snapshot: Path, path: Path, read_only: bool = False):
    """The store at ``path`` (a live copy of ``snapshot``, or ``snapshot`` itself read-only); a store that does not
    open is a :class:`DataError` naming the snapshot, not the copy."""
    settings = {"read_only": True} if read_only else {"cache_mib": table.config.store.cache_mib}
    try:
        return open_store(table.config.store.backend, path, table.dtype.itemsize, **settings)
    except Exception as err:  # rocksdict and lmdb raise their own (RocksDB: a bare Exception)
        reason = " ".join(str(err).replace(str(path), str(snapshot)).split())[:300]
        raise DataError(snapshot, f"the store snapshot cannot be opened (missing or corrupt files): {reason}") from None


def load_state(table: DynamicTable, states: list[dict], metas: list[dict], snapshots: list[Path | None]) -> None:
    """Load the shards ``states``/``metas`` (with their store ``snapshots``) of a checkpoint into a freshly built
    ``table``: exactly when the world size and capacity are the same, else re-partitioned by raw-ID hash."""
    for meta in metas:
        if meta["format"] != FORMAT or meta["dim"] != table.config.dim or meta["state_width"] != table.state_width:
            raise ValueError(f"checkpoint rows are dim {meta['dim']} with {meta['state_width']} optimizer state "
                             f"columns; the table has {table.config.dim} and {table.state_width}")
        if meta["store"] and table.store is None:
            raise ValueError("the checkpoint has rows in a store; set embedding.store.path to load it")
    same_layout = (len(metas) == table.world_size == metas[0]["world_size"]
                   and metas[0]["capacity"] == table.config.capacity)
    with table.lock:
        mine = metas[table.rank] if same_layout else metas[0]
        table.step, table.clock = mine["step"], max(m["clock"] for m in metas)
        table.counts = dict(mine["counts"]) if same_layout else {
            k: sum(m["counts"][k] for m in metas) for k in table.counts}
        c = table.config.capacity
        table.weight[c:] = _tensor(states[0]["default_weight"])
        table.state[c:] = _tensor(states[0]["default_state"])
        table.admission.load_state_dict([states[table.rank]] if same_layout else states)
        table.deletions.load(np.concatenate([s["deleted_ids"] for s in states]),
                             np.concatenate([s["deleted_steps"] for s in states]), max(m["deletions_start"] for m in metas))
        if same_layout:
            _restore_exact(table, states[table.rank], snapshots[table.rank])
        else:
            _restore_repartitioned(table, states, snapshots)


def _restore_exact(table: DynamicTable, state: dict, snapshot: Path | None) -> None:
    """Same world size and capacity: the same slots, free stack, eviction order and store."""
    _place(table, state["ids"], state["slots"], state["records"])
    table._free_top = len(state["free"])
    table._free[:table._free_top] = state["free"]
    if isinstance(table.eviction, LFU):
        table.eviction.score[:] = state["lfu_score"]
        table.eviction._base = int(state["lfu_base"])
    if snapshot is not None:
        if len(state["stored_filter"]) != len(table.stored.words):
            raise ValueError("embedding.store.filter_mib differs from the checkpoint's: load it with the same setting")
        table.stored.words[:] = state["stored_filter"]
        table.write_back.flush()
        table.store.close()
        restore_snapshot(snapshot, table.store_path)
        table.store = _open_snapshot(table, snapshot, table.store_path)
        table.write_back.store = table.store


def _restore_repartitioned(table: DynamicTable, states: list[dict], snapshots: list[Path | None]) -> None:
    """Another world size or capacity: keep the rows this process owns; the most recently used go to tier 0."""
    ids = np.concatenate([s["ids"] for s in states])
    records = np.concatenate([s["records"] for s in states])
    keep = owner(ids, table.world_size) == table.rank
    ids, records = ids[keep], records[keep]
    order = np.lexsort((ids, -records["step"]))  # most recent first, ties by raw ID
    ids, records = ids[order], records[order]
    c = table.config.capacity
    overflow_ids, overflow = ids[c:], records[c:]
    ids, records = ids[:c], records[:c]
    if len(overflow_ids) and table.store is None:
        raise ValueError(f"the checkpoint holds {len(ids) + len(overflow_ids)} rows for this process, more than "
                         f"embedding.capacity={c}, and no embedding.store.path is set to hold the rest")
    _place(table, ids, np.arange(len(ids), dtype=np.int64), records)
    table._free_top = c - len(ids)
    table._free[:table._free_top] = np.arange(c - 1, len(ids) - 1, -1)
    if table.store is None:
        return
    table.store_rows(overflow_ids, overflow)
    for snapshot in snapshots:
        if snapshot is None:
            continue
        old = _open_snapshot(table, snapshot, snapshot, read_only=True)
        try:
            for chunk_ids, raw in old.scan():
                mine = (owner(chunk_ids, table.world_size) == table.rank) & (table.index.find(chunk_ids) < 0)
                mine &= ~np.isin(chunk_ids, overflow_ids)
                table.store_rows(chunk_ids[mine], raw[mine].view(table.dtype).reshape(-1))
        finally:
            old.close()
    table.write_back.flush()


def _place(table: DynamicTable, ids: np.ndarray, slots: np.ndarray, records: np.ndarray) -> None:
    """Put rows into tier 0 at the given slots, with their metadata; rebuild the LRU queue."""
    table.index.insert(ids, slots)
    table.slot_ids[slots] = ids
    table.eviction.last_step[slots] = records["step"]
    table._load_records(slots, records)
    if isinstance(table.eviction, LRU):
        table.eviction.rebuild(slots, ids)


def _default(table: DynamicTable, name: str) -> np.ndarray:
    return getattr(table, name)[table.config.capacity:].cpu().numpy()


def _tensor(array: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(array))


def _write_text(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
