"""One retrieval export, written the same way by ``genrec-export`` (a trained run) and the stream's hot exports (a live
model): :func:`write_retrieval_export` writes the ID map, the scoring-side item vectors, the user tower (checked
against the in-framework query vectors), its quantised variants, the faiss indexes and the manifest.

What a caller provides is the table in the export's dense-ID order (row 0: padding, or the stream table's default
row for items without one), the raw ID of every other row, the encoder and similarity, and the users the tower is
checked on (batches in the export's dense IDs with their in-framework query vectors).
"""
from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import faiss
import numpy as np
import torch
from torchrec import KeyedJaggedTensor

import genrec
from genrec.data.batch import ITEM_FEATURE, JaggedBatch
from genrec.embedding import ItemEmbeddingInterface
from genrec.errors import ConfigError, UserError
from genrec.eval.metrics import Evaluator
from genrec.export.index import build_index, exact_top_k, recall_at_k
from genrec.export.manifest import FORMAT, FORMAT_VERSION, artifact_entry, write_manifest
from genrec.export.tower import QuantizedItemTable, UserTower, export_onnx, export_tower, tower_inputs
from genrec.models.encoder import SequenceEncoder
from genrec.models.recommender import SequentialRecommender
from genrec.models.similarity import Similarity
from genrec.utils.provenance import git_commit

log = logging.getLogger("genrec.export")

QUANTIZED_DTYPES = ("fp16", "int8")


class ParityError(UserError):
    """The exported tower does not reproduce the in-framework query vectors."""


@dataclass(frozen=True)
class ExportSettings:
    """What a retrieval export writes besides the fixed parts (the ``export`` config, or the stream's ``export``).

    Attributes:
        indexes: faiss index configs by name (the ``index`` group's values); ``default_index`` one of them.
        atol / rtol: the tower's parity tolerance against the in-framework query vectors.
        onnx: also export the tower as ONNX (when onnx and onnxscript are installed).
        quantize: item-table dtypes to export beside float32 (``fp16``, ``int8``).
    """

    indexes: dict[str, dict[str, Any]]
    default_index: str
    atol: float = 1e-4
    rtol: float = 1e-4
    onnx: bool = False
    quantize: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.default_index not in self.indexes:
            raise ConfigError("default_index", f"{self.default_index!r} is not among indexes {list(self.indexes)}")
        if not set(self.quantize) <= set(QUANTIZED_DTYPES):
            raise ConfigError("quantize", f"got {list(self.quantize)}, expected a list of fp16 and/or int8")


