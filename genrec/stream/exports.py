"""Versioned hot exports of a stream run: what genrec-export writes for a trained run, from the live model, every
``every_events`` events or ``every_seconds`` of event time, tagged with the source offset of the checkpoint taken
right before it, plus the rows changed since the previous version.

``<run>/exports/v000007/`` holds:

* ``item_ids.json`` — dense ID (this version's) -> raw item ID (entry 0: ``null``): every row the table holds
  (tier 0 and tier 2), in raw-ID order;
* ``item_vectors.npy`` ``(M, D)`` scoring-side vectors (normalised for cosine) and ``index_<name>.faiss`` (labels:
  this version's dense IDs), with recall@10 against exact search measured on the query vectors of recent users;
* ``user_tower.pt2`` — the query encoder (``torch.export``) over this version's dense IDs (dense ID 0 is any item
  without a row: it reads the table's default row, as the live model does), checked with ``allclose`` against the
  live model on recent users' histories;
* ``item_table_rows/`` (every row, keyed by raw ID) and ``item_table_delta/`` (the rows changed and the IDs deleted
  since the previous version's table version; absent in the first version): a serving table keyed by raw ID at
  version ``v - 1`` reaches version ``v`` with :func:`genrec.embedding.dynamic.export.apply_export`;
* ``manifest.json`` — genrec-export's manifest, written by the same function
  (:func:`genrec.export.retrieval.write_retrieval_export`), with a ``stream`` section: ``version``, ``offset`` (the
  source offset of the checkpoint), ``events``, ``event_time``, ``table_version``, ``delta_since`` (the previous
  version's table version), ``previous`` (its version).

A version is written under ``.v000007.tmp`` and renamed into place, so a folder ``v*`` is always complete; the
oldest versions beyond ``keep`` are deleted after a new one is in place.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from genrec.data.batch import JaggedBatch
from genrec.storage.durable import fsync_dir, fsync_tree
from genrec.embedding.dynamic.export import export_rows, read_export
from genrec.errors import ConfigError
from genrec.export.manifest import MANIFEST_FILE, artifact_entry
from genrec.export.retrieval import ExportSettings, write_retrieval_export
from genrec.runs import file_digest
from genrec.stream.hooks import pause_point
from genrec.stream.learner import Learner

log = logging.getLogger("genrec.stream")


def check_exportable(learner: Learner, every_events: int, every_seconds: int) -> None:
    """Hot exports need a tower genrec can export without time inputs and one default row: raise ConfigError
    otherwise."""
    if not (every_events or every_seconds):
        return
    encoder = learner.model.encoder
    if not encoder.exportable:
        raise ConfigError("export.every_events", f"hot exports write a user tower, which genrec exports for encoders "
                                                 f"with forward_padded (SASRec); {type(encoder).__name__} has none: "
                                                 "set export.every_events=0 export.every_seconds=0")
    if encoder.uses_time:
        raise ConfigError("export.every_events", "hot exports write a user tower over item IDs alone, and this "
                                                 f"{type(encoder).__name__} uses the time bias: set "
                                                 "model.encoder.time_bias=false, or export.every_events=0 "
                                                 "export.every_seconds=0")
    if learner.table.config.default.kind == "hashed":
        raise ConfigError("model.embedding.default.kind", "hot exports give items without a row one default row; "
                                                          "use zeros or unknown, not hashed")


def dense_histories(histories: JaggedBatch, ids: np.ndarray) -> JaggedBatch:
    """``histories`` (raw item IDs) in an export's dense IDs (``ids (M,)``: the sorted raw ID of dense IDs
    ``1..M``; an item without a row is dense ID 0, the default row), as the tower reads them (``seen_ids``)."""
    raw = histories.item_ids.numpy()
    dense = np.zeros(len(raw), dtype=np.int64)
    if len(ids):
        at = np.minimum(np.searchsorted(ids, raw), len(ids) - 1)
        dense = np.where(ids[at] == raw, at + 1, 0)
    dense = torch.from_numpy(dense)
    return JaggedBatch(dense, histories.offsets, histories.target_ids, histories.user_ids, seen_ids=dense,
                       seen_offsets=histories.offsets)


class HotExporter:
    """Writes export versions into ``folder`` (see the module doc).

    Args:
        folder: ``<run>/exports``.
        name: the model's name (``model.name``), as genrec-export records it.
        indexes: faiss index configs by name (the ``index`` group's values); ``default_index`` one of them.
        keep: versions kept.
        parity: ``atol`` / ``rtol`` of the tower check.
    """

    def __init__(self, folder: Path, name: str, indexes: DictConfig | dict, default_index: str, keep: int,
                 parity: dict):
        if keep < 1:
            raise ConfigError("export.keep", f"must keep at least one version, got {keep}")
        indexes = OmegaConf.to_container(indexes, resolve=True) if isinstance(indexes, DictConfig) else indexes
        try:
            self.settings = ExportSettings(indexes, default_index, parity["atol"], parity["rtol"])
        except ConfigError as err:
            raise ConfigError(f"export.{err.key}", str(err).split(": ", 1)[1]) from None
        self.folder, self.name, self.keep = Path(folder), name, keep

    def path(self, version: int) -> Path:
        return self.folder / f"v{version:06d}"

    def write(self, version: int, learner: Learner, histories: JaggedBatch, stream: dict[str, Any],
              since: int | None, source: dict[str, Any]) -> dict[str, Any]:
        """Write version ``version`` (nothing if it is already in place). ``histories``: recent users' histories
        (raw item IDs, ``target_ids`` unused) for the tower check and the index recall; ``since``: the previous
        version's table version (``None``: no delta); ``stream``: the manifest's stream section; ``source``: its
        source section. Returns the manifest."""
        final = self.path(version)
        if (final / MANIFEST_FILE).exists():
            return json.loads((final / MANIFEST_FILE).read_text())
        tmp = self.folder / f".v{version:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        table, model = learner.table, learner.model
        full = export_rows(table, tmp / "item_table_rows")
        artifacts = {"item_table_rows": _rows_entry(tmp, "item_table_rows", full)}
        if since is not None:
            delta = export_rows(table, tmp / "item_table_delta", since=since)
            artifacts["item_table_delta"] = _rows_entry(tmp, "item_table_delta", delta)
        ids, rows, _, _ = read_export(tmp / "item_table_rows")
        default = table.weight[table.config.capacity].detach().cpu()
        dense = torch.cat([default[None, :], torch.from_numpy(rows)])  # (M + 1, D): row 0 the default row
        with torch.no_grad():
            model.eval()
            reference = model.user_embeddings(histories)  # (B, D), the live model on raw IDs
        manifest = write_retrieval_export(
            tmp, self.name, model.encoder, model.similarity, dense, ids.tolist(), [dense_histories(histories, ids)],
            [reference], self.settings, source, row_zero="the table's default row: an item without a row",
            artifacts=artifacts, sections={"stream": stream})
        fsync_tree(tmp)
        pause_point("export_written")
        os.rename(tmp, final)
        fsync_dir(self.folder)
        self.prune()
        log.info("export v%d: %d items, offset %s, tower parity %.2g, in %.1f s", version, len(ids),
                 stream.get("offset"), manifest["artifacts"]["user_tower"]["parity"]["max_abs_diff"],
                 manifest["export_seconds"])
        return manifest

    def versions(self) -> list[int]:
        """The complete versions in the folder, oldest first."""
        if not self.folder.exists():
            return []
        return sorted(int(p.name[1:]) for p in self.folder.glob("v*") if p.is_dir() and p.name[1:].isdigit())

    def prune(self) -> None:
        """Delete the oldest versions beyond ``keep``, and unfinished ones."""
        for version in self.versions()[:-self.keep]:
            shutil.rmtree(self.path(version))
        for tmp in self.folder.glob(".v*.tmp"):
            shutil.rmtree(tmp)


def _rows_entry(folder: Path, name: str, part: dict[str, Any]) -> dict[str, Any]:
    return artifact_entry(folder, name, "dynamic_rows", version=part["version"], since=part["since"],
                          rows=part["rows"], deleted=part["deleted"], dim=part["dim"], default=part["default"])


def checkpoint_source(run_dir: Path, checkpoint: Path, description: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``source`` section for a version taken right after ``checkpoint``."""
    state = checkpoint / "trainer.pt"
    return {"run_dir": str(run_dir.resolve()), "checkpoint": str(state.relative_to(run_dir)),
            "checkpoint_sha256": file_digest(state), "dataset": {"stream": description}}
