"""The stream trainer in one process: a run over event files, its outputs, a stopped-and-resumed run bit-identical
to an uninterrupted one, bad input counted and dead-lettered, hot exports with deltas, the CLI's checks."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pandas as pd
import pytest
import torch

from genrec.embedding.dynamic import DynamicItemEmbedding
from genrec.embedding.dynamic.export import apply_export, read_export
from genrec.errors import ConfigError, UserError
from genrec.export.manifest import validate_manifest
from genrec.runs import RunFolder
from genrec.stream import cli
from genrec.stream.files import write_event_files
from genrec.stream.offline import train_offline, user_sequences
from tests.stream.helpers import TINY, assert_same_state, compose_stream, final_state, tiny_events

#: a tier 2 and a tier 0 smaller than the catalogue: admission, eviction and the store in every run
SMALL_TABLE = ["model.embedding.capacity=300", "model.embedding.pinned_batches=1"]


def _run(tmp_path, name, overrides, events_dir=None):
    """A run of the tiny model on a small tier 0 with an SSD tier; from the event files in ``events_dir``, or from
    the source the overrides name."""
    run_dir = tmp_path / name
    source = [f"source.path={events_dir}", "source.poll_seconds=0.05",
              f"source.commit_path={tmp_path / (name + '-commit.json')}"] if events_dir else []
    cfg = compose_stream(TINY + SMALL_TABLE + source + [f"model.embedding.store.path={tmp_path / (name + '-store')}",
                                                        *overrides])
    return run_dir, cli.run(cfg, run_dir)


def _resume(run_dir, overrides):
    cfg = cli.resumed_config(RunFolder(run_dir).config(), overrides + [f"resume_from={run_dir}"])
    return cli.run(cfg, run_dir)


@pytest.fixture(scope="module")
def stream_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("events")
    frame = tiny_events(items=600)  # 571 distinct items, tier 0 holds 300
    write_event_files(frame, folder, 700, "parquet")
    return folder, frame


def test_a_run_trains_on_every_event_and_writes_its_folder(tmp_path, stream_files):
    folder, frame = stream_files
    run_dir, metrics = _run(tmp_path, "run", ["stream.ledger=true"], folder)
    counts = metrics["counts"]
    assert counts["records"] == counts["accepted"] == len(frame)
    # every event once in the ledger; a new user's first event starts its history, every other one is a target
    ledger = (run_dir / "ledger.txt").read_text().split()
    assert sorted(ledger) == sorted(frame["event_id"])
    assert counts["targets"] == len(frame) - frame["user_id"].nunique() == counts["accepted"] - counts["cold"]
    preq = metrics["prequential"]
    assert preq["evaluated"] == counts["targets"]
    assert set(preq["all"]) == {"sasrec", "most_popular", "transitions"}
    # windows: the complete ones hold window_events targets each; the plot is drawn
    windows = pd.read_csv(run_dir / "logs" / "prequential.csv")
    full = windows[(windows.window == "events") & (windows.complete == 1)]
    assert (full.events == 200).all() and len(full) == 3 * (counts["targets"] // 200)
    assert (run_dir / "prequential.png").stat().st_size > 0
    table = metrics["item_table"]
    assert table["evicted"] > 0 and table["hits_tier2"] > 0  # the table was smaller than the catalogue
    # the source's committed offset is the end of the stream
    committed = json.loads((tmp_path / "run-commit.json").read_text())
    assert committed["file"] == sorted(p.name for p in folder.glob("*.parquet"))[-1]
    assert committed["row"] == len(frame) % 700 or committed["row"] == 700


def test_a_stopped_run_resumes_bit_identical(tmp_path, stream_files):
    folder, frame = stream_files
    whole, _ = _run(tmp_path, "whole", [], folder)
    # stopped at a batch boundary (max_events a multiple of the batch size), then resumed to the end
    parts, first = _run(tmp_path, "parts", ["stream.max_events=1024"], folder)
    assert first["counts"]["records"] == 1024
    second = _resume(parts, ["stream.max_events=null"])
    assert second["counts"]["records"] == len(frame)
    assert_same_state(final_state(whole), final_state(parts))
    a, b = (pd.read_csv(d / "logs" / "prequential.csv") for d in (whole, parts))
    a, b = (x[x.complete == 1].reset_index(drop=True) for x in (a, b))
    pd.testing.assert_frame_equal(a, b)  # the closed windows: written once, the same


def test_prefetching_the_next_steps_rows_changes_nothing(tmp_path, stream_files, monkeypatch):
    """prefetch_depth=1: a step's rows are mapped in a background thread while the step before it trains (several
    steps per micro-batch, tier 0 smaller than the catalogue); the run ends in the state of the run without
    prefetching (model, optimizer, random state, table, histories) with the same prequential log."""
    folder, _ = stream_files
    submitted = []
    prefetch = DynamicItemEmbedding.prefetch
    monkeypatch.setattr(DynamicItemEmbedding, "prefetch",
                        lambda self, *args: (submitted.append(len(args[1])), prefetch(self, *args))[1])
    runs = {depth: _run(tmp_path, f"depth{depth}", ["model.embedding.pinned_batches=2",
                                                    f"model.embedding.prefetch_depth={depth}"], folder)
            for depth in (0, 1)}
    assert len(submitted) == runs[1][1]["counts"]["steps"] > runs[1][1]["counts"]["records"] // 64  # every step
    assert_same_state(*(final_state(run_dir) for run_dir, _ in runs.values()))
    logs = [pd.read_csv(run_dir / "logs" / "prequential.csv") for run_dir, _ in runs.values()]
    pd.testing.assert_frame_equal(*logs)


def test_a_frozen_run_ranks_only_from_from_time_and_changes_no_weight(tmp_path, stream_files):
    folder, frame = stream_files
    split = int(frame["timestamp"].iloc[3 * len(frame) // 4])
    run_dir, metrics = _run(tmp_path, "frozen", ["stream.train=false", f"prequential.from_time={split}",
                                                 "checkpoint.every_events=0"], folder)
    counts = metrics["counts"]
    assert counts["accepted"] == len(frame) and counts["steps"] == 0
    # ranked: the targets (every event but a user's first) at or after the split
    targets = ~frame["user_id"].duplicated()
    assert metrics["prequential"]["evaluated"] == int(((frame["timestamp"] >= split) & ~targets).sum())
    start, end = sorted((run_dir / "checkpoints").glob("step-*"))  # the starting checkpoint and the final one
    a, b = (torch.load(c / "trainer.pt", weights_only=True)["model"] for c in (start, end))
    assert all(torch.equal(a[k], b[k]) for k in a if isinstance(a[k], torch.Tensor))
    a, b = (np.load(c / "tables" / "item_table" / "rank0" / "state.npz") for c in (start, end))
    assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)  # the table: not touched


def test_offline_training_sees_every_target_once_per_epoch_and_is_seeded(tmp_path, stream_files):
    _, frame = stream_files
    sequences = user_sequences(frame)
    assert sum(len(items) for items, _ in sequences) == len(frame)
    learners = []
    for name in ("a", "b"):
        cfg = compose_stream(TINY + [f"model.embedding.store.path={tmp_path / name}"])
        learner = cli.build_learner(cfg)
        fit = train_offline(learner, sequences, epochs=2, batch_users=32, max_len=12, seed=3)
        assert fit["targets"] == 2 * (len(frame) - len(sequences))
        learners.append(learner)
    a, b = (x.model.state_dict() for x in learners)
    assert all(torch.equal(a[k], b[k]) for k in a if isinstance(a[k], torch.Tensor))
    for x in learners:
        x.embedding.close()


def test_the_same_events_from_redis_train_the_same_model(tmp_path, stream_files, redis_server):
    from genrec.stream.redis_streams import publish

    folder, frame = stream_files
    publish(redis_server.client, "same-events", frame)
    files, _ = _run(tmp_path, "files", [], folder)
    redis_run, metrics = _run(tmp_path, "redis", ["source=redis", f"source.url={redis_server.url}",
                                                  "source.stream=same-events", "source.block_ms=100"])
    assert metrics["counts"]["accepted"] == len(frame)
    assert redis_server.client.xpending("same-events", "genrec")["pending"] == 0  # everything acknowledged
    assert_same_state(final_state(files), final_state(redis_run))


def test_bad_input_is_counted_and_dead_lettered(tmp_path):
    folder = tmp_path / "events"
    folder.mkdir()
    lines = ['{"event_id": "a", "user_id": 1, "item_id": 10, "timestamp": 100, "kind": "click"}',
             '{"event_id": "b", "user_id": 1, "item_id": 11, "timestamp": 101, "kind": "click"}',
             'not json at all',
             '{"event_id": "c", "user_id": 1, "item_id": 12, "kind": "click"}',
             '{"event_id": "d", "user_id": 2, "item_id": 10, "timestamp": 50, "kind": "hover"}',
             '{"event_id": "b", "user_id": 2, "item_id": 13, "timestamp": 102, "kind": "click"}',
             '{"event_id": "e", "user_id": 1, "item_id": 13, "timestamp": 90, "kind": "click"}',
             '{"event_id": "f", "user_id": "u-9", "item_id": "sku-1", "timestamp": 103, "kind": "view"}']
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "b.csv").write_text("event_id,user_id,item_id,timestamp,kind\ng,2,11,110,click\nh,2,12\n")
    run_dir, metrics = _run(tmp_path, "run", ["stream.schema.type=kind", "stream.schema.event_types=[click,view]",
                                              "stream.batch_size=4", "stream.ledger=true"], folder)
    counts = metrics["counts"]
    expected = {"malformed": 3, "unknown_type": 1, "duplicate": 1, "out_of_order": 1}
    assert {r: counts[f"rejected_{r}"] for r in expected} == expected
    assert counts["accepted"] == 4 and counts["records"] == 10
    letters = [json.loads(line) for line in (run_dir / "dead_letters.jsonl").read_text().splitlines()]
    assert [(d["position"], d["reason"]) for d in letters] == [
        ("a.jsonl:3", "malformed"), ("a.jsonl:4", "malformed"), ("a.jsonl:5", "unknown_type"),
        ("a.jsonl:6", "duplicate"), ("a.jsonl:7", "out_of_order"), ("b.csv:3", "malformed")]
    assert letters[0]["record"] == "not json at all"
    assert "timestamp: missing" in letters[1]["detail"]
    assert sorted((run_dir / "ledger.txt").read_text().split()) == ["a", "b", "f", "g"]


def test_a_late_file_is_reported_not_read(tmp_path):
    folder = tmp_path / "events"
    frame = tiny_events(users=20, items=30)
    write_event_files(frame.iloc[:100], folder, 50, "csv", prefix="b")

    log = tmp_path / "run" / "logs" / "stream.csv"

    def read_all() -> bool:  # the log's records column (first) has reached the 100 events of the b files
        rows = log.read_text().splitlines()[1:] if log.exists() else []
        return any(int(row.split(",")[0]) >= 100 for row in rows if row)

    def produce():  # once the trainer has read the b files and waits for more: a file sorting before them, then later
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not read_all():
            time.sleep(0.05)
        write_event_files(frame.iloc[100:150], folder, 50, "csv", prefix="a")
        write_event_files(frame.iloc[150:200], folder, 50, "csv", prefix="c")

    producer = threading.Thread(target=produce)
    producer.start()
    run_dir, metrics = _run(tmp_path, "run", ["stream.stop_when_idle=false", "stream.max_events=151",
                                              "stream.log_every_events=50"], folder)
    producer.join()
    counts = metrics["counts"]
    assert counts["rejected_late_file"] == 1 and counts["accepted"] == 150 and counts["records"] == 151
    letters = [json.loads(line) for line in (run_dir / "dead_letters.jsonl").read_text().splitlines()]
    assert letters == [{"position": "a-000000.csv", "reason": "late_file", "detail": letters[0]["detail"],
                        "record": {"file": "a-000000.csv"}, "events": 100}]


def test_hot_exports_are_versioned_with_deltas(tmp_path, stream_files):
    folder, frame = stream_files
    run_dir, metrics = _run(tmp_path, "run", ["export.every_events=640", "export.keep=2"], folder)
    versions = sorted(p.name for p in (run_dir / "exports").iterdir())
    count = len(frame) // 640
    assert versions == [f"v{v:06d}" for v in (count - 1, count)]  # retention: the newest two
    old, new = (json.loads((run_dir / "exports" / v / "manifest.json").read_text()) for v in versions)
    validate_manifest(new)
    assert new["stream"]["previous"] == old["stream"]["version"] == new["stream"]["version"] - 1
    assert new["stream"]["delta_since"] == old["stream"]["table_version"]
    assert new["artifacts"]["user_tower"]["parity"]["passed"]
    assert new["source"]["checkpoint"].startswith("checkpoints/step-")
    # the old version's rows + the new version's delta = the new version's rows
    ids, rows, _, _ = read_export(run_dir / "exports" / versions[0] / "item_table_rows")
    ids, rows, version = apply_export(ids, rows, run_dir / "exports" / versions[1] / "item_table_delta",
                                      old["stream"]["table_version"])
    full_ids, full_rows, _, _ = read_export(run_dir / "exports" / versions[1] / "item_table_rows")
    assert version == new["stream"]["table_version"]
    assert np.array_equal(ids, full_ids) and np.array_equal(rows, full_rows)
    assert json.loads((run_dir / "exports" / versions[1] / "item_ids.json").read_text())[1:] == full_ids.tolist()


@pytest.mark.parametrize("override, message", [
    ("stream.batch_size=0", "stream.batch_size: got 0, expected a positive integer"),
    ("prequential.baselines=[oracle]", "prequential.baselines: unknown baseline(s) ['oracle']"),
    ("loss@model.loss=full", "model.loss: the full softmax scores every item ID"),
    ("embedding@model.embedding=static", "model.embedding: the stream trainer keys items by raw ID"),
    ("stream.schema.event_types=[click]", "stream.schema.event_types: needs the event-type field"),
    ("model.embedding.prefetch_depth=2", "model.embedding.prefetch_depth: must be in [0, pinned_batches=2)"),
])
def test_bad_config_values_name_their_key(tmp_path, override, message):
    cfg = compose_stream([o for o in TINY if "loss" not in o] + [f"source.path={tmp_path}", override])
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        cli.run(cfg, tmp_path / "run")


def test_a_folder_holding_a_run_is_refused_and_resume_keeps_the_config(tmp_path, stream_files):
    folder, _ = stream_files
    run_dir, _ = _run(tmp_path, "run", ["stream.max_events=64"], folder)
    with pytest.raises(UserError, match="already holds a run"):
        _run(tmp_path, "run", [], folder)
    with pytest.raises(ConfigError, match="model.dim: a resumed stream run keeps its config.yaml"):
        cli.resumed_config(RunFolder(run_dir).config(), ["model.dim=32"])
