"""Two torchrun "nodes" on this machine (``NNODES=2``, node ranks 0 and 1, one process each, rendezvous on
127.0.0.1) started through ``scripts/launch_dist.sh`` train a row-wise sharded SASRec into one shared run folder;
the result equals one process training the same global batches.

Equal global batches: each node's ``data.batch_size`` is half the single process's, and :class:`TrainBatchSampler`
gives process ``r`` every 2nd example of the same ``(seed, epoch)`` permutation, so the two processes' batches
together are the single process's batch (300 training users: no padding). Dropout is off (each process draws its
own random numbers) and the loss is the full softmax (no sampled negatives).

The attention's key bias is left out of the weight comparison: adding it shifts every logit of a query's row by the
same amount, which the softmax ignores, so its true gradient is zero and what it gets is rounding noise (~1e-9)
that Adam's normalisation turns into steps of ~lr. It differs between any two summation orders (measured: 1e-4
here, every other weight within 2e-7) and has no effect on any score, which the equal metrics check.

The same amplification can hit a single weight whose gradient is near zero at some step (measured on a later machine:
one value-projection entry differed by 1.5e-5, 12 other weights of 6,128 by 1e-6 to 2e-6, the rest less), so the
weights are checked twice: every weight within 1e-4, and fewer than 0.1% of them more than 2e-6 apart (a wrong batch
split or a missed gradient all-reduce moves most weights by far more).
"""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from genrec.training.builders import load_run
from tests.distributed.test_sharded_cli import LAUNCH_VARIABLES
from tests.test_train_cli import TINY

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # ~1 min on the busy 2-core machine

ROOT = Path(__file__).resolve().parents[2]
GLOBAL_BATCH = 64
COMMON = [*TINY, "trainer.accelerator=cpu", "sharding=row_wise", "model.encoder.dropout=0.0", "threads=1"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(node_rank: int, port: int, run_dir: Path, cache: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    env.update(NNODES="2", NODE_RANK=str(node_rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               RUN_DIR=str(run_dir), PYTHON=sys.executable)
    return subprocess.Popen(["bash", str(ROOT / "scripts" / "launch_dist.sh"), "torchrun", "1", *COMMON,
                             f"data.batch_size={GLOBAL_BATCH // 2}", f"data.cache_dir={cache}"],
                            cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _single_process(run_dir: Path, cache: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    proc = subprocess.run([sys.executable, "-m", "genrec.train", *COMMON,
                           f"data.batch_size={GLOBAL_BATCH}", f"data.cache_dir={cache}", f"hydra.run.dir={run_dir}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _weights(run_dir: Path, checkpoint: str) -> dict[str, torch.Tensor]:
    """The checkpoint's weights, without the attention's key biases (see the module docstring)."""
    weights = {k: v for k, v in load_run(run_dir, checkpoint)[2].state_dict().items() if isinstance(v, torch.Tensor)}
    for key in [k for k in weights if k.endswith("attn.qkv.bias")]:
        query, _, value = weights.pop(key).chunk(3)
        weights[key + "[query]"], weights[key + "[value]"] = query, value
    return weights


def test_two_torchrun_nodes_equal_one_process(tmp_path):
    cache, two_nodes, one = tmp_path / "cache", tmp_path / "two_nodes", tmp_path / "one"
    _single_process(one, cache)  # also fills the data cache both nodes then read
    port = _free_port()
    logs = [tmp_path / f"node{rank}.log" for rank in (0, 1)]
    nodes = [_launch(rank, port, two_nodes, cache, logs[rank]) for rank in (0, 1)]
    for rank, node in enumerate(nodes):
        try:
            assert node.wait(timeout=900) == 0, f"node {rank} failed:\n" + logs[rank].read_text()[-4000:]
        finally:
            for other in nodes:
                if other.poll() is None:
                    other.kill()

    for rank in (0, 1):  # one process on each node, node 1's process is global rank 1
        assert f"GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/2" in logs[rank].read_text()
    ran, reference = (json.loads((d / "metrics.json").read_text()) for d in (two_nodes, one))
    assert ran["processes"] == 2 and reference["processes"] == 1
    assert any(line.startswith("item_table") and "row_wise" in line for line in ran["sharding_plan"])
    assert ran["epochs_run"] == reference["epochs_run"] == 2
    for split in ("valid", "test"):
        assert ran["metrics"][split].keys() == reference["metrics"][split].keys()
        for name, value in reference["metrics"][split].items():
            assert ran["metrics"][split][name] == pytest.approx(value, abs=1e-5), (split, name)
    for checkpoint in ("best", "last"):
        got, expected = _weights(two_nodes, checkpoint), _weights(one, checkpoint)
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            torch.testing.assert_close(got[key], value, atol=1e-4, rtol=0, msg=f"{checkpoint}: {key}")
        differences = torch.cat([(got[key] - value).abs().flatten() for key, value in expected.items()])
        assert (differences > 2e-6).float().mean() < 1e-3, f"{checkpoint}: more than 0.1% of weights differ > 2e-6"
