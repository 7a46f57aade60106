"""The run's CSV log (genrec/training/loggers.py): a resumed run's logger continues the file and truncates it at
the checkpoint's step, and a rewrite for a new metric's column is atomic, so a process killed during it keeps the
rows it had logged (Lightning's writer truncates the file first: tests/test_resume.py once lost them that way)."""
from __future__ import annotations

import csv

import pytest

from genrec.training.loggers import RunCSVLogger


def _rows(run_dir) -> list[dict]:
    with open(run_dir / "logs" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _log(logger: RunCSVLogger, step: int, **metrics: float) -> None:
    logger.log_metrics(metrics, step=step)
    logger.save()


def test_a_new_logger_continues_the_file_and_truncates_it_at_a_step(tmp_path):
    first = RunCSVLogger(tmp_path)
    for step in range(4):
        _log(first, step, loss=float(step))
    _log(first, 4, **{"val/ndcg": 0.5})  # a new column: the file is rewritten with it
    resumed = RunCSVLogger(tmp_path)
    resumed.truncate(2)  # resumed from the checkpoint at step 2: steps 2-4 are logged again
    _log(resumed, 2, loss=20.0)
    assert [(r["step"], r["loss"], r["val/ndcg"]) for r in _rows(tmp_path)] == [
        ("0", "0.0", ""), ("1", "1.0", ""), ("2", "20.0", "")]


def test_a_rewrite_for_a_new_column_killed_partway_keeps_the_logged_rows(tmp_path, monkeypatch):
    logger = RunCSVLogger(tmp_path)
    for step in range(3):
        _log(logger, step, loss=float(step))

    def killed(self, rows):
        raise SystemExit("killed while writing")

    monkeypatch.setattr(csv.DictWriter, "writerows", killed)
    with pytest.raises(SystemExit):
        _log(logger, 3, **{"val/ndcg": 0.5})
    monkeypatch.undo()
    assert [(r["step"], r["loss"]) for r in _rows(tmp_path)] == [("0", "0.0"), ("1", "1.0"), ("2", "2.0")]
