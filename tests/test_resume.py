"""Exact resume: a training run SIGKILLed at some point and resumed with ``genrec-train resume_from=<run folder>``
ends bit-identical to the uninterrupted run (test metrics, best epoch, the logged validation scores and step
losses) — SASRec (killed mid-epoch and right after an epoch's checkpoint), HSTU, the decoder-only generator over
semantic IDs, a dynamic item table with an SSD tier, and a 2-process sharded run. The processes are real and the kill is a real SIGKILL of the whole
process group, sent from this test at a point drawn from a seeded generator."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from genrec.dist.checkpoint import read_meta
from genrec.errors import DataError
from tests.generative.helpers import tiny_sid_table

#: 300 users, batches of 32: 10 training steps per epoch (SASRec, HSTU), 8 epochs (no early stopping: the kill must
#: land while the run trains, and tiny models train fast); last.ckpt every 4 steps and after every epoch
BASE = ["data.reader.num_users=300", "data.reader.num_items=120", "data.reader.num_clusters=6", "data.max_len=20",
        "data.batch_size=32", "trainer.max_epochs=8", "callbacks=none", "trainer.enable_progress_bar=false",
        "+trainer.enable_model_summary=false", "trainer.log_every_n_steps=1", "checkpoint_every_n_steps=4",
        "baselines=[]", "threads=1"]
KINDS = {
    # dropout 0.2 and uniformly sampled negatives: both draw from the random state at every step
    "sasrec": ["model.dim=16", "loss@model.loss=sampled", "model.loss.num_negatives=16"],
    "hstu": ["model=hstu", "model.dim=16", "model.encoder.num_layers=1", "model.loss.num_negatives=8"],
    "sid_gpt": ["model=sid_gpt", "model.dim=16", "model.backbone.num_layers=1", "model.backbone.ffn_dim=32",
                "data.max_len=8"],
    # a dynamic item table with an SSD tier: 600 items, 300 rows in memory, the rest in RocksDB (38 steps per epoch)
    "sasrec_dynamic": ["model.dim=16", "loss@model.loss=sampled", "model.loss.num_negatives=8",
                       "data.reader.num_items=600", "data.batch_size=8", "trainer.max_epochs=3",
                       "embedding@model.embedding=dynamic", "model.embedding.capacity=300",
                       "model.embedding.pinned_batches=1"],
    # the same table prefetching: each step's rows mapped while the step before trains, none past a checkpoint
    "sasrec_dynamic_prefetch": ["model.dim=16", "loss@model.loss=sampled", "model.loss.num_negatives=8",
                                "data.reader.num_items=600", "data.batch_size=8", "data.max_len=10",
                                "trainer.max_epochs=3", "embedding@model.embedding=dynamic",
                                "model.embedding.capacity=300", "model.embedding.pinned_batches=2",
                                "model.embedding.prefetch_depth=1"],
}
#: set by an earlier in-process Lightning run; a child that inherits LOCAL_RANK thinks it was launched externally
LAUNCH_VARIABLES = {"MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"}


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}


def _start(run_dir: Path, overrides: list[str]) -> subprocess.Popen:
    if "embedding@model.embedding=dynamic" in overrides:  # the table's SSD tier: one store per run
        overrides = overrides + [f"model.embedding.store.path={run_dir}-store"]
    return subprocess.Popen([sys.executable, "-m", "genrec.train", *overrides, f"hydra.run.dir={run_dir}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_environment(),
                            start_new_session=True)  # its own process group: the kill takes every rank


def _finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]


def _kill_after(proc: subprocess.Popen, run_dir: Path, step: int, delay: float) -> int:
    """SIGKILL the run's process group ``delay`` seconds after its ``last.ckpt`` reached global step ``step``.
    Returns the global step of the checkpoint the run will resume from."""
    last, seen = run_dir / "checkpoints" / "last.ckpt", None
    while True:
        assert proc.poll() is None, f"the run ended before step {step}: {proc.stderr.read()[-3000:]}"
        try:
            stat = last.stat()
        except FileNotFoundError:  # not written yet, or a distributed checkpoint folder being swapped in
            stat = None
        if stat is not None and (stat.st_mtime_ns, stat.st_size) != seen:
            seen = (stat.st_mtime_ns, stat.st_size)
            try:
                if read_meta(last)["global_step"] >= step:
                    break
            except DataError:  # a distributed checkpoint folder being swapped in
                continue
        time.sleep(0.02)
    time.sleep(delay)
    assert proc.poll() is None, "the run ended before the kill"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return read_meta(last)["global_step"]


def _resume(run_dir: Path) -> None:
    """Resume as the reproduce scripts do: the run folder relative to the working directory."""
    proc = subprocess.run([sys.executable, "-m", "genrec.train", f"resume_from={run_dir.name}"], capture_output=True,
                          text=True, timeout=600, env=_environment(), cwd=run_dir.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _assert_same_run(reference: Path, resumed: Path, resumed_from_step: int) -> None:
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (reference, resumed))
    assert 0 < resumed_from_step < a["steps_run"] and b["resumes"][0]["global_step"] == resumed_from_step
    assert b["metrics"] == a["metrics"]  # bit-identical: == on the floats
    assert b["best_epoch"] == a["best_epoch"] and b["steps_run"] == a["steps_run"]
    assert b["checkpoints"]["best"]["global_step"] == a["checkpoints"]["best"]["global_step"]
    # telemetry keeps no state in checkpoints: the resumed process counts the steps it trained itself
    assert b["telemetry"]["steps"] == b["steps_run"] - resumed_from_step
    log_a, log_b = (pd.read_csv(d / "logs" / "metrics.csv") for d in (reference, resumed))
    for column in [c for c in log_a if c.startswith("val/")] + ["train/loss_step"]:
        rows_a, rows_b = (log.dropna(subset=[column])[["step", column]].reset_index(drop=True)
                          for log in (log_a, log_b))
        if column == "train/loss_step":  # the step logged right after a mid-epoch checkpoint is not logged again
            rows_a = rows_a[rows_a["step"] != resumed_from_step - 1].reset_index(drop=True)
            rows_b = rows_b[rows_b["step"] != resumed_from_step - 1].reset_index(drop=True)
        pd.testing.assert_frame_equal(rows_a, rows_b, check_exact=True)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder with the data cache and a SID table of the tiny dataset's items (random codes, 8 x 8 x 4)."""
    tmp = tmp_path_factory.mktemp("resume")
    tiny_sid_table(tmp / "sid", cache_dir=tmp / "cache")
    return tmp


