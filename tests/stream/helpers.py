"""Shared pieces of the stream tests: a tiny synthetic stream, composing ``stream.yaml``, a real redis-server on a
free port, and reading a finished run's state for comparisons."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from genrec.conf import compose_config
from genrec.data.synthetic import generate_synthetic
from genrec.storage.stores import open_store
from genrec.stream.replay import event_frame

#: a tiny model and fast checkpoints (HSTU-free defaults of the stream tests); micro-batches in several steps
TINY = ["model.dim=16", "model.encoder.num_layers=1", "data.max_len=12", "stream.batch_size=64",
        "stream.step_targets=24", "stream.stop_when_idle=true", "stream.log_every_events=500",
        "checkpoint.every_events=256", "model.loss.num_negatives=16", "prequential.window_events=200", "threads=1"]


def tiny_events(users: int = 120, items: int = 80, seed: int = 0) -> pd.DataFrame:
    """A small synthetic log as a stream: one event per row in timestamp order (about 20 events per user)."""
    return event_frame(generate_synthetic(num_users=users, num_items=items, num_clusters=4, seed=seed))


def compose_stream(overrides: list[str]):
    return compose_config("stream", overrides=overrides)


def redis_server_path() -> str | None:
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A real redis-server on a free local port, without persistence, in ``folder``; stopped by :meth:`stop`."""

    def __init__(self, folder: Path):
        path = redis_server_path()
        if path is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server); the Redis tests need a real "
                        "server")
        self.port = free_port()
        folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([path, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(folder)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        import redis

        self.client = redis.Redis(port=self.port, decode_responses=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


def final_state(run_dir: Path) -> dict:
    """The newest checkpoint of a run: model weights, optimizer state, the item table's arrays and the user
    histories, for comparing two runs."""
    checkpoint = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    state = torch.load(checkpoint / "trainer.pt", weights_only=True)
    table = dict(np.load(checkpoint / "tables" / "item_table" / "rank0" / "state.npz"))
    store = open_store("rocksdb", checkpoint / "users", 8, read_only=True)
    records = {}
    for ids, raw in store.scan():
        for key, row in zip(ids.tolist(), raw):
            records[key] = bytes(row)
    store.close()
    return {"checkpoint": checkpoint.name, "model": state["model"], "optimizer": state["optimizer"],
            "rng": state["rng"], "counts": state["counts"], "table": table, "users": records,
            "metrics": json.loads((run_dir / "metrics.json").read_text()) if (run_dir / "metrics.json").exists()
            else None}


def assert_same_state(a: dict, b: dict) -> None:
    """Bit-identical model, optimizer, random state, item table and user histories."""
    assert a["counts"] == b["counts"]
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        if isinstance(a["model"][key], torch.Tensor):
            assert torch.equal(a["model"][key], b["model"][key]), key
    for (ka, va), (kb, vb) in zip(a["optimizer"]["state"].items(), b["optimizer"]["state"].items()):
        for name in va:
            assert torch.equal(va[name], vb[name]), (ka, name)
    assert torch.equal(a["rng"], b["rng"])
    assert a["table"].keys() == b["table"].keys()
    for key in a["table"]:
        assert np.array_equal(a["table"][key], b["table"][key]), key
    assert a["users"] == b["users"]
