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
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import faiss
import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

import genrec
from genrec.cli import run_cli
from genrec.export.index import build_index, exact_top_k, recall_at_k
from genrec.export.manifest import FORMAT, FORMAT_VERSION, MANIFEST_FILE, artifact_entry, write_manifest
from genrec.eval.metrics import Evaluator
from genrec.export.tower import QuantizedItemTable, UserTower, export_onnx, export_tower, tower_inputs
from genrec.conf import CONF_MODULE
from genrec.embedding.dynamic import DynamicItemEmbedding
from genrec.embedding.dynamic.export import export_rows
from genrec.data.features import FeatureConfig
from genrec.errors import ConfigError, UserError
from genrec.models.generative import GenerativeRecommender
from genrec.models.semantic_ids import TOKEN_LAYOUT
from genrec.runs import RunFolder, file_digest
from genrec.trust import TRUSTED_TARGETS
from genrec.tokenize.sid_table import PARQUET_FILE, SAFETENSORS_FILE
from genrec.training.builders import load_run, load_sid_table, prior_enabled
from genrec.training.generative import GenerativeTask
from genrec.utils.provenance import git_commit

log = logging.getLogger("genrec.export")


class ParityError(UserError):
    """The exported tower does not reproduce the in-framework query vectors."""


@torch.no_grad()
def tower_parity(run_tower, tower: UserTower, batches, reference, atol: float, rtol: float) -> dict[str, Any]:
    """Run ``run_tower(*inputs) -> (B, D)`` on every test user (inputs from
    :func:`~genrec.export.tower.tower_inputs`: the whole history, ``batch.seen_ids``, not truncated: the tower
    truncates) and compare with the in-framework query vectors ``reference`` (one ``(B, D)`` per batch) by
    ``torch.allclose``. Returns the figures for the manifest."""
    worst, users, ok = 0.0, 0, True
    for batch, expected in zip(batches, reference):
        got = torch.as_tensor(np.asarray(run_tower(*tower_inputs(tower, batch))))
        worst = max(worst, float((got - expected).abs().max()))
        ok &= bool(torch.allclose(got, expected, atol=atol, rtol=rtol))
        users += len(expected)
    return {"users": users, "max_abs_diff": worst, "atol": atol, "rtol": rtol, "passed": ok}


def _onnx_runner(path: Path, names: list[str]):
    """An onnxruntime session as ``f(*inputs) -> (B, D)``, or ``None`` when onnxruntime is missing."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda *inputs: session.run(None, {n: t.numpy() for n, t in zip(names, inputs)})[0]


def _versions() -> dict[str, str]:
    out = {"genrec": genrec.__version__, "commit": git_commit(), "python": platform.python_version(),
           "torch": torch.__version__, "faiss": faiss.__version__, "numpy": np.__version__}
    try:
        import onnx

        out["onnx"] = onnx.__version__
    except ImportError:
        pass
    return out


def _raw_id(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _check(parity: dict[str, Any], path: Path, cfg: DictConfig) -> None:
    if not parity["passed"]:
        raise ParityError(f"{path}: exported tower differs from the in-framework encoder on test users: max |diff| "
                          f"= {parity['max_abs_diff']:.3g} (parity.atol={cfg.parity.atol}, "
                          f"parity.rtol={cfg.parity.rtol})")


def _export_towers(tower: UserTower, num_items: int, out_dir: Path, batches, reference, cfg: DictConfig
                   ) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Write ``user_tower.pt2`` (and ``user_tower.onnx`` when possible), each reloaded from disk and checked
    against ``reference``. Returns (manifest entries, why ONNX was skipped or None)."""
    output = {"name": "query", "shape": ["B", tower.dim], "dtype": "float32",
              "meaning": "user vectors; score = inner product with item_vectors"
                         + (" (both sides L2-normalised)" if tower.cosine else "")}
    fields = {"inputs": tower.inputs, "output": output, "max_len": tower.max_len,
              "truncation": f"keeps each user's most recent {tower.max_len} items, as genrec's evaluation does"}
    path = out_dir / "user_tower.pt2"
    torch.export.save(export_tower(tower, num_items), path)
    parity = tower_parity(torch.export.load(path).module(), tower, batches, reference, cfg.parity.atol,
                          cfg.parity.rtol)
    _check(parity, path, cfg)
    entries = {"user_tower": artifact_entry(out_dir, path.name, "torch_export", parity=parity, **fields)}
    if not cfg.onnx:
        return entries, "onnx=false in the export config"
    path = out_dir / "user_tower.onnx"
    reason = export_onnx(tower, num_items, path)
    if reason:
        return entries, reason
    runner = _onnx_runner(path, tower.input_names)
    if runner is None:
        parity = {"skipped": "onnxruntime is not installed: ONNX parity not checked"}
    else:
        parity = tower_parity(runner, tower, batches, reference, cfg.parity.atol, cfg.parity.rtol)
        _check(parity, path, cfg)
    entries["user_tower_onnx"] = artifact_entry(out_dir, path.name, "onnx", parity=parity, **fields)
    return entries, None


