"""What a report shows of one run, read from its folder as plain data (nothing is imported or instantiated).

From ``<run>/``: ``config.yaml`` (read as data: the report never builds what it names), ``metrics.json`` (absent
while the run trains), ``logs/metrics.csv`` (curves and telemetry rows), ``eval/metrics.json`` (genrec-eval's
breakdowns, when it ran) and, for runs over semantic IDs, the SID table's ``metrics.json`` (tokenizer health).
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from genrec.errors import DataError, UserError
from genrec.runs import CONFIG_FILE, RunFolder

CSV_LOG = Path("logs") / "metrics.csv"
EVAL_FILE = Path("eval") / "metrics.json"


@dataclass
class RunData:
    """One run as the report sees it.

    Attributes:
        label: how the report names the run (the folder as given on the command line).
        path: the run folder.
        config: the resolved config, flattened to ``{"model.dim": 16, ...}``.
        metrics: ``metrics.json`` (``None`` while the run has not finished).
        curves: every numeric column of the CSV log: ``{column: [[x, value], ...]}`` with ``x`` the step
            (``train/*_step``, ``telemetry/*``) or the epoch (``*_epoch``, ``val/*``, ``test/*``).
        evaluation: this run's entry of ``eval/metrics.json`` plus the file's baselines (``None`` without it).
        tokenizer: the SID table's ``metrics.json`` for runs over semantic IDs (``None`` otherwise).
        notes: what the report could not show, and why.
    """

    label: str
    path: Path
    config: dict[str, Any]
    metrics: dict[str, Any] | None
    curves: dict[str, list[list[float]]]
    evaluation: dict[str, Any] | None
    tokenizer: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)

    @property
    def model(self) -> str:
        return str(self.config.get("model.name", "model"))


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> ``{"a.b.c": leaf}`` (lists are leaves)."""
    if not isinstance(node, dict) or not node:
        return {prefix: node} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def finite(node: Any) -> Any:
    """``node`` with NaN and infinities replaced by ``None`` (JSON and JavaScript's JSON.parse have none)."""
    if isinstance(node, dict):
        return {key: finite(value) for key, value in node.items()}
    if isinstance(node, (list, tuple)):
        return [finite(value) for value in node]
    if isinstance(node, float) and not math.isfinite(node):
        return None
    return node


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DataError(path, f"cannot be read as JSON: {' '.join(str(err).split())}") from None
    if not isinstance(data, dict):
        raise DataError(path, "expected a JSON object")
    return data


def read_config(path: Path) -> dict[str, Any]:
    """A run's ``config.yaml`` as plain data, flattened (its ``_target_`` values are only shown, never imported)."""
    try:
        cfg = OmegaConf.load(path)
    except (OSError, OmegaConfBaseException, ValueError) as err:
        raise DataError(path, f"cannot be read as a genrec config: {' '.join(str(err).split())}") from None
    if not isinstance(cfg, DictConfig):
        raise DataError(path, "expected a mapping of config keys")
    return flatten(OmegaConf.to_container(cfg, resolve=False))


def _x_axis(column: str) -> str:
    return "step" if column.endswith("_step") or column.startswith("telemetry/") else "epoch"


def read_curves(path: Path) -> dict[str, list[list[float]]]:
    """Every metric column of a CSV log as ``[[x, value], ...]`` (rows without the value skipped)."""
    try:
        with open(path, newline="") as f:
            return _curves(path, csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(path, f"cannot be read as a CSV log: {' '.join(str(err).split())}") from None


def _curves(path: Path, reader: csv.DictReader) -> dict[str, list[list[float]]]:
    curves: dict[str, list[list[float]]] = {}
    fields = reader.fieldnames or []
    if "step" not in fields:
        raise DataError(path, "expected a CSV log with a 'step' column (written by genrec-train)")
    for line, row in enumerate(reader, start=2):
        for column in fields:
            if column in ("step", "epoch") or not row.get(column):
                continue
            try:
                x = float(row.get(_x_axis(column)) or "nan")
                value = float(row[column])
            except ValueError:
                raise DataError(path, f"column {column!r}: expected numbers, got {row[column]!r}",
                                line=line) from None
            if math.isfinite(x) and math.isfinite(value):
                curves.setdefault(column, []).append([x, value])
    return curves


def _evaluation(run: Path) -> dict[str, Any] | None:
    path = run / EVAL_FILE
    if not path.is_file():
        return None
    data = _read_json(path)
    models = data.get("models") or {}
    mine = [m for m in models.values() if Path(str(m.get("run_dir", ""))).resolve() == run.resolve()]
    if not (mine or models):
        raise DataError(path, "holds no model's evaluation", key="models")
    entry = (mine or list(models.values()))[0]
    return {"model": entry, "baselines": data.get("baselines") or {}, "breakdown_settings":
            data.get("breakdown_settings") or {}}


def _tokenizer(config: dict[str, Any], notes: list[str]) -> dict[str, Any] | None:
    folder = config.get("sid_table")
    if not folder:
        return None
    path = Path(str(folder)) / "metrics.json"
    if not path.is_file():
        notes.append(f"tokenizer health: {path} not found (the SID table folder moved?)")
        return None
    return _read_json(path)


def read_run(path: str | Path) -> RunData:
    """The report's view of the run folder at ``path``; a folder that is not a genrec-train run is a
    :class:`UserError` naming it."""
    folder = RunFolder.existing(path, key="run")
    metrics = folder.metrics()
    if metrics is not None and metrics.get("kind") == "tokenize":
        raise UserError(f"run={path}: is a genrec-tokenize folder (a SID table); pass the training run that uses it "
                        "(its tokenizer health is part of that run's report)")
    config = read_config(folder.path / CONFIG_FILE)
    notes = []
    if metrics is None:
        notes.append("metrics.json not found: the run has not finished (curves so far are shown)")
    csv_log = folder.path / CSV_LOG
    curves = read_curves(csv_log) if csv_log.is_file() else {}
    if metrics is not None and "epochs_run" in metrics:
        # genrec-train re-validates the best checkpoint after training, logged at epoch = epochs_run: not a curve point
        curves = {column: [p for p in points if not (column.startswith("val/") and p[0] >= metrics["epochs_run"])]
                  for column, points in curves.items()}
    if not curves:
        notes.append(f"no training curves: {csv_log} not found or empty (the run logged with logger=csv?)")
    evaluation = _evaluation(folder.path)
    if evaluation is None:
        notes.append(f"no evaluation breakdowns: run genrec-eval run_dir={path} to add them")
    return RunData(label=str(path), path=folder.path, config=config, metrics=metrics, curves=curves,
                   evaluation=evaluation, tokenizer=_tokenizer(config, notes), notes=notes)


def config_diff(runs: list[RunData]) -> dict[str, list[Any]]:
    """The config keys whose values differ between runs: ``{key: [value in run 0, value in run 1, ...]}`` (a key a
    run does not have is ``None`` there); keys in sorted order."""
    diff = {}
    for key in sorted(set().union(*(run.config for run in runs))):
        values = [run.config.get(key) for run in runs]
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) > 1:
            diff[key] = values
    return diff
