"""Exactly-once with real processes: ``genrec-stream`` is SIGKILLed again and again — at every named point of a
micro-batch and of a checkpoint (inside the checkpoint write, between the checkpoint and the commit to the source,
during an export) and at seeded random moments — and restarted each time with ``resume_from``. At the end every
event was trained on exactly once (the ledger counts each accepted event ID once, the dead letters each rejected
record once), the source has everything committed, and the model, optimizer, random state, item table and user
histories are bit-identical to an uninterrupted run's. Both sources: event files and Redis Streams.

The kill is a real SIGKILL of the process, sent by this test; a test hook (genrec/stream/hooks.py) makes the
trainer stop at a named point and write a marker file, so that the kill lands exactly there.
"""
from __future__ import annotations

import collections
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

from genrec.stream.files import write_event_files
from genrec.stream.hooks import POINTS
from genrec.stream.redis_streams import publish
from tests.stream.helpers import TINY, assert_same_state, final_state, tiny_events

REPO = Path(__file__).resolve().parents[2]
#: (point, which time it is reached after a restart): every point, some of them more than once
KILLS = [("batch_read", 3), ("checkpoint_tables", 2), ("batch_trained", 5), ("checkpoint_rename", 1),
         ("export_written", 1), ("checkpoint_durable", 2), ("committed", 1), ("checkpoint_durable", 1),
         ("random", 0), ("random", 0)]
SETTINGS = TINY + ["model.embedding.capacity=300", "model.embedding.pinned_batches=1", "stream.ledger=true",
                   "export.every_events=1024", "export.keep=1", "checkpoint.every_events=320"]


def _stream() -> pd.DataFrame:
    """A small stream with bad records in it: three events sent twice (the copies are duplicates)."""
    frame = tiny_events(items=600)
    again = frame.iloc[[10, 500, 1500]].copy()
    return pd.concat([frame.iloc[:600], again.iloc[:1], frame.iloc[600:1600], again.iloc[1:], frame.iloc[1600:]],
                     ignore_index=True)


def _start(args: list[str], pause: str | None = None, marker: Path | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENREC_STREAM_PAUSE")}
    if pause:
        env.update(GENREC_STREAM_PAUSE=pause, GENREC_STREAM_PAUSE_MARKER=str(marker))
    return subprocess.Popen([sys.executable, "-m", "genrec.stream", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def _run_with_kills(run_dir: Path, first: list[str], rng: random.Random) -> list[str]:
    """Start the run, kill it at every entry of KILLS in turn (restarting after each), then let it finish.
    Returns where each kill landed."""
    landed = []
    args = first
    for point, nth in KILLS:
        marker = run_dir.parent / f"{run_dir.name}-marker"
        marker.unlink(missing_ok=True)
        if point == "random":
            proc = _start(args)
            while not (run_dir / "checkpoints").exists() and proc.poll() is None:
                time.sleep(0.2)
            time.sleep(rng.uniform(1.0, 6.0))
            assert proc.poll() is None, f"the run ended before a random kill: {proc.stderr.read()[-2000:]}"
            _kill(proc)
            landed.append("random")
        else:
            proc = _start(args, f"{point}:{nth}", marker)
            while not marker.exists():
                assert proc.poll() is None, f"the run ended before {point}:{nth}: {proc.stderr.read()[-3000:]}"
                time.sleep(0.1)
            _kill(proc)
            landed.append(marker.read_text())
        args = [f"resume_from={run_dir}"]
    _finish(_start(args))
    return landed


def _check_exactly_once(reference: Path, killed: Path, frame: pd.DataFrame) -> None:
    ledger = collections.Counter((killed / "ledger.txt").read_text().split())
    assert set(ledger) == set(frame["event_id"]) and set(ledger.values()) == {1}
    letters = {name: [json.loads(line) for line in (run / "dead_letters.jsonl").read_text().splitlines()]
               for name, run in (("reference", reference), ("killed", killed))}
    assert [d["reason"] for d in letters["killed"]] == ["duplicate"] * 3  # each copy rejected once
    # the same records at the same place of the stream (Redis entry IDs differ between the two streams)
    assert [(d["detail"], d["events"]) for d in letters["killed"]] == \
        [(d["detail"], d["events"]) for d in letters["reference"]]
    assert_same_state(final_state(reference), final_state(killed))
    a, b = (pd.read_csv(d / "logs" / "prequential.csv") for d in (reference, killed))
    pd.testing.assert_frame_equal(a, b)
    exports = sorted(p.name for p in (killed / "exports").iterdir())
    assert exports == sorted(p.name for p in (reference / "exports").iterdir())
    for name in ("item_table_rows", "item_table_delta"):
        for file in ("ids.npy", "rows.npy", "deleted_ids.npy"):
            part = Path(name) / "part-rank0" / file
            assert (killed / "exports" / exports[-1] / part).read_bytes() == \
                (reference / "exports" / exports[-1] / part).read_bytes()


@pytest.mark.slow
def test_sigkill_at_every_point_on_event_files(tmp_path):
    assert {p for p, _ in KILLS} - {"random"} == set(POINTS)
    frame = _stream()
    events = tmp_path / "events"
    write_event_files(frame, events, 500, "jsonl")
    runs = {}
    for name in ("reference", "killed"):
        runs[name] = [*SETTINGS, f"source.path={events}", "source.poll_seconds=0.2",
                      f"source.commit_path={tmp_path / (name + '-commit.json')}",
                      f"model.embedding.store.path={tmp_path / (name + '-store')}",
                      f"hydra.run.dir={tmp_path / name}"]
    _finish(_start(runs["reference"]))
    landed = _run_with_kills(tmp_path / "killed", runs["killed"], random.Random(0))
    assert landed == [p for p, _ in KILLS]
    _check_exactly_once(tmp_path / "reference", tmp_path / "killed", frame)
    assert (tmp_path / "killed" / "dead_letters.jsonl").read_text() == \
        (tmp_path / "reference" / "dead_letters.jsonl").read_text()
    committed = json.loads((tmp_path / "killed-commit.json").read_text())
    assert (committed["file"], committed["row"]) == (sorted(p.name for p in events.glob("*.jsonl"))[-1],
                                                     len(frame) % 500 or 500)


@pytest.mark.slow
def test_sigkill_at_every_point_on_redis_streams(tmp_path, redis_server):
    frame = _stream()
    runs = {}
    for name in ("reference", "killed"):
        publish(redis_server.client, f"eo-{name}", frame)
        runs[name] = [*SETTINGS, "source=redis", f"source.url={redis_server.url}", f"source.stream=eo-{name}",
                      "source.block_ms=200", f"model.embedding.store.path={tmp_path / (name + '-store')}",
                      f"hydra.run.dir={tmp_path / name}"]
    _finish(_start(runs["reference"]))
    landed = _run_with_kills(tmp_path / "killed", runs["killed"], random.Random(1))
    assert landed == [p for p, _ in KILLS]
    _check_exactly_once(tmp_path / "reference", tmp_path / "killed", frame)
    assert redis_server.client.xpending("eo-killed", "genrec")["pending"] == 0
