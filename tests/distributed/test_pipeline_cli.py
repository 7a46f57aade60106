"""``sharding.pipeline=sparse_dist`` through genrec-train on two gloo processes (Lightning, manual optimization):

- with the full softmax (no candidates to draw) the pipelined run ends with the metrics, validation scores and
  epoch losses of the unpipelined run;
- with sampled negatives (drawn by the data loader) a pipelined run SIGKILLed mid-epoch and resumed ends
  bit-identical to the uninterrupted pipelined run.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest

from tests.test_resume import BASE, _finish, _kill_after, _resume, _start

pytestmark = [pytest.mark.dist, pytest.mark.slow]

#: 300 users, 2 processes, batches of 32: 5 steps per epoch per process; last.ckpt every 4 steps
TWO_PROCESSES = [o for o in BASE if not o.startswith("trainer.max_epochs=")] + [
    "trainer.accelerator=cpu", "trainer.devices=2", "sharding=row_wise", "model.dim=16"]


def _logged(run_dir: Path, column: str) -> pd.DataFrame:
    log = pd.read_csv(run_dir / "logs" / "metrics.csv")
    return log.dropna(subset=[column])[["step", column]].reset_index(drop=True)


def _columns(run_dir: Path, prefix: str) -> list[str]:
    return [c for c in pd.read_csv(run_dir / "logs" / "metrics.csv") if c.startswith(prefix)]


def test_pipelined_run_equals_unpipelined_run(tmp_path):
    overrides = TWO_PROCESSES + ["trainer.max_epochs=3", f"data.cache_dir={tmp_path / 'cache'}"]
    runs = {p: tmp_path / p for p in ("none", "sparse_dist")}
    for pipeline, run_dir in runs.items():
        _finish(_start(run_dir, overrides + [f"sharding.pipeline={pipeline}"]))
    plain, pipelined = (json.loads((d / "metrics.json").read_text()) for d in runs.values())
    assert pipelined["config"]["sharding"]["pipeline"] == "sparse_dist" and pipelined["processes"] == 2
    assert pipelined["steps_run"] == plain["steps_run"] == 15
    for split in ("valid", "test"):
        assert pipelined["metrics"][split] == pytest.approx(plain["metrics"][split], abs=1e-6)
    for column in _columns(runs["none"], "val/") + ["train/loss_epoch"]:
        pd.testing.assert_frame_equal(_logged(runs["sparse_dist"], column), _logged(runs["none"], column),
                                      check_exact=False, atol=1e-6)


def test_pipelined_run_killed_and_resumed_equals_uninterrupted(tmp_path):
    overrides = TWO_PROCESSES + ["sharding.pipeline=sparse_dist", "loss@model.loss=sampled",
                                        "model.loss.num_negatives=16", "trainer.max_epochs=4",
                                        f"data.cache_dir={tmp_path / 'cache'}"]
    reference, run_dir = tmp_path / "uninterrupted", tmp_path / "run"
    _finish(_start(reference, overrides))
    proc = _start(run_dir, overrides)
    # epoch 2 runs steps 11..15; its step-12 checkpoint is mid-epoch (the pipeline held batches 13 and 14)
    resumed_from = _kill_after(proc, run_dir, 12, random.Random("pipelined").uniform(0.0, 0.1))
    _resume(run_dir)
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (reference, run_dir))
    assert 0 < resumed_from < a["steps_run"] and b["resumes"][0]["global_step"] == resumed_from
    assert resumed_from % 5, "the kill was to land mid-epoch"
    assert b["metrics"] == a["metrics"]  # bit-identical
    assert b["best_epoch"] == a["best_epoch"] and b["steps_run"] == a["steps_run"] == 20
    for column in _columns(reference, "val/") + ["train/loss_step"]:
        got, expected = _logged(run_dir, column), _logged(reference, column)
        if column == "train/loss_step":  # the step logged right after a mid-epoch checkpoint is not logged again
            got, expected = (x[x["step"] != resumed_from - 1].reset_index(drop=True) for x in (got, expected))
        pd.testing.assert_frame_equal(got, expected, check_exact=True)