def _export_indexes(vectors: np.ndarray, queries: np.ndarray, out_dir: Path, cfg: DictConfig
                    ) -> dict[str, dict[str, Any]]:
    """Write ``index_<name>.faiss`` for every entry of ``cfg.indexes`` over ``vectors (num_items, D)``; each one's
    recall@10 against exact search is measured on ``queries (num_users, D)``. Returns the manifest entries."""
    ids = np.arange(1, len(vectors) + 1, dtype=np.int64)
    exact = exact_top_k(queries, vectors, ids, 10)  # (num_users, 10) dense IDs
    entries = {}
    for name, index_cfg in cfg.indexes.items():
        index, params = build_index(vectors, ids, OmegaConf.to_container(index_cfg, resolve=True))
        file = f"index_{name}.faiss"
        faiss.write_index(index, str(out_dir / file))
        recall = recall_at_k(index.search(queries, 10)[1], exact)
        kind, metric, built_on = params.pop("type"), params.pop("metric"), params.pop("built_on")
        entries[f"index_{name}"] = artifact_entry(
            out_dir, file, "faiss_index", type=kind, metric=metric, dim=int(index.d), ntotal=int(index.ntotal),
            labels="dense item IDs (1..num_items); map to raw IDs with the id_map", built_on=built_on,
            params=params, recall_at_10_vs_exact=recall)
        log.info("index %s: recall@10 vs exact search on %d test users = %.4f", name, len(queries), recall)
    return entries


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


def _test_metrics(queries: torch.Tensor, vectors: torch.Tensor, batches, exclude_history: bool) -> dict[str, float]:
    """Recall/NDCG/MRR on the test users of ``queries (U, D)`` against ``vectors (num_items, D)`` (genrec's
    evaluator: the same protocol as training's test metrics)."""
    evaluator, start = Evaluator(exclude_history=exclude_history), 0
    for batch in batches:
        scores = queries[start:start + batch.batch_size] @ vectors.T
        start += batch.batch_size
        evaluator.update(torch.cat([torch.full_like(scores[:, :1], float("-inf")), scores], 1), batch)
    return evaluator.compute()


