"""Export a trained run for serving: ``genrec-export run_dir=runs/<...>`` or ``python -m genrec.export``.

Writes ``<run_dir>/export/`` (or ``out_dir``):

* ``item_ids.json`` — dense item ID -> raw item ID (entry 0 is the padding slot, ``null``).
* ``item_vectors.npy`` — ``(num_items, D)`` float32 scoring-side item vectors (row ``r`` = dense ID ``r + 1``).
* ``index_<name>.faiss`` — one faiss index per entry of ``indexes`` (genrec/conf/index/), labels = dense item IDs.
* ``user_tower.pt2`` — the query encoder through ``torch.export`` (and ``user_tower.onnx`` when onnx and
  onnxscript are installed), checked against the in-framework encoder on every test user. SASRec and HSTU (with
  the items' times and the request's time as extra inputs when HSTU was trained with its time bias).
* ``item_vectors_<fp16|int8>.npy`` and ``user_tower_<fp16|int8>.pt2`` for every entry of ``quantize``: the item
  table in FP16 or row-wise INT8 (FBGEMM's quantised table-batched-embedding kernels read it, in the tower too);
  the manifest's ``quantization`` section gives each one's bytes, its top-10 overlap with float32 retrieval and
  the test metrics with it, beside float32's.
* ``manifest.json`` — every artifact with checksum, dimensions, normalisation, ID map and versions
  (genrec/export/manifest.py); written last, so a folder without it is an unfinished export.

A generative run (model=tiger, model=sid_gpt) has no item vectors, tower or index: its export is ``item_ids.json``,
the SID table it was trained with (``sid_table.parquet`` + ``sid_table.safetensors``) and a manifest whose
``decoding`` section holds the beam settings; the model itself is served from the run's checkpoint with genrec
(``GenerativeRecommender.generate``), not exported as a graph.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from genrec.cli import check_command_line, run_cli
from genrec.conf import CONF_MODULE
from genrec.data.features import FeatureConfig
from genrec.embedding.dynamic import DynamicItemEmbedding
from genrec.embedding.dynamic.export import export_rows
from genrec.errors import ConfigError
from genrec.export.manifest import FORMAT, FORMAT_VERSION, MANIFEST_FILE, artifact_entry, write_manifest
from genrec.export.retrieval import ExportSettings, raw_id, versions, write_retrieval_export
from genrec.models.generative import GenerativeRecommender
from genrec.models.semantic_ids import TOKEN_LAYOUT
from genrec.runs import RunFolder, file_digest
from genrec.tokenize.sid_table import PARQUET_FILE, SAFETENSORS_FILE
from genrec.training.builders import load_run, load_sid_table, prior_enabled
from genrec.training.generative import GenerativeTask
from genrec.trust import TRUSTED_TARGETS

log = logging.getLogger("genrec.export")


def _detail(artifact: dict[str, Any]) -> str:
    """The figure printed beside an exported artifact."""
    if artifact["kind"] == "faiss_index":
        return f"recall@10 vs exact {artifact['recall_at_10_vs_exact']:.4f}"
    if "max_abs_diff" in artifact.get("parity", {}):
        return f"parity max |diff| {artifact['parity']['max_abs_diff']:.2g}"
    if artifact["kind"] == "dynamic_rows":
        delta = f", changed since version {artifact['since']}" if artifact["since"] is not None else ""
        return f"{artifact['rows']} rows at table version {artifact['version']}{delta}"
    return ""


def _export_dynamic_rows(embedding: DynamicItemEmbedding, out_dir: Path, since: int | None) -> dict[str, Any]:
    """``item_table_rows/``: a dynamic item table's admitted rows keyed by raw ID (``since``: only the rows changed
    after that table version, and the IDs deleted since, for a hot update of a serving table at that version)."""
    folder = out_dir / "item_table_rows"
    shutil.rmtree(folder, ignore_errors=True)
    part = export_rows(embedding.local_table, folder, since)
    return artifact_entry(out_dir, folder.name, "dynamic_rows", version=part["version"], since=part["since"],
                          rows=part["rows"], deleted=part["deleted"], dim=part["dim"], default=part["default"])


def run(cfg: DictConfig) -> dict[str, Any]:
    """Export the run ``cfg.run_dir`` as configured; returns the manifest."""
    settings = ExportSettings(OmegaConf.to_container(cfg.indexes, resolve=True), cfg.default_index, cfg.parity.atol,
                              cfg.parity.rtol, bool(cfg.onnx), tuple(cfg.quantize))
    run_dir = Path(cfg.run_dir)
    allowed = TRUSTED_TARGETS + tuple(cfg.trusted_targets)
    ckpt = RunFolder.existing(run_dir).checkpoint(cfg.checkpoint)  # checked before the data loads
    saved = RunFolder(run_dir).config(allowed)
    if FeatureConfig.from_config(saved.model.get("features")).enabled:
        raise ConfigError("run_dir", f"{run_dir} was trained with side features (model.features): the export of "
                                     "feature models is not supported yet")
    if prior_enabled(saved):
        raise ConfigError("run_dir", f"{run_dir} adds the transition prior to its scores (model.prior): a user "
                                     "vector and item vectors do not hold it, so it cannot be exported as a tower")
    train_cfg, datamodule, task = load_run(run_dir, ckpt, allowed)
    model, data = task.model, datamodule.data
    out_dir = Path(cfg.out_dir) if cfg.out_dir else run_dir / "export"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_FILE).unlink(missing_ok=True)  # a folder without a manifest is an unfinished export
    source = {"run_dir": str(run_dir.resolve()), "checkpoint": cfg.checkpoint,
              "checkpoint_sha256": file_digest(ckpt), "dataset": data.summary(), "seed": train_cfg.seed}
    if isinstance(task, GenerativeTask):  # no item vectors or tower: the SID table and the decoding settings
        return _export_generative(model, train_cfg, data.item_raw_ids, out_dir, source)

    artifacts = {}
    if isinstance(model.item_embedding, DynamicItemEmbedding):
        artifacts["item_table_rows"] = _export_dynamic_rows(model.item_embedding, out_dir, cfg.dynamic_since)
    batches = list(datamodule.test_dataloader())
    with torch.no_grad():
        reference = [model.user_embeddings(batch) for batch in batches]
        table = model.item_embedding.table().detach()
    manifest = write_retrieval_export(
        out_dir, train_cfg.model.name, model.encoder, model.similarity, table, list(data.item_raw_ids[1:]), batches,
        reference, settings, source, exclude_history=bool(train_cfg.eval.exclude_history),
        with_time=batches[0].timestamps is not None and model.encoder.uses_time, artifacts=artifacts)
    artifacts = manifest["artifacts"]
    lines = [f"  {name:<18} {a['file']:<20} " + _detail(a) for name, a in artifacts.items()]
    lines += [f"  {dtype:<18} item table {q['table_bytes']} bytes ({q['bytes_vs_fp32']:.2f}x), recall@10 vs fp32 "
              f"{q['recall_at_10_vs_fp32']:.4f}, test recall@10 {q['test_metrics']['recall@10']:.4f}"
              for dtype, q in manifest.get("quantization", {}).items()]
    print(f"Exported {run_dir} ({data.num_items} items, dim {manifest['model']['dim']}, {model.similarity.name}) "
          f"to {out_dir}:\n" + "\n".join(lines)
          + "".join(f"\n  skipped {k}: {v}" for k, v in manifest["skipped"].items()))
    return manifest


def _export_generative(model: GenerativeRecommender, train_cfg: DictConfig, item_raw_ids: np.ndarray, out_dir: Path,
                       source: dict[str, Any]) -> dict[str, Any]:
    """The ID map, the SID table the model was trained with (loading the checkpoint checked its content hash) and
    the decoding settings. Returns the manifest."""
    started = time.time()
    (out_dir / "item_ids.json").write_text(json.dumps([None] + [raw_id(r) for r in item_raw_ids[1:]]))
    artifacts = {"item_ids": artifact_entry(out_dir, "item_ids.json", "id_map", entries=len(item_raw_ids), pad_id=0)}
    table = load_sid_table(train_cfg, item_raw_ids)
    table.save(out_dir)
    fields = {"codebook_sizes": list(table.codebook_sizes), "content_hash": table.content_hash,
              "entries": table.num_items + 1}
    artifacts["sid_table"] = artifact_entry(out_dir, PARQUET_FILE, "sid_table", **fields)
    artifacts["sid_table_tensors"] = artifact_entry(out_dir, SAFETENSORS_FILE, "sid_table", **fields)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": {"name": train_cfg.model.name, "kind": "generative", "num_items": model.num_items,
                  "max_len": int(train_cfg.data.max_len)},
        "source": source,
        "artifacts": artifacts,
        "decoding": {"sid_table": "sid_table", "id_map": "item_ids", "beam": model.beam, "top_k": model.top_k,
                     "constrained": model.constrained, "exclude_history": bool(train_cfg.eval.exclude_history),
                     "token_layout": TOKEN_LAYOUT, "rank": model.ranking.name,
                     "code_weight": model.ranking.code_weight},
        "skipped": {"decoder_graph": "generative models are served from source.checkpoint with genrec "
                                     "(GenerativeRecommender.ranked: KV-cached beam search over the SID trie, "
                                     "re-ranked or steered by the item head with rank=hybrid or guided)"},
        "versions": versions(),
        "export_seconds": round(time.time() - started, 1),
    }
    write_manifest(out_dir, manifest)
    print(f"Exported {source['run_dir']} ({model.num_items} items, semantic IDs {table.codebook_sizes}, beam "
          f"{model.beam}, top-{model.top_k}, constrained {model.constrained}) to {out_dir}: "
          + ", ".join(a["file"] for a in artifacts.values()))
    return manifest


@hydra.main(version_base="1.3", config_path=f"pkg://{CONF_MODULE}", config_name="export")
def _hydra_main(cfg: DictConfig) -> None:
    run_cli("genrec-export", run, cfg)


def main() -> None:
    check_command_line("genrec-export", "export")
    _hydra_main()


if __name__ == "__main__":
    main()
