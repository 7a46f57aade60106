"""Results as data: one envelope for every file in ``results/``, defined here and validated by tests.

::

    {"kind": "train_run",            # what wrote it (a benchmark, a training run, a tokenizer run, ...)
     "schema_version": 1,
     "provenance": {"commit": ..., "created": ..., "environment": {...}, ...},   # where the figures came from
     "settings": {...},               # what was run: config, dataset, seeds, sizes
     "figures": {...}}                # what was measured

Writers hand a flat record to :func:`write_result`, which sorts its keys into the three sections (:data:`PROVENANCE`
and :data:`SETTINGS` name the keys that are not figures); readers get the flat record back with
:func:`load_result` (:func:`flat`), so a renderer reads ``record["metrics"]`` whatever section it is in.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genrec.errors import DataError

SCHEMA_VERSION = 1
SECTIONS = ("kind", "schema_version", "provenance", "settings", "figures")
#: the keys of a flat record that say where its figures came from
PROVENANCE = frozenset({"commit", "created", "environment", "commit_note", "uncommitted", "source_commit",
                        "machine_note", "machine", "device", "cores", "load_average_1min", "versions"})
#: the keys of a flat record that say what was run (everything else is a figure)
SETTINGS = frozenset({"name", "model", "seed", "seeds", "config", "dataset", "protocol", "sid_table", "decoding",
                      "parameters", "init_from", "align", "distill", "stage", "settings", "sizes", "quick", "threads",
                      "batch", "batch_size", "max_len", "rounds", "split", "tokenizer", "encoder", "quantizer",
                      "collisions", "harness", "omp_wait_policy", "peer_rev", "run_dir", "export_dir", "checkpoint",
                      "teacher", "generator", "variants", "recipe", "budget", "dataset_name", "preset", "overrides",
                      "epochs", "sections", "stores", "datasets_settings", "benchmark", "note"})


def envelope(kind: str, record: dict[str, Any]) -> dict[str, Any]:
    """A flat ``record`` (provenance keys included) as an envelope of ``kind``."""
    sections: dict[str, dict[str, Any]] = {"provenance": {}, "settings": {}, "figures": {}}
    for key, value in record.items():
        if key == "kind":
            continue
        section = "provenance" if key in PROVENANCE else "settings" if key in SETTINGS else "figures"
        sections[section][key] = value
    return {"kind": kind, "schema_version": SCHEMA_VERSION, **sections}


def validate(doc: Any, source: str | Path) -> dict[str, Any]:
    """``doc`` checked against the envelope; a :class:`DataError` naming ``source`` and the key otherwise."""
    if not isinstance(doc, dict):
        raise DataError(source, "expected a JSON object (the results envelope)")
    extra = sorted(set(doc) - set(SECTIONS))
    if extra:
        raise DataError(source, f"keys outside the envelope {list(SECTIONS)}: {extra}", key=extra[0])
    if not isinstance(doc.get("kind"), str) or not doc["kind"]:
        raise DataError(source, "expected the kind of result (a non-empty string)", key="kind")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise DataError(source, f"expected schema_version {SCHEMA_VERSION}, got {doc.get('schema_version')!r}",
                        key="schema_version")
    for section in ("provenance", "settings", "figures"):
        if not isinstance(doc.get(section), dict):
            raise DataError(source, "expected a JSON object", key=section)
    for key in ("commit", "created"):
        if not isinstance(doc["provenance"].get(key), str):
            raise DataError(source, "expected a string (results record where they came from)",
                            key=f"provenance.{key}")
    return doc


def flat(doc: dict[str, Any]) -> dict[str, Any]:
    """An envelope's record as its writer handed it (every section's keys side by side, with ``kind``)."""
    return {**doc["provenance"], **doc["settings"], **doc["figures"], "kind": doc["kind"]}


def write_result(path: str | Path, kind: str, record: dict[str, Any]) -> Path:
    """Write the flat ``record`` (from :func:`genrec.utils.provenance.provenance` on, plus settings and figures) as
    a validated envelope of ``kind`` at ``path``."""
    path = Path(path)
    doc = validate(envelope(kind, record), path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return path


def load_result(path: str | Path) -> dict[str, Any]:
    """The flat record of the results file ``path`` (checked against the envelope)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DataError(path, f"cannot be read as JSON: {err}") from None
    return flat(validate(doc, path))