def _top10(queries: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    return (queries @ vectors.T).topk(10, dim=1).indices


@torch.no_grad()
def _export_quantized(model, tower: UserTower, num_items: int, out_dir: Path, batches, reference, vectors: np.ndarray,
                      cfg: DictConfig, exclude_history: bool) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """For every dtype of ``cfg.quantize``: the scoring-side item vectors and the tower's item table in that dtype
    (FBGEMM's kernels), the tower exported, and the figures against float32. Returns (artifacts, the manifest's
    ``quantization`` section)."""
    fp32_vectors, fp32_queries = torch.from_numpy(vectors), torch.cat(reference)
    exact = _top10(fp32_queries, fp32_vectors)
    section = {"fp32": {"table_bytes": int(fp32_vectors.numel() * 4), "bytes_vs_fp32": 1.0,
                        "recall_at_10_vs_fp32": 1.0,
                        "test_metrics": _test_metrics(fp32_queries, fp32_vectors, batches, exclude_history)}}
    artifacts = {}
    for dtype in cfg.quantize:
        table = QuantizedItemTable(fp32_vectors, dtype)
        quantized = table(torch.arange(num_items))  # (num_items, D) through FBGEMM's lookup kernel
        file = f"item_vectors_{dtype}.npy"
        if dtype == "int8":
            layout = "uint8 [num_items, dim + 4]: per row dim codes, then fp16 scale and fp16 bias; value = code * " \
                     "scale + bias (FBGEMM FloatToFusedNBitRowwiseQuantizedSBHalf)"
            np.save(out_dir / file, torch.ops.fbgemm.FloatToFusedNBitRowwiseQuantizedSBHalf(fp32_vectors, 8).numpy())
        else:
            layout = "float16 [num_items, dim]"
            np.save(out_dir / file, fp32_vectors.half().numpy())
        artifacts[f"item_vectors_{dtype}"] = artifact_entry(out_dir, file, "quantized_item_vectors", dtype=dtype,
                                                           shape=list(vectors.shape), layout=layout, first_id=1)
        low = UserTower(model, tower.with_time, table_dtype=dtype)
        path = out_dir / f"user_tower_{dtype}.pt2"
        torch.export.save(export_tower(low, num_items), path)
        loaded = torch.export.load(path).module()
        queries = torch.cat([loaded(*tower_inputs(low, batch)) for batch in batches])
        deviation = {"users": len(queries), "max_abs_diff": float((queries - fp32_queries).abs().max()),
                     "reference": "float32 in-framework query vectors"}
        artifacts[f"user_tower_{dtype}"] = artifact_entry(
            out_dir, path.name, "torch_export", inputs=low.inputs, max_len=low.max_len, table_dtype=dtype,
            output={"name": "query", "shape": ["B", int(vectors.shape[1])], "dtype": "float32"}, parity=deviation)
        overlap = (_top10(queries, quantized)[:, :, None] == exact[:, None, :]).any(2).float().mean()
        section[dtype] = {"table_bytes": table.nbytes, "bytes_vs_fp32": table.nbytes / section["fp32"]["table_bytes"],
                          "recall_at_10_vs_fp32": float(overlap), "tower_max_abs_diff": deviation["max_abs_diff"],
                          "test_metrics": _test_metrics(queries, quantized, batches, exclude_history),
                          "artifacts": [f"item_vectors_{dtype}", f"user_tower_{dtype}"]}
        log.info("%s item table: %d bytes (%.2fx fp32), recall@10 vs fp32 %.4f", dtype, table.nbytes,
                 section[dtype]["bytes_vs_fp32"], float(overlap))
    return artifacts, section


def run(cfg: DictConfig) -> dict[str, Any]:
    """Export the run ``cfg.run_dir`` as configured; returns the manifest."""
    if cfg.default_index not in cfg.indexes:
        raise ConfigError("default_index", f"{cfg.default_index!r} is not among indexes {list(cfg.indexes)}")
    if not set(cfg.quantize) <= {"fp16", "int8"}:
        raise ConfigError("quantize", f"got {list(cfg.quantize)}, expected a list of fp16 and/or int8")
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
    started = time.time()
    artifacts: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}

    (out_dir / "item_ids.json").write_text(json.dumps([None] + [_raw_id(r) for r in data.item_raw_ids[1:]]))
    artifacts["item_ids"] = artifact_entry(out_dir, "item_ids.json", "id_map", entries=data.num_items + 1, pad_id=0)
    source = {"run_dir": str(run_dir.resolve()), "checkpoint": cfg.checkpoint,
              "checkpoint_sha256": file_digest(ckpt), "dataset": data.summary(), "seed": train_cfg.seed}
    if isinstance(task, GenerativeTask):  # no item vectors or tower: the SID table and the decoding settings
        return _export_generative(model, train_cfg, data.item_raw_ids, out_dir, artifacts, source, started)

    with torch.no_grad():
        vectors = model.all_item_vectors()[1:].detach().float().contiguous().numpy()  # (num_items, D)
    np.save(out_dir / "item_vectors.npy", vectors)
    artifacts["item_vectors"] = artifact_entry(out_dir, "item_vectors.npy", "item_vectors",
                                               shape=list(vectors.shape), dtype="float32", first_id=1)

    batches = list(datamodule.test_dataloader())
    with torch.no_grad():
        reference = [model.user_embeddings(batch) for batch in batches]
    tower = UserTower(model, with_time=batches[0].timestamps is not None and getattr(model.encoder, "uses_time", False))
    towers, reason = _export_towers(tower, data.num_items, out_dir, batches, reference, cfg)
    artifacts.update(towers)
    if reason:
        skipped["user_tower_onnx"] = reason
    quantized, quantization = _export_quantized(model, tower, data.num_items, out_dir, batches, reference, vectors,
                                                cfg, bool(train_cfg.eval.exclude_history))
    artifacts.update(quantized)

    indexes = _export_indexes(vectors, torch.cat(reference).numpy(), out_dir, cfg)
    artifacts.update(indexes)
    if isinstance(model.item_embedding, DynamicItemEmbedding):
        artifacts["item_table_rows"] = _export_dynamic_rows(model.item_embedding, out_dir, cfg.dynamic_since)

    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": {"name": train_cfg.model.name, "kind": "retrieval", "similarity": model.similarity,
                  "normalised": model.similarity == "cosine", "dim": int(vectors.shape[1]),
                  "num_items": data.num_items, "max_len": towers["user_tower"]["max_len"]},
        "source": source,
        "artifacts": artifacts,
        "retrieval": {"query_encoder": "user_tower", "indexes": list(indexes),
                      "default_index": f"index_{cfg.default_index}", "id_map": "item_ids",
                      "exclude_history": bool(train_cfg.eval.exclude_history)},
        "quantization": quantization,
        "skipped": skipped,
        "versions": _versions(),
        "export_seconds": round(time.time() - started, 1),
    }
    write_manifest(out_dir, manifest)
    lines = [f"  {name:<18} {a['file']:<20} " + _detail(a) for name, a in artifacts.items()]
    lines += [f"  {dtype:<18} item table {q['table_bytes']} bytes ({q['bytes_vs_fp32']:.2f}x), recall@10 vs fp32 "
              f"{q['recall_at_10_vs_fp32']:.4f}, test recall@10 {q['test_metrics']['recall@10']:.4f}"
              for dtype, q in quantization.items()]
    print(f"Exported {run_dir} ({data.num_items} items, dim {vectors.shape[1]}, {model.similarity}) to "
          f"{out_dir}:\n" + "\n".join(lines) + "".join(f"\n  skipped {k}: {v}" for k, v in skipped.items()))
    return manifest