def _overrides(kind: str, workdir: Path) -> list[str]:
    extra = [f"sid_table={workdir / 'sid'}"] if kind == "sid_gpt" else []
    return BASE + KINDS[kind] + extra + [f"data.cache_dir={workdir / 'cache'}"]


@pytest.fixture(scope="module")
def uninterrupted(workdir):
    """The reference run of each kind, trained once."""
    runs = {}

    def get(kind: str) -> Path:
        if kind not in runs:
            runs[kind] = workdir / f"{kind}-uninterrupted"
            _finish(_start(runs[kind], _overrides(kind, workdir)))
        return runs[kind]
    return get


@pytest.mark.parametrize("kind, kill_step", [
    ("sasrec", 4),    # mid-epoch: the step checkpoint inside the first epoch (the default suite's case)
    pytest.param("sasrec", 20, marks=pytest.mark.slow),  # the checkpoint after the second epoch's validation
    pytest.param("hstu", 12, marks=pytest.mark.slow),     # mid-epoch, second epoch
    pytest.param("sid_gpt", 8, marks=pytest.mark.slow),   # mid-epoch, first epoch
    # mid-epoch, second epoch: tier 0, the store and the admission state come back
    pytest.param("sasrec_dynamic", 40, marks=pytest.mark.slow),
    pytest.param("sasrec_dynamic_prefetch", 42, marks=pytest.mark.slow),  # mid-epoch, second epoch, prefetching
])
def test_killed_and_resumed_equals_uninterrupted(kind, kill_step, workdir, uninterrupted, tmp_path):
    reference = uninterrupted(kind)
    run_dir = tmp_path / "run"
    proc = _start(run_dir, _overrides(kind, workdir))
    delay = random.Random(f"{kind}-{kill_step}").uniform(0.0, 0.1)
    resumed_from = _kill_after(proc, run_dir, kill_step, delay)
    _resume(run_dir)
    _assert_same_run(reference, run_dir, resumed_from)


@pytest.mark.dist
@pytest.mark.slow
def test_two_process_sharded_run_killed_and_resumed_equals_uninterrupted(workdir, tmp_path):
    """Row-wise sharded item table over 2 gloo processes (distributed checkpoint folders); the kill takes both."""
    overrides = _overrides("sasrec", workdir) + ["trainer.accelerator=cpu", "trainer.devices=2", "sharding=row_wise"]
    reference, run_dir = tmp_path / "uninterrupted", tmp_path / "run"
    _finish(_start(reference, overrides))
    proc = _start(run_dir, overrides)
    resumed_from = _kill_after(proc, run_dir, 8, random.Random("sharded").uniform(0.0, 0.1))
    _resume(run_dir)
    _assert_same_run(reference, run_dir, resumed_from)
