"""The training CLI with sharded tables: trains, evaluates, writes a distributed checkpoint, and genrec-eval
reloads that checkpoint in one unsharded process with the same metrics."""
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from genrec import evaluate as eval_entry
from genrec import train as train_entry
from genrec.dist.checkpoint import is_distributed_checkpoint
from genrec.conf import compose_config
from tests.test_train_cli import TINY

pytestmark = pytest.mark.dist

#: set by an earlier in-process Lightning run; a child that inherits LOCAL_RANK thinks it was launched externally
LAUNCH_VARIABLES = {"MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"}


def _reload_in_one_process(run_dir):
    cfg = compose_config("eval", overrides=[f"run_dir={run_dir}", "baselines=[]"])
    return eval_entry.run(cfg)["models"]["sasrec"]["metrics"]


def _check_run(run_dir, processes: int):
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert saved["processes"] == processes and saved["config"]["sharding"]["type"] == "row_wise"
    assert any(line.startswith("item_table") and "row_wise" in line for line in saved["sharding_plan"])
    for name in ("best", "last"):
        assert is_distributed_checkpoint(run_dir / "checkpoints" / f"{name}.ckpt")
    reloaded = _reload_in_one_process(run_dir)
    for split in ("valid", "test"):
        assert reloaded[split] == pytest.approx(saved["metrics"][split], abs=1e-6)
    return saved


def test_one_process_with_a_sharded_table(tmp_path):
    """``sharding=row_wise`` on one device: DistributedModelParallel at world size 1 (asked for explicitly)."""
    cfg = compose_config("train", overrides=TINY + [f"data.cache_dir={tmp_path / 'cache'}", "trainer.accelerator=cpu",
                                                    "sharding=row_wise"])
    train_entry.run(cfg, tmp_path / "run")
    _check_run(tmp_path / "run", processes=1)


@pytest.mark.slow
def test_two_processes_through_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "genrec.train", *TINY, f"data.cache_dir={tmp_path / 'cache'}",
                           f"hydra.run.dir={run_dir}", "trainer.accelerator=cpu", "trainer.devices=2",
                           "sharding=row_wise"], capture_output=True, text=True, timeout=900,
                          env={k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sharding plan (2 processes)" in proc.stdout + proc.stderr
    # equal metrics: the 2-process evaluation scored every user exactly once, like one process does
    _check_run(run_dir, processes=2)

    # resume training in ONE process from the 2-process checkpoint (weights, fused and dense optimizer, loops), in
    # the run's own folder: its log is appended to
    cfg = compose_config("train", overrides=TINY + [f"data.cache_dir={tmp_path / 'cache'}", "trainer.accelerator=cpu",
                                                    "sharding=row_wise", "trainer.max_epochs=3",
                                                    f"resume_from={run_dir}"])
    resumed = train_entry.run(cfg, run_dir)
    assert resumed["epochs_run"] == 3 and resumed["processes"] == 1
    logged = pd.read_csv(run_dir / "logs" / "metrics.csv").dropna(subset=["train/loss_epoch"])
    assert logged["epoch"].tolist() == [0, 1, 2]  # epochs 0 and 1 by two processes, epoch 2 by one
