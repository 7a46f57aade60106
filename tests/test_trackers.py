"""Experiment trackers as loggers (genrec/conf/logger): a run recorded in a real MLflow tracking store (SQLite) and
read back with MLflow's client; a Weights & Biases offline run read back from its files; a resumed run continues
the same MLflow run and the same W&B run ID."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from genrec import train as train_entry
from genrec.conf import compose_config
from genrec.training.loggers import TRACKERS_FILE, absolute_store
from tests.conftest import TINY_RUN

mlflow = pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e .[trackers])")
wandb = pytest.importorskip("wandb", reason="wandb is not installed (pip install -e .[trackers])")

from mlflow.tracking import MlflowClient  # noqa: E402
from wandb.proto import wandb_internal_pb2  # noqa: E402

#: 10 steps per epoch, a telemetry row every 2 steps
RUN = TINY_RUN + ["data.batch_size=32", "trainer.log_every_n_steps=2", "baselines=[most_popular]", "threads=1"]


def test_a_run_is_recorded_in_an_mlflow_store_and_read_back(tmp_path, monkeypatch):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    cfg = compose_config("train", overrides=RUN + [f"data.cache_dir={tmp_path / 'cache'}", "logger=[csv,mlflow]",
                                                   "logger.mlflow.run_name=tiny"])
    run_dir = tmp_path / "run"
    metrics = train_entry.run(cfg, run_dir)

    recorded = json.loads((run_dir / TRACKERS_FILE).read_text())["mlflow"]
    assert recorded["tracking_uri"] == store
    client = MlflowClient(store)
    run = client.get_run(recorded["run_id"])
    assert run.info.run_name == "tiny" and run.info.status == "FINISHED"
    assert client.get_experiment(run.info.experiment_id).name == "genrec"
    # the resolved config as parameters (nested keys joined by '/')
    assert run.data.params["model/dim"] == "16" and run.data.params["seed"] == "0"
    # every logged training loss, at the steps of the CSV log; '@' dropped from names by Lightning
    losses = client.get_metric_history(run.info.run_id, "train/loss_step")
    csv_rows = [line.split(",") for line in (run_dir / "logs" / "metrics.csv").read_text().splitlines()]
    header = csv_rows[0]
    logged = sorted((int(row[header.index("step")]), float(row[header.index("train/loss_step")]))
                    for row in csv_rows[1:] if row[header.index("train/loss_step")])
    assert sorted((m.step, m.value) for m in losses) == logged and len(logged) == 5
    assert run.data.metrics["test/ndcg10"] == pytest.approx(metrics["metrics"]["test"]["ndcg@10"])
    telemetry = client.get_metric_history(run.info.run_id, "telemetry/samples_per_s")
    assert [m.step for m in telemetry] == [1, 3, 5, 7, 9] and all(m.value > 0 for m in telemetry)


def test_absolute_store():
    assert absolute_store("sqlite:///mlflow.db") == f"sqlite:///{Path('mlflow.db').resolve()}"
    assert absolute_store("sqlite:////abs/mlflow.db") == "sqlite:////abs/mlflow.db"
    assert absolute_store("file:mlruns") == f"file:{Path('mlruns').resolve()}"
    assert absolute_store("http://localhost:5000") == "http://localhost:5000"


def wandb_records(path: Path) -> list[wandb_internal_pb2.Record]:
    """The records of a W&B run file (``run-<id>.wandb``): a 7-byte header (``:W&B``, magic, version), then
    LevelDB's log format (32 KiB blocks; records of checksum (4), length (2), type (1: full, 2: first, 3: middle,
    4: last) and data), each record a ``wandb_internal_pb2.Record``."""
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", f"{path} is no W&B run file"
    records, offset, pending = [], 7, b""
    while offset + 7 <= len(data):
        room = block - offset % block
        if room < 7:  # a block's tail too short for a header is padding
            offset += room
            continue
        _, length, kind = struct.unpack("<IHB", data[offset:offset + 7])
        if length == 0 and kind == 0:  # zero padding at the end of a block or of the file
            offset += room
            continue
        pending += data[offset + 7:offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(run_file: Path) -> list[dict]:
    rows = []
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def _environment(tmp_path: Path) -> dict[str, str]:
    launch = {"MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"}
    env = {k: v for k, v in os.environ.items() if k not in launch}
    env.update(MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}", WANDB_SILENT="true",
               WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"), WANDB_CACHE_DIR=str(tmp_path / "wandb-cache"))
    return env


def _train(args: list[str], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "genrec.train", *args], capture_output=True, text=True,
                          timeout=900, env=_environment(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_wandb_offline_run_and_a_resume_continue_the_same_tracker_runs(tmp_path):
    """genrec-train with MLflow and W&B (offline), then resumed for a second epoch: one MLflow run holds both
    epochs; W&B writes a second offline folder under the same run ID; the offline files hold the logged rows."""
    run_dir = tmp_path / "run"
    _train(RUN + [f"data.cache_dir={tmp_path / 'cache'}", "logger=[csv,mlflow,wandb]", f"hydra.run.dir={run_dir}"],
           tmp_path)
    first = json.loads((run_dir / TRACKERS_FILE).read_text())
    _train([f"resume_from={run_dir}", "trainer.max_epochs=2"], tmp_path)
    assert json.loads((run_dir / TRACKERS_FILE).read_text()) == first

    client = MlflowClient(first["mlflow"]["tracking_uri"])
    assert len(client.search_runs([client.get_experiment_by_name("genrec").experiment_id])) == 1
    losses = client.get_metric_history(first["mlflow"]["run_id"], "train/loss_step")
    assert sorted(m.step for m in losses) == list(range(1, 20, 2))  # both epochs in one run

    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(p.name.endswith(first["wandb"]["id"]) for p in offline)
    for folder, epoch in zip(offline, (0, 1)):
        (run_file,) = folder.glob("run-*.wandb")
        run = next(r.run for r in wandb_records(run_file) if r.WhichOneof("record_type") == "run")
        assert run.run_id == first["wandb"]["id"] and run.project == "genrec"
        history = wandb_history(run_file)
        steps = [row["trainer/global_step"] for row in history if "train/loss_step" in row]
        assert steps == list(range(10 * epoch + 1, 10 * epoch + 10, 2))
        assert any("telemetry/positions_per_s" in row for row in history)
        if epoch == 1:
            assert any("test/ndcg@10" in row for row in history)
