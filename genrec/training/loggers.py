"""The run's loggers: the CSV log kept across resumes, and the experiment trackers continued across resumes.

**The CSV log** (``<run>/logs/metrics.csv``): Lightning's CSVLogger deletes an existing ``metrics.csv`` when it
starts; a resumed run must append instead, after dropping the rows the killed process logged past its last
checkpoint (the resumed run logs those steps again): :class:`~genrec.training.resume.ResumeState` calls
:meth:`RunCSVLogger.truncate` with the checkpoint's global step. Rows are written as they are logged, and the file is
rewritten only atomically (a new metric's column, a truncation), so a killed process loses none it had logged. A
full disk (or file-size limit) is a one-line :class:`~genrec.errors.DiskFullError` naming the file, which is left
without a partial row.

**Trackers** (MLflow, Weights & Biases): when training starts, :class:`TrackerRuns` writes ``<run>/trackers.json``,
for every logger that can continue its run, the keyword arguments that make a new logger continue it (MLflow: the
run ID and the absolute tracking URI; W&B: the run ID with ``resume="allow"``); a resumed run's loggers are built
with them (:func:`genrec.training.fit.build_loggers`). On a new run it also logs the run's resolved config to
every logger as hyperparameters (not on a resume: MLflow refuses to change a logged parameter).
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from genrec.errors import DiskFullError, writing

#: in the run folder: how each tracker's run continues, by the logger's name in the ``logger`` config group
TRACKERS_FILE = "trackers.json"


class _AppendingWriter(ExperimentWriter):
    """Lightning's CSV writer, minus deleting the file it finds; it continues that file's header and rows."""

    def __init__(self, log_dir: str):
        super().__init__(log_dir)
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = list(csv.DictReader(f).fieldnames or [])

    def _check_log_dir_exists(self) -> None:
        """Keep what is there (Lightning's writer deletes ``metrics.csv`` here)."""

    def save(self) -> None:
        """Lightning's save (append the rows logged since the last one); on a full disk, the file keeps only whole
        rows and the error is one line."""
        try:
            with writing(self.metrics_file_path):
                super().save()
        except DiskFullError:
            _drop_partial_line(Path(self.metrics_file_path))
            raise

    def truncate(self, before_step: int) -> None:
        """Keep the rows logged at steps before ``before_step`` (the file is rewritten atomically)."""
        self.save()
        if not os.path.isfile(self.metrics_file_path):
            return
        with open(self.metrics_file_path, newline="") as f:
            reader = csv.DictReader(f)
            fields = list(reader.fieldnames or [])
            kept = [row for row in reader if int(float(row["step"])) < before_step]
        self._replace_file(fields, kept)
        self.metrics_keys = fields

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        """Lightning's rewrite when a new metric appears, made atomic: Lightning truncates the file and writes it
        again, so a process killed in between loses every row it had logged."""
        with open(self.metrics_file_path, newline="") as f:
            rows = list(csv.DictReader(f))
        self._replace_file(fieldnames, rows)

    def _replace_file(self, fieldnames: list[str], rows: list[dict]) -> None:
        """Write ``rows`` under the header ``fieldnames`` to a new file, then move it over ``metrics.csv``."""
        partial = Path(self.metrics_file_path + ".partial")
        try:
            with writing(self.metrics_file_path), open(partial, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=fieldnames)
                writer.writeheader()
                writer.writerows(rows)
        except DiskFullError:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, self.metrics_file_path)


def _drop_partial_line(path: Path) -> None:
    """Cut ``path`` after its last complete line (a write interrupted mid-row leaves part of one)."""
    if not path.is_file():
        return
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        os.truncate(path, data.rfind(b"\n") + 1)


class RunCSVLogger(CSVLogger):
    """A CSV logger writing ``<save_dir>/logs/metrics.csv`` that appends to an existing file (see the module doc).

    Args:
        save_dir: the run folder.
        kwargs: :class:`lightning.pytorch.loggers.CSVLogger` arguments.
    """

    def __init__(self, save_dir: str | Path, **kwargs: Any):
        super().__init__(save_dir, name="logs", version="", flush_logs_every_n_steps=1, **kwargs)

    @property
    @rank_zero_experiment
    def experiment(self) -> _AppendingWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment

    def truncate(self, before_step: int) -> None:
        """Drop the rows logged at ``before_step`` or later."""
        self.experiment.truncate(before_step)


def absolute_store(uri: str) -> str:
    """A tracking URI with a relative path (``sqlite:///mlflow.db``, ``file:mlruns``) made absolute, relative to the
    working directory, so that a run resumed from another folder finds its store."""
    for prefix in ("sqlite:///", "file:"):
        if uri.startswith(prefix) and not uri[len(prefix):].startswith("/"):
            return prefix + str(Path(uri[len(prefix):]).resolve())
    return uri


def continuation(logger: Logger, node: Any) -> dict[str, Any] | None:
    """The keyword arguments that make a new logger built from the config ``node`` continue ``logger``'s run (its
    experiment is started if it was not), or ``None`` for a logger that has no run to continue."""
    if isinstance(logger, MLFlowLogger):
        uri = node.get("tracking_uri")
        return {"run_id": logger.run_id, **({"tracking_uri": absolute_store(uri)} if uri else {})}
    if isinstance(logger, WandbLogger):
        return {"id": logger.experiment.id, "resume": "allow"}
    return None


def read_continuations(run_dir: Path) -> dict[str, dict[str, Any]]:
    """``<run_dir>/trackers.json`` (empty when the run wrote none)."""
    path = run_dir / TRACKERS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


class TrackerRuns(Callback):
    """When training starts (rank 0): writes ``<run_dir>/trackers.json`` (see the module doc) and, on a new run, logs
    ``config`` to every logger as hyperparameters.

    Args:
        run_dir: the run folder.
        loggers: the run's loggers with their config nodes, by name in the ``logger`` group.
        config: the run's resolved config.
        resumed: whether this process continues a run (its config was logged by the first process).
    """

    def __init__(self, run_dir: Path, loggers: dict[str, tuple[Logger, Any]], config: dict[str, Any], resumed: bool):
        self.run_dir, self.loggers, self.config, self.resumed = Path(run_dir), loggers, config, resumed

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        if not self.resumed:
            for logger, _ in self.loggers.values():
                logger.log_hyperparams(self.config)
        runs = {name: c for name, (logger, node) in self.loggers.items()
                if (c := continuation(logger, node)) is not None}
        if runs:
            partial = self.run_dir / (TRACKERS_FILE + ".partial")
            partial.write_text(json.dumps(runs, indent=2) + "\n")
            os.replace(partial, self.run_dir / TRACKERS_FILE)