def _export_generative(model: GenerativeRecommender, train_cfg: DictConfig, item_raw_ids: np.ndarray, out_dir: Path,
                       artifacts: dict[str, dict[str, Any]], source: dict[str, Any], started: float) -> dict[str, Any]:
    """The SID table the model was trained with (loading the checkpoint checked its content hash) and the decoding
    settings, beside the ID map already in ``artifacts``. Returns the manifest."""
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
                     "token_layout": TOKEN_LAYOUT, "rank": getattr(model, "rank", "codes"),
                     "code_weight": getattr(model, "code_weight", 1.0)},
        "skipped": {"decoder_graph": "generative models are served from source.checkpoint with genrec "
                                     "(GenerativeRecommender.ranked: KV-cached beam search over the SID trie, "
                                     "re-ranked or steered by the item head with rank=hybrid or guided)"},
        "versions": _versions(),
        "export_seconds": round(time.time() - started, 1),
    }
    write_manifest(out_dir, manifest)
    print(f"Exported {source['run_dir']} ({model.num_items} items, semantic IDs {table.codebook_sizes}, beam "
          f"{model.beam}, top-{model.top_k}, constrained {model.constrained}) to {out_dir}: "
          + ", ".join(a["file"] for a in artifacts.values()))
    return manifest


@hydra.main(version_base="1.3", config_path=f"pkg://{CONF_MODULE}", config_name="export")
def main(cfg: DictConfig) -> None:
    run_cli("genrec-export", run, cfg)


if __name__ == "__main__":
    main()