class ExportedItems(ItemEmbeddingInterface):
    """A frozen item table ``(M + 1, D)`` in the export's dense-ID order."""

    def __init__(self, rows: torch.Tensor, feature: str = ITEM_FEATURE):
        super().__init__()
        (self.num_embeddings, self.dim), self.feature = rows.shape, feature
        self.register_buffer("rows", rows)

    def forward_with_items(self, features: KeyedJaggedTensor, item_ids: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rows[features[self.feature].values()], self.rows[item_ids]

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        return self.rows[ids]

    def table(self) -> torch.Tensor:
        return self.rows


def raw_id(value: Any) -> Any:
    """A raw item ID as JSON takes it (numpy scalars as Python values)."""
    return value.item() if isinstance(value, np.generic) else value


def versions() -> dict[str, str]:
    """The versions an export records."""
    out = {"genrec": genrec.__version__, "commit": git_commit(), "python": platform.python_version(),
           "torch": torch.__version__, "faiss": faiss.__version__, "numpy": np.__version__}
    try:
        import onnx

        out["onnx"] = onnx.__version__
    except ImportError:
        pass
    return out


@torch.no_grad()
def tower_parity(run_tower, tower: UserTower, batches: Sequence[JaggedBatch], reference: Sequence[torch.Tensor],
                 settings: ExportSettings) -> dict[str, Any]:
    """Run ``run_tower(*inputs) -> (B, D)`` on every checked user (:func:`~genrec.export.tower.tower_inputs`) and
    compare with the in-framework query vectors ``reference`` (one ``(B, D)`` per batch) by ``torch.allclose``."""
    worst, users, ok = 0.0, 0, True
    for batch, expected in zip(batches, reference):
        got = torch.as_tensor(np.asarray(run_tower(*tower_inputs(tower, batch))))
        worst = max(worst, float((got - expected).abs().max())) if len(expected) else worst
        ok &= bool(torch.allclose(got, expected, atol=settings.atol, rtol=settings.rtol))
        users += len(expected)
    return {"users": users, "max_abs_diff": worst, "atol": settings.atol, "rtol": settings.rtol, "passed": ok}


def _check(parity: dict[str, Any], path: Path) -> None:
    if not parity["passed"]:
        raise ParityError(f"{path}: exported tower differs from the in-framework encoder on {parity['users']} users: "
                          f"max |diff| = {parity['max_abs_diff']:.3g} (atol={parity['atol']}, rtol={parity['rtol']})")


def _onnx_runner(path: Path, names: list[str]):
    """An onnxruntime session as ``f(*inputs) -> (B, D)``, or ``None`` when onnxruntime is missing."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda *inputs: session.run(None, {n: t.numpy() for n, t in zip(names, inputs)})[0]


def _export_towers(tower: UserTower, num_items: int, out_dir: Path, batches, reference, settings: ExportSettings,
                   row_zero: str) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Write ``user_tower.pt2`` (and ``user_tower.onnx`` when asked and possible), each reloaded from disk and
    checked against ``reference``. Returns (manifest entries, why ONNX was skipped or None)."""
    output = {"name": "query", "shape": ["B", tower.dim], "dtype": "float32",
              "meaning": "user vectors; score = inner product with item_vectors"
                         + (" (both sides L2-normalised)" if tower.similarity.normalised else "")}
    fields = {"inputs": tower.inputs, "output": output, "max_len": tower.max_len,
              "truncation": f"keeps each user's most recent {tower.max_len} items, as genrec's evaluation does",
              "row_zero": row_zero}
    path = out_dir / "user_tower.pt2"
    torch.export.save(export_tower(tower, num_items), path)
    parity = tower_parity(torch.export.load(path).module(), tower, batches, reference, settings)
    _check(parity, path)
    entries = {"user_tower": artifact_entry(out_dir, path.name, "torch_export", parity=parity, **fields)}
    if not settings.onnx:
        return entries, "onnx=false in the export config"
    path = out_dir / "user_tower.onnx"
    reason = export_onnx(tower, num_items, path)
    if reason:
        return entries, reason
    runner = _onnx_runner(path, tower.input_names)
    if runner is None:
        parity = {"skipped": "onnxruntime is not installed: ONNX parity not checked"}
    else:
        parity = tower_parity(runner, tower, batches, reference, settings)
        _check(parity, path)
    entries["user_tower_onnx"] = artifact_entry(out_dir, path.name, "onnx", parity=parity, **fields)
    return entries, None


def _export_indexes(vectors: np.ndarray, queries: np.ndarray, out_dir: Path, settings: ExportSettings
                    ) -> dict[str, dict[str, Any]]:
    """Write ``index_<name>.faiss`` for every index of ``settings`` over ``vectors (M, D)`` (labels: dense IDs
    ``1..M``); each one's recall@10 against exact search is measured on ``queries (U, D)``."""
    ids = np.arange(1, len(vectors) + 1, dtype=np.int64)
    k = min(10, len(vectors))
    exact = exact_top_k(queries, vectors, ids, k) if len(queries) and k else None
    entries = {}
    for name, index_cfg in settings.indexes.items():
        index, params = build_index(vectors, ids, dict(index_cfg))
        file = f"index_{name}.faiss"
        faiss.write_index(index, str(out_dir / file))
        recall = recall_at_k(index.search(queries, k)[1], exact) if exact is not None else float("nan")
        kind, metric, built_on = params.pop("type"), params.pop("metric"), params.pop("built_on")
        entries[f"index_{name}"] = artifact_entry(
            out_dir, file, "faiss_index", type=kind, metric=metric, dim=int(index.d), ntotal=int(index.ntotal),
            labels="dense item IDs (1..num_items); map to raw IDs with the id_map", built_on=built_on,
            params=params, recall_at_10_vs_exact=float(recall))
        log.info("index %s: recall@10 vs exact search on %d users = %.4f", name, len(queries), recall)
    return entries


def _test_metrics(queries: torch.Tensor, vectors: torch.Tensor, batches, exclude_history: bool) -> dict[str, float]:
    """Recall/NDCG/MRR of ``queries (U, D)`` against ``vectors (M, D)`` on the checked users (genrec's evaluator)."""
    evaluator, start = Evaluator(exclude_history=exclude_history), 0
    for batch in batches:
        scores = queries[start:start + batch.batch_size] @ vectors.T
        start += batch.batch_size
        evaluator.update(torch.cat([torch.full_like(scores[:, :1], float("-inf")), scores], 1), batch)
    return evaluator.compute()


def _top10(queries: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    return (queries @ vectors.T).topk(10, dim=1).indices


@torch.no_grad()
def _export_quantized(frozen: SequentialRecommender, tower: UserTower, num_items: int, out_dir: Path, batches,
                      reference, vectors: np.ndarray, settings: ExportSettings, exclude_history: bool
                      ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """For every dtype of ``settings.quantize``: the scoring-side item vectors and the tower's item table in that
    dtype (FBGEMM's kernels), the tower exported, and the figures against float32. Returns (artifacts, the
    manifest's ``quantization`` section; empty without dtypes)."""
    if not settings.quantize:
        return {}, {}
    fp32_vectors, fp32_queries = torch.from_numpy(vectors), torch.cat(reference)
    exact = _top10(fp32_queries, fp32_vectors)
    section = {"fp32": {"table_bytes": int(fp32_vectors.numel() * 4), "bytes_vs_fp32": 1.0,
                        "recall_at_10_vs_fp32": 1.0,
                        "test_metrics": _test_metrics(fp32_queries, fp32_vectors, batches, exclude_history)}}
    artifacts = {}
    for dtype in settings.quantize:
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
        low = UserTower(frozen, tower.with_time, table_dtype=dtype)
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


def write_retrieval_export(out_dir: Path, name: str, encoder: SequenceEncoder, similarity: Similarity,
                           table: torch.Tensor, raw_ids: Sequence[Any], batches: Sequence[JaggedBatch],
                           reference: Sequence[torch.Tensor], settings: ExportSettings, source: dict[str, Any], *,
                           exclude_history: bool = True, with_time: bool = False,
                           row_zero: str = "padding (never a history item)",
                           artifacts: dict[str, dict[str, Any]] | None = None,
                           sections: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write a retrieval export into ``out_dir`` and return its manifest (written last).

    Args:
        name: the model's name for the manifest (the run's ``model.name``).
        encoder / similarity: the trained query encoder and how scores are formed.
        table: ``(M + 1, D)`` raw item rows in the export's dense-ID order (row 0: ``row_zero``).
        raw_ids: the ``M`` raw item IDs of rows ``1..M``.
        batches / reference: the users the tower is checked on, with dense IDs of this export, and their
            in-framework ``(B, D)`` query vectors (also the queries of the indexes' recall and the quantised
            tables' test metrics).
        settings: indexes, parity tolerances, ONNX and quantisation.
        source: the manifest's ``source`` section.
        exclude_history: whether serving removes the user's history from the ranking (recorded).
        with_time: the tower takes the items' times and the request's (HSTU with its time bias).
        artifacts: entries already written into ``out_dir`` by the caller (e.g. a dynamic table's rows).
        sections: further top-level manifest sections (e.g. the stream's ``stream``).
    """
    started = time.time()
    artifacts, skipped = dict(artifacts or {}), {}
    (out_dir / "item_ids.json").write_text(json.dumps([None] + [raw_id(r) for r in raw_ids]))
    artifacts["item_ids"] = artifact_entry(out_dir, "item_ids.json", "id_map", entries=len(raw_ids) + 1, pad_id=0)
    with torch.no_grad():
        vectors = similarity.prepare(table[1:]).detach().float().contiguous().numpy()  # (M, D)
    np.save(out_dir / "item_vectors.npy", vectors)
    artifacts["item_vectors"] = artifact_entry(out_dir, "item_vectors.npy", "item_vectors",
                                               shape=list(vectors.shape), dtype="float32", first_id=1)

    frozen = SequentialRecommender(ExportedItems(table.detach().float()), encoder, similarity).eval()
    tower = UserTower(frozen, with_time=with_time)
    num_items = max(len(raw_ids), 1)
    towers, reason = _export_towers(tower, num_items, out_dir, batches, reference, settings, row_zero)
    artifacts.update(towers)
    if reason:
        skipped["user_tower_onnx"] = reason
    quantized, quantization = _export_quantized(frozen, tower, num_items, out_dir, batches, reference, vectors,
                                                settings, exclude_history)
    artifacts.update(quantized)
    queries = torch.cat(list(reference)).numpy().astype(np.float32) if len(reference) else np.zeros((0, tower.dim))
    indexes = _export_indexes(vectors, queries, out_dir, settings)
    artifacts.update(indexes)

    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": {"name": name, "kind": "retrieval", "similarity": similarity.name,
                  "normalised": similarity.normalised, "dim": int(vectors.shape[1]), "num_items": len(raw_ids),
                  "max_len": tower.max_len},
        "source": source,
        "artifacts": artifacts,
        "retrieval": {"query_encoder": "user_tower", "indexes": list(indexes),
                      "default_index": f"index_{settings.default_index}", "id_map": "item_ids",
                      "exclude_history": exclude_history},
        **({"quantization": quantization} if quantization else {}),
        **(sections or {}),
        "skipped": skipped,
        "versions": versions(),
        "export_seconds": round(time.time() - started, 1),
    }
    write_manifest(out_dir, manifest)
    return manifest
