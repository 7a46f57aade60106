"""The export manifest (``manifest.json``): what a serving team needs to load and trust the exported files.

Layout (``format_version`` 1)::

    format, format_version, created
    model:     name, kind ("retrieval" | "generative"), num_items, max_len
               + retrieval: similarity ("dot" | "cosine"), normalised, dim
    source:    run_dir, checkpoint, checkpoint_sha256, dataset (summary), seed
    artifacts: {name: {file, kind, sha256, bytes, ...kind-specific keys}}
    retrieval: query_encoder (artifact name), indexes (artifact names), default_index, id_map, exclude_history
               (model.kind "retrieval")
    decoding:  sid_table, id_map (artifact names), beam, top_k, constrained, exclude_history, token_layout;
               optional rank (codes | hybrid | guided | items, model.decoding.rank; absent: codes) and
               code_weight (model.decoding.code_weight; absent: 1)
               (model.kind "generative": the model is served from source.checkpoint with genrec)
    quantization: (retrieval, optional) {fp32 | fp16 | int8: table_bytes, bytes_vs_fp32, recall_at_10_vs_fp32
               (top-10 overlap with float32 retrieval on the test users), test_metrics (genrec's evaluation with
               that table), and for fp16/int8 tower_max_abs_diff and the artifacts written}
    skipped:   {artifact name: reason} for artifacts that could not be written here (e.g. ONNX without onnx)
    versions:  genrec, commit, python, torch, faiss, numpy (+ onnx when written)

Artifact kinds and their own keys:

* ``id_map`` — ``entries`` (``num_items + 1``), ``pad_id`` (0): a JSON list, entry ``i`` = raw ID of dense ID ``i``.
* ``item_vectors`` — ``shape`` ``[num_items, dim]``, ``dtype``, ``first_id`` (row ``r`` is dense ID ``first_id + r``).
* ``torch_export`` / ``onnx`` — ``inputs``, ``output``, ``parity`` (the check against the in-framework encoder).
* ``faiss_index`` — ``type``, ``metric``, ``dim``, ``ntotal``, ``params``, ``recall_at_10_vs_exact``.
* ``quantized_item_vectors`` — ``dtype`` (``fp16`` | ``int8``), ``shape`` ``[num_items, dim]``, ``layout`` (how to
  read the rows), ``first_id``.
* ``sid_table`` — ``codebook_sizes``, ``content_hash``, ``entries``: genrec's SID table (Parquet, with the
  ``sid_table.safetensors`` beside it listed as its own artifact of the same kind).
* ``dynamic_rows`` — ``version``, ``since`` (null: all rows; else a delta since that table version), ``rows``,
  ``deleted``, ``dim``: a dynamic item table's rows keyed by raw ID (a folder of ``part-rank<r>/`` with ``ids.npy``,
  ``rows.npy``, ``deleted_ids.npy``, ``default_rows.npy``; ``genrec.embedding.dynamic.export.apply_export`` is the
  reference for applying it; docs/DYNAMIC_EMBEDDINGS.md).

A reader checks ``model.kind`` before anything else.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genrec.errors import UserError
from genrec.runs import file_digest

FORMAT, FORMAT_VERSION = "genrec-export", 1
MANIFEST_FILE = "manifest.json"

#: Required keys of each section, with their JSON types.
TOP_LEVEL = {"format": str, "format_version": int, "created": str, "model": dict, "source": dict,
             "artifacts": dict, "skipped": dict, "versions": dict}
MODEL = {"name": str, "kind": str, "num_items": int, "max_len": int}
#: What each model kind adds to ``model``, and the top-level section that says how to serve it.
KIND_MODEL = {"retrieval": {"similarity": str, "normalised": bool, "dim": int}, "generative": {}}
KIND_SECTION = {"retrieval": "retrieval", "generative": "decoding"}
SOURCE = {"run_dir": str, "checkpoint": str, "checkpoint_sha256": str, "dataset": dict}
RETRIEVAL = {"query_encoder": str, "indexes": list, "default_index": str, "id_map": str, "exclude_history": bool}
DECODING = {"sid_table": str, "id_map": str, "beam": int, "top_k": int, "constrained": bool, "exclude_history": bool,
            "token_layout": str}
QUANTIZATION = {"table_bytes": int, "bytes_vs_fp32": float, "recall_at_10_vs_fp32": float, "test_metrics": dict}
VERSIONS = {"genrec": str, "commit": str, "python": str, "torch": str, "faiss": str, "numpy": str}
ARTIFACT = {"file": str, "kind": str, "sha256": str, "bytes": int}
ARTIFACT_KINDS = {
    "id_map": {"entries": int, "pad_id": int},
    "item_vectors": {"shape": list, "dtype": str, "first_id": int},
    "torch_export": {"inputs": list, "output": dict, "parity": dict},
    "onnx": {"inputs": list, "output": dict, "parity": dict},
    "faiss_index": {"type": str, "metric": str, "dim": int, "ntotal": int, "params": dict,
                    "recall_at_10_vs_exact": float},
    "quantized_item_vectors": {"dtype": str, "shape": list, "layout": str, "first_id": int},
    "sid_table": {"codebook_sizes": list, "content_hash": str, "entries": int},
    "dynamic_rows": {"version": int, "rows": int, "deleted": int, "dim": int},
}


class ManifestError(UserError):
    """A manifest that does not follow the layout above; the message names the file and the key."""


def artifact_entry(out_dir: Path, file: str, kind: str, **fields: Any) -> dict[str, Any]:
    """The manifest entry of ``out_dir / file`` (a file, or a folder of files): its checksum and size plus the kind's
    own ``fields``."""
    path = out_dir / file
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
    return {"file": file, "kind": kind, "sha256": file_digest(path), "bytes": size, **fields}


def _check_section(section: dict, required: dict[str, type], where: str, source: str) -> None:
    for key, kind in required.items():
        if key not in section:
            raise ManifestError(f"{source}: {where} lacks the key {key!r}")
        value = section[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float else (
            isinstance(value, kind) and not (kind is int and isinstance(value, bool)))
        if not ok:
            raise ManifestError(f"{source}: {where}.{key} should be {kind.__name__}, got {type(value).__name__} "
                                f"{value!r}")


def validate_manifest(manifest: dict[str, Any], source: str = MANIFEST_FILE) -> dict[str, Any]:
    """Check ``manifest`` against the layout above; raise :class:`ManifestError` naming ``source`` and the key."""
    _check_section(manifest, TOP_LEVEL, "manifest", source)
    if manifest["format"] != FORMAT or manifest["format_version"] != FORMAT_VERSION:
        raise ManifestError(f"{source}: format {manifest['format']!r} version {manifest['format_version']} is not "
                            f"{FORMAT!r} version {FORMAT_VERSION}")
    for name, required in (("model", MODEL), ("source", SOURCE), ("versions", VERSIONS)):
        _check_section(manifest[name], required, name, source)
    kind = manifest["model"]["kind"]
    if kind not in KIND_SECTION:
        raise ManifestError(f"{source}: model.kind {kind!r} is not one of {sorted(KIND_SECTION)}")
    _check_section(manifest["model"], KIND_MODEL[kind], "model", source)
    section = KIND_SECTION[kind]
    _check_section(manifest, {section: dict}, "manifest", source)
    _check_section(manifest[section], RETRIEVAL if kind == "retrieval" else DECODING, section, source)
    for name, entry in manifest["artifacts"].items():
        _check_section(entry, ARTIFACT, f"artifacts.{name}", source)
        if entry["kind"] not in ARTIFACT_KINDS:
            raise ManifestError(f"{source}: artifacts.{name}.kind {entry['kind']!r} is not one of "
                                f"{sorted(ARTIFACT_KINDS)}")
        _check_section(entry, ARTIFACT_KINDS[entry["kind"]], f"artifacts.{name}", source)
    serving = manifest[section]
    named = [serving["id_map"]] + ([serving["query_encoder"], serving["default_index"], *serving["indexes"]]
                                   if kind == "retrieval" else [serving["sid_table"]])
    for name in named:
        if name not in manifest["artifacts"]:
            raise ManifestError(f"{source}: {section} names the artifact {name!r}, which artifacts does not list")
    for dtype, figures in manifest.get("quantization", {}).items():
        _check_section(figures, QUANTIZATION, f"quantization.{dtype}", source)
        for name in figures.get("artifacts", []):
            if name not in manifest["artifacts"]:
                raise ManifestError(f"{source}: quantization.{dtype} names the artifact {name!r}, which artifacts "
                                    "does not list")
    if kind == "retrieval" and serving["default_index"] not in serving["indexes"]:
        raise ManifestError(f"{source}: retrieval.default_index {serving['default_index']!r} is not in "
                            f"retrieval.indexes {serving['indexes']}")
    return manifest


def write_manifest(out_dir: Path, manifest: dict[str, Any]) -> Path:
    """Validate and write ``out_dir/manifest.json``."""
    validate_manifest(manifest, str(out_dir / MANIFEST_FILE))
    path = out_dir / MANIFEST_FILE
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return path
