"""scripts/analysis/record_curves.py on a real run folder (conftest's tiny_run): one point per epoch, and the best
epoch's point is the validation genrec-train repeats on the best checkpoint after training."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import load_script


def _script():
    return load_script("scripts/analysis/record_curves.py")


def test_a_runs_curve_ends_at_its_recorded_validation(tiny_run, tmp_path):
    run_dir, metrics = tiny_run
    out = tmp_path / "curves.json"
    _script().main(["--out", str(out), str(run_dir)])
    (run,) = json.loads(out.read_text())["runs"]
    assert [p["epoch"] for p in run["curve"]] == list(range(metrics["epochs_run"]))
    best = run["curve"][metrics["best_epoch"]]
    assert best["ndcg@10"] == pytest.approx(metrics["metrics"]["valid"]["ndcg@10"], abs=1e-7)
    assert run["init_from"] is None and run["test"]["ndcg@10"] == metrics["metrics"]["test"]["ndcg@10"]


def test_a_log_missing_an_epoch_is_refused_with_its_file(tiny_run, tmp_path):
    run_dir = Path(shutil.copytree(tiny_run[0], tmp_path / "run"))
    log = run_dir / "logs" / "metrics.csv"
    header, *rows = log.read_text().splitlines()
    log.write_text("\n".join([header] + [r for r in rows if not r.startswith("0,")]) + "\n")  # epoch 0's rows
    with pytest.raises(SystemExit, match="logs/metrics.csv: expected one validation every 1 epoch"):
        _script().curve(run_dir)


def test_the_validation_interval_comes_from_the_runs_config(tiny_run, tmp_path):
    """A run validated every k epochs (trainer.check_val_every_n_epoch) has a point every k epochs: a config saying
    2 over a log validated after every epoch is refused."""
    from omegaconf import OmegaConf

    run_dir = Path(shutil.copytree(tiny_run[0], tmp_path / "run"))
    cfg = OmegaConf.load(run_dir / "config.yaml")
    cfg.trainer.check_val_every_n_epoch = 2
    OmegaConf.save(cfg, run_dir / "config.yaml")
    epochs = json.loads((run_dir / "metrics.json").read_text())["epochs_run"]
    with pytest.raises(SystemExit, match=f"expected one validation every 2 epoch\\(s\\) 0..{epochs - 1}"):
        _script().curve(run_dir)
