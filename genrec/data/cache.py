"""Processed datasets cached as Parquet, keyed by the reader config, the preprocessing config and the input files.

A cache entry is a folder ``<cache_dir>/<name>-<key>/`` with ``interactions.parquet`` (user, item, timestamp in
sequence order; plus ``rating`` when the data has ratings), ``items.parquet`` (dense ID, raw ID, content),
``users.parquet`` (raw ID, attributes) and ``meta.json``.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from genrec.data.preprocess import PreprocessConfig, build_sequences
from genrec.data.schema import InteractionLog, SequenceData

log = logging.getLogger(__name__)

CACHE_VERSION = 2  # 2: ratings and user attributes kept


def _fingerprint(value: Any) -> Any:
    """Replace every string that names an existing file by (path, size, mtime) so edited inputs miss the cache."""
    if isinstance(value, dict):
        return {k: _fingerprint(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_fingerprint(v) for v in value]
    if isinstance(value, str) and value and os.path.exists(value):
        path = Path(value)
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        return [value] + [[str(f), f.stat().st_size, int(f.stat().st_mtime)] for f in files]
    return value


def _code_fingerprint(target: str | None) -> str | None:
    """Hash of the source file of the reader's module, so a changed reader (or generator) misses the cache."""
    if not target:
        return None
    spec = importlib.util.find_spec(target.rsplit(".", 1)[0])
    if spec is None or not spec.origin or not os.path.exists(spec.origin):
        return None
    return hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()[:16]


def cache_key(reader_cfg: dict, preprocess: PreprocessConfig) -> str:
    payload = json.dumps({"v": CACHE_VERSION, "reader": _fingerprint(reader_cfg), "pre": preprocess.as_dict(),
                          "code": _code_fingerprint(reader_cfg.get("_target_"))}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def save_sequences(data: SequenceData, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    users = np.repeat(np.arange(data.num_users, dtype=np.int64), data.lengths)
    columns = {"user": users, "item": data.item_ids}
    if data.timestamps is not None:
        columns["timestamp"] = data.timestamps
    if data.ratings is not None:
        columns["rating"] = data.ratings
    # straight from the arrays (no DataFrame copy): a 100M-event dataset stays within its own size plus users
    pq.write_table(pa.table(columns), folder / "interactions.parquet")
    items = pd.DataFrame({"raw_id": data.item_raw_ids[1:]}, index=pd.RangeIndex(1, data.num_items + 1, name="item"))
    if data.items is not None:
        items = items.join(data.items)
    items.to_parquet(folder / "items.parquet")
    users = pd.DataFrame({"raw_id": data.user_raw_ids})
    if data.users is not None:
        users = users.join(data.users.reset_index(drop=True))
    users.to_parquet(folder / "users.parquet", index=False)
    meta = {"name": data.name, "has_items": data.items is not None, "has_users": data.users is not None,
            "version": CACHE_VERSION}
    (folder / "meta.json").write_text(json.dumps(meta))


def load_sequences(folder: Path) -> SequenceData:
    meta = json.loads((folder / "meta.json").read_text())
    inter = pd.read_parquet(folder / "interactions.parquet")
    items = pd.read_parquet(folder / "items.parquet")
    users = pd.read_parquet(folder / "users.parquet")
    counts = np.bincount(inter["user"].to_numpy(), minlength=len(users))
    item_raw_ids = np.empty(len(items) + 1, dtype=object)
    item_raw_ids[1:] = items["raw_id"].to_numpy()
    return SequenceData(
        name=meta["name"],
        item_ids=inter["item"].to_numpy(np.int64),
        offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        timestamps=inter["timestamp"].to_numpy(np.int64) if "timestamp" in inter.columns else None,
        item_raw_ids=item_raw_ids,
        user_raw_ids=users["raw_id"].to_numpy(),
        items=items.drop(columns="raw_id") if meta["has_items"] else None,
        ratings=inter["rating"].to_numpy(np.float32) if "rating" in inter.columns else None,
        users=users.drop(columns="raw_id").rename_axis("user") if meta["has_users"] else None,
    )


def load_or_build(reader_cfg: dict, read: Callable[[], InteractionLog], preprocess: PreprocessConfig,
                  cache_dir: str | Path | None) -> SequenceData:
    """Return the processed dataset from the cache, or read + preprocess it and store it there.

    Args:
        reader_cfg: the reader's config (plain dict); with ``preprocess`` it forms the cache key.
        read: builds the raw :class:`InteractionLog` (called only on a cache miss).
        cache_dir: cache root; ``None`` disables caching.
    """
    if cache_dir is None:
        return build_sequences(read(), preprocess)
    name = str(reader_cfg.get("name", "data"))
    folder = Path(cache_dir) / f"{name}-{cache_key(reader_cfg, preprocess)}"
    if (folder / "meta.json").exists():
        log.info("loading processed %s from cache %s", name, folder)
        return load_sequences(folder)
    data = build_sequences(read(), preprocess)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    save_sequences(data, tmp)
    if folder.exists():  # another process cached it meanwhile
        shutil.rmtree(tmp)
    else:
        tmp.replace(folder)
    log.info("cached processed %s at %s", name, folder)
    return data
