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
* ``manifest.json`` — genrec-export's manifest (validated by :func:`genrec.export.manifest.validate_manifest`) with
  a ``stream`` section: ``version``, ``offset`` (the source offset of the checkpoint), ``events``, ``event_time``,
  ``table_version``, ``delta_since`` (the previous version's table version), ``previous`` (its version).

A version is written under ``.v000007.tmp`` and renamed into place, so a folder ``v*`` is always complete; the
oldest versions beyond ``keep`` are deleted after a new one is in place.
"""
from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

import genrec
from genrec.data.batch import JaggedBatch
from genrec.embedding.dynamic.checkpoint import fsync_dir, fsync_tree
from genrec.embedding.dynamic.export import export_rows, read_export
from genrec.errors import ConfigError
from genrec.export.index import build_index, exact_top_k, recall_at_k
from genrec.export.manifest import FORMAT, FORMAT_VERSION, MANIFEST_FILE, artifact_entry, write_manifest
from genrec.export.tower import TOWER_INPUTS, UserTower, export_tower
from genrec.models.recommender import SequentialRecommender
from genrec.runs import file_digest
from genrec.stream.hooks import pause_point
from genrec.stream.learner import Learner
from genrec.utils.provenance import git_commit

log = logging.getLogger("genrec.stream")


class ExportedItems(nn.Module):
    """A frozen dense item table ``(M + 1, D)`` (row 0: the default row) with the one method UserTower reads."""

    def __init__(self, rows: torch.Tensor):
        super().__init__()
        self.num_embeddings, self.dim = rows.shape
        self.register_buffer("rows", rows)

    def table(self) -> torch.Tensor:
        return self.rows


def check_exportable(learner: Learner, every_events: int, every_seconds: int) -> None:
    """Hot exports need a tower genrec can export without time inputs and one default row: raise ConfigError
    otherwise."""
    if not (every_events or every_seconds):
        return
    if not hasattr(learner.model.encoder, "forward_padded"):
        raise ConfigError("export.every_events", f"hot exports write a user tower, which genrec exports for encoders "
                                                 f"with forward_padded (SASRec); {type(learner.model.encoder).__name__}"
                                                 " has none: set export.every_events=0 export.every_seconds=0")
    if getattr(learner.model.encoder, "uses_time", False):
        raise ConfigError("export.every_events", "hot exports write a user tower over item IDs alone, and this "
                                                 f"{type(learner.model.encoder).__name__} uses the time bias: set "
                                                 "model.encoder.time_bias=false, or export.every_events=0 "
                                                 "export.every_seconds=0")
    if learner.table.config.default.kind == "hashed":
        raise ConfigError("model.embedding.default.kind", "hot exports give items without a row one default row; "
                                                          "use zeros or unknown, not hashed")


class HotExporter:
    """Writes export versions into ``folder`` (see the module doc).

    Args:
        folder: ``<run>/exports``.
        indexes: faiss index configs by name (the ``index`` group's values); ``default_index`` one of them.
        keep: versions kept.
        parity: ``atol`` / ``rtol`` of the tower check.
    """

    def __init__(self, folder: Path, indexes: DictConfig | dict, default_index: str, keep: int, parity: dict):
        if default_index not in indexes:
            raise ConfigError("export.default_index", f"{default_index!r} is not among export.indexes {list(indexes)}")
        if keep < 1:
            raise ConfigError("export.keep", f"must keep at least one version, got {keep}")
        self.folder, self.default_index, self.keep = Path(folder), default_index, keep
        self.indexes = OmegaConf.to_container(indexes, resolve=True) if isinstance(indexes, DictConfig) else indexes
        self.parity = dict(parity)

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
        started = time.time()
        tmp = self.folder / f".v{version:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        table, model = learner.table, learner.model
        artifacts: dict[str, dict[str, Any]] = {}
        full = export_rows(table, tmp / "item_table_rows")
        artifacts["item_table_rows"] = _rows_entry(tmp, "item_table_rows", full)
        if since is not None:
            delta = export_rows(table, tmp / "item_table_delta", since=since)
            artifacts["item_table_delta"] = _rows_entry(tmp, "item_table_delta", delta)
        ids, rows, _, _ = read_export(tmp / "item_table_rows")
        default = table.weight[table.config.capacity].detach().cpu()
        dense = torch.cat([default[None, :], torch.from_numpy(rows)])  # (M + 1, D)
        cosine = model.similarity == "cosine"
        vectors = (torch.nn.functional.normalize(dense[1:], dim=-1) if cosine else dense[1:]).numpy()
        (tmp / "item_ids.json").write_text(json.dumps([None] + ids.tolist()))
        artifacts["item_ids"] = artifact_entry(tmp, "item_ids.json", "id_map", entries=len(ids) + 1, pad_id=0)
        np.save(tmp / "item_vectors.npy", vectors)
        artifacts["item_vectors"] = artifact_entry(tmp, "item_vectors.npy", "item_vectors",
                                                   shape=list(vectors.shape), dtype="float32", first_id=1)

        frozen = SequentialRecommender(ExportedItems(dense), model.encoder, model.similarity).eval()
        tower = UserTower(frozen)
        program = export_tower(tower, max(len(ids), 1))
        torch.export.save(program, tmp / "user_tower.pt2")
        with torch.no_grad():
            model.eval()
            reference = model.user_embeddings(histories)  # (B, D), the live model on raw IDs
            lookup = np.searchsorted(ids, histories.item_ids.numpy()) if len(ids) else None
            dense_ids = np.zeros(len(histories.item_ids), dtype=np.int64)
            if lookup is not None:
                lookup = np.minimum(lookup, len(ids) - 1)
                dense_ids = np.where(ids[lookup] == histories.item_ids.numpy(), lookup + 1, 0)
            got = torch.export.load(tmp / "user_tower.pt2").module()(torch.from_numpy(dense_ids), histories.offsets)
        parity = {"users": len(reference), "max_abs_diff": float((got - reference).abs().max()) if len(reference)
                  else 0.0, "atol": self.parity["atol"], "rtol": self.parity["rtol"],
                  "passed": bool(torch.allclose(got, reference, atol=self.parity["atol"], rtol=self.parity["rtol"]))}
        if not parity["passed"]:
            raise RuntimeError(f"export v{version}: the exported tower differs from the live model on "
                               f"{parity['users']} users (max |diff| {parity['max_abs_diff']:.3g})")
        output = {"name": "query", "shape": ["B", int(dense.shape[1])], "dtype": "float32",
                  "meaning": "user vectors; score = inner product with item_vectors"
                             + (" (both sides L2-normalised)" if cosine else "")}
        artifacts["user_tower"] = artifact_entry(
            tmp, "user_tower.pt2", "torch_export", parity=parity, inputs=TOWER_INPUTS, output=output,
            max_len=tower.max_len, truncation=f"keeps each user's most recent {tower.max_len} items",
            unknown_items="dense ID 0: an item without a row reads the table's default row")

        queries = reference.numpy().astype(np.float32)
        index_names = []
        labels = np.arange(1, len(ids) + 1, dtype=np.int64)
        for name, index_cfg in self.indexes.items():
            index, params = build_index(vectors, labels, index_cfg)
            file = f"index_{name}.faiss"
            faiss.write_index(index, str(tmp / file))
            k = min(10, len(ids))
            recall = recall_at_k(index.search(queries, k)[1], exact_top_k(queries, vectors, labels, k)) \
                if len(queries) and k else float("nan")
            kind, metric, built_on = params.pop("type"), params.pop("metric"), params.pop("built_on")
            artifacts[f"index_{name}"] = artifact_entry(
                tmp, file, "faiss_index", type=kind, metric=metric, dim=int(index.d), ntotal=int(index.ntotal),
                labels="this version's dense item IDs (1..M); map to raw IDs with item_ids.json", built_on=built_on,
                params=params, recall_at_10_vs_exact=float(recall))
            index_names.append(f"index_{name}")

        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "model": {"name": type(model.encoder).__name__.lower(), "kind": "retrieval",
                      "similarity": model.similarity, "normalised": cosine, "dim": int(dense.shape[1]),
                      "num_items": len(ids), "max_len": tower.max_len},
            "source": source,
            "artifacts": artifacts,
            "retrieval": {"query_encoder": "user_tower", "indexes": index_names,
                          "default_index": f"index_{self.default_index}", "id_map": "item_ids",
                          "exclude_history": True},
            "stream": stream,
            "skipped": {},
            "versions": {"genrec": genrec.__version__, "commit": git_commit(), "python": platform.python_version(),
                         "torch": torch.__version__, "faiss": faiss.__version__, "numpy": np.__version__},
            "export_seconds": round(time.time() - started, 1),
        }
        write_manifest(tmp, manifest)
        fsync_tree(tmp)
        pause_point("export_written")
        os.rename(tmp, final)
        fsync_dir(self.folder)
        self.prune()
        log.info("export v%d: %d items, offset %s, tower parity %.2g, in %.1f s", version, len(ids),
                 stream.get("offset"), parity["max_abs_diff"], manifest["export_seconds"])
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
