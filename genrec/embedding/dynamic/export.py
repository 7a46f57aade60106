"""Export of a dynamic table for serving: all admitted rows keyed by raw ID, or a delta since a version.

A table's version is its step count (one per training batch). Every row records the step that last changed it, and
deletions (evicted with no tier 2, or expired) are logged with their step, so ``export_rows(table, folder, since=N)``
writes exactly what a server holding version ``N`` needs to reach the current version: the rows changed after
``N`` (upserts) and the IDs deleted after ``N`` (removals; applied first, an ID deleted then re-admitted is upserted).

Layout, per shard ``<folder>/part-rank<r>/``: ``ids.npy (N,) int64``, ``rows.npy (N, D) float32``,
``deleted_ids.npy (M,) int64``, ``default_rows.npy (R, D) float32`` and ``manifest.json`` (``version``, ``since``
(null for a full export), ``dim``, ``rows``, ``deleted``, ``default`` (zeros | unknown | hashed) and, for hashed
defaults, ``default_seed``: an unknown ID reads ``default_rows[mix64(id, default_seed) % R]``).
:func:`apply_export` is the reference for a serving side.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from genrec.embedding.dynamic.table import _DEFAULT_SEED, DynamicTable


def export_rows(table: DynamicTable, folder: str | Path, since: int | None = None) -> dict:
    """Write this process's shard of ``table`` (all rows, or a delta since version ``since``); returns the
    manifest. Take it at a step boundary (no prefetched batch waiting)."""
    part = Path(folder) / f"part-rank{table.rank}"
    part.mkdir(parents=True, exist_ok=True)
    with table.lock:
        table.expire_store()
        deleted = table.deletions.since(since) if since is not None else np.zeros(0, dtype=np.int64)
        ids, rows = [], []
        for chunk_ids, records in table.rows():
            keep = records["version"] > since if since is not None else slice(None)
            ids.append(chunk_ids[keep])
            rows.append(records["weight"][keep])
        ids_all = np.concatenate(ids)
        rows_all = np.concatenate(rows).reshape(len(ids_all), table.config.dim)
        order = np.argsort(ids_all)
        np.save(part / "ids.npy", ids_all[order])
        np.save(part / "rows.npy", rows_all[order])
        np.save(part / "deleted_ids.npy", deleted)
        np.save(part / "default_rows.npy", table.weight[table.config.capacity:].cpu().numpy())
        manifest = {"version": table.step, "since": since, "dim": table.config.dim, "rows": len(ids_all),
                    "deleted": len(deleted), "default": table.config.default.kind,
                    "default_seed": table.config.seed ^ _DEFAULT_SEED, "rank": table.rank,
                    "world_size": table.world_size}
        (part / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def read_export(folder: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
    """All parts of an export: ``(ids (N,), rows (N, D), deleted_ids (M,), manifests)``."""
    parts = sorted(Path(folder).glob("part-rank*"))
    if not parts:
        raise FileNotFoundError(f"{folder}: no exported part (part-rank<r>/)")
    manifests = [json.loads((p / "manifest.json").read_text()) for p in parts]
    ids = np.concatenate([np.load(p / "ids.npy") for p in parts])
    rows = np.concatenate([np.load(p / "rows.npy") for p in parts])
    deleted = np.concatenate([np.load(p / "deleted_ids.npy") for p in parts])
    return ids, rows, deleted, manifests


def apply_export(ids: np.ndarray, rows: np.ndarray, folder: str | Path, version: int | None = None
                 ) -> tuple[np.ndarray, np.ndarray, int]:
    """A serving table ``ids (N,) / rows (N, D)`` at ``version`` updated by the export in ``folder``: a full
    export replaces it, a delta must be ``since`` that version. Returns ``(ids, rows, new version)`` sorted by ID."""
    new_ids, new_rows, deleted, manifests = read_export(folder)
    since = manifests[0]["since"]
    if since is not None and since != version:
        raise ValueError(f"{folder}: a delta since version {since} cannot update a table at version {version}")
    if since is None:
        ids, rows = new_ids, new_rows
    else:
        keep = ~np.isin(ids, np.concatenate([deleted, new_ids]))
        ids, rows = np.concatenate([ids[keep], new_ids]), np.concatenate([rows[keep], new_rows])
    order = np.argsort(ids)
    return ids[order], rows[order], manifests[0]["version"]
