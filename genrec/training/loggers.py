"""The run's CSV log (``<run>/logs/metrics.csv``), kept across resumes.

Lightning's CSVLogger deletes an existing ``metrics.csv`` when it starts; a resumed run must append instead, after
dropping the rows the killed process logged past its last checkpoint (the resumed run logs those steps again):
:class:`~genrec.training.resume.ResumeState` calls :meth:`RunCSVLogger.truncate` with the checkpoint's global step.
Rows are written as they are logged, so a killed process loses none it had logged.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment


class _AppendingWriter(ExperimentWriter):
    """Lightning's CSV writer, minus deleting the file it finds; it continues that file's header and rows."""

    def __init__(self, log_dir: str):
        super().__init__(log_dir)
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = list(csv.DictReader(f).fieldnames or [])

    def _check_log_dir_exists(self) -> None:
        """Keep what is there (Lightning's writer deletes ``metrics.csv`` here)."""

    def truncate(self, before_step: int) -> None:
        """Keep the rows logged at steps before ``before_step`` (the file is rewritten atomically)."""
        self.save()
        if not os.path.isfile(self.metrics_file_path):
            return
        with open(self.metrics_file_path, newline="") as f:
            reader = csv.DictReader(f)
            fields = list(reader.fieldnames or [])
            kept = [row for row in reader if int(float(row["step"])) < before_step]
        partial = Path(self.metrics_file_path + ".partial")
        with open(partial, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(kept)
        os.replace(partial, self.metrics_file_path)
        self.metrics_keys = fields


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
