"""The sources behind one interface: a folder of event files (every format, a growing folder, offsets, commits),
Redis Streams on a real redis-server (consumer groups, XACK after commit, pending entries re-delivered after a
crash, those up to a checkpoint's offset acknowledged without being read again), and a dataset replay."""
from __future__ import annotations

import json
import time
import types

import numpy as np
import pandas as pd
import pytest

from genrec.stream.events import EventSchema
from genrec.stream.files import DirectorySource, count_rows, write_event_files
from genrec.stream.redis_streams import RedisStreamSource, publish
from genrec.stream.replay import ReplaySource, event_frame
from genrec.stream.loop import StreamLoop
from tests.stream.helpers import tiny_events

SCHEMA = EventSchema()


def _drain(source, batch: int = 7) -> tuple[list, list]:
    """Read until the source has nothing: (every record's event ID, the end offset after each read)."""
    ids, ends = [], []
    while True:
        records = source.read(batch)
        if not len(records):
            return ids, ends
        ids += [str(v) for v in records.frame["event_id"]]
        ends.append(records.end)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_files_are_read_in_name_order_with_row_offsets(tmp_path, fmt):
    frame = tiny_events(users=10, items=20).iloc[:50]
    write_event_files(frame, tmp_path, 20, fmt)
    assert [count_rows(p) for p in sorted(tmp_path.glob(f"*.{fmt}"))] == [20, 20, 10]
    source = DirectorySource(str(tmp_path), poll_seconds=0.01)
    source.restore(None)
    assert source.backlog() == 50
    ids, ends = _drain(source)
    assert ids == list(frame["event_id"])
    assert ends[0] == {"file": f"events-000000.{fmt}", "row": 7, "consumed": []}
    assert ends[-1] == {"file": f"events-000002.{fmt}", "row": 10,
                        "consumed": [f"events-00000{i}.{fmt}" for i in (0, 1)]} and source.backlog() == 0
    # restored at an offset: exactly the records after it
    again = DirectorySource(str(tmp_path), poll_seconds=0.01)
    again.restore({"file": f"events-000001.{fmt}", "row": 5})
    assert _drain(again)[0] == list(frame["event_id"][25:])


def test_a_growing_folder_and_the_commit_file(tmp_path):
    frame = tiny_events(users=10, items=20).iloc[:30]
    source = DirectorySource(str(tmp_path / "in"), poll_seconds=0.01)
    source.restore(None)
    assert len(source.read(10)) == 0  # no folder yet: nothing, no error
    write_event_files(frame.iloc[:10], tmp_path / "in", 10, "jsonl")
    (tmp_path / "in" / ".events-000001.jsonl.tmp").write_text("half written")  # ignored until renamed
    first = source.read(100)
    assert len(first) == 10
    write_event_files(frame.iloc[10:30], tmp_path / "in", 10, "jsonl")
    second = source.read(100)
    assert list(second.frame["event_id"]) == list(frame["event_id"][10:30])
    source.commit(second.end)
    assert json.loads((tmp_path / "in" / ".genrec-consumer-genrec.json").read_text())["row"] == 10
    assert source.committed() == {"file": "events-000002.jsonl", "row": 10,
                                  "consumed": ["events-000000.jsonl", "events-000001.jsonl"]}


def test_broken_lines_are_records_with_their_line(tmp_path):
    (tmp_path / "a.csv").write_text('event_id,user_id,item_id,timestamp\n1,2,3,4\n"x,2\n5,6,7,8,9\n')
    (tmp_path / "b.jsonl").write_text('{"event_id": 1}\n[1, 2]\n\n')
    source = DirectorySource(str(tmp_path), poll_seconds=0.01)
    source.restore(None)
    records = source.read(100)
    assert records.positions == ["a.csv:2", "a.csv:3", "a.csv:4", "b.jsonl:1", "b.jsonl:2", "b.jsonl:3"]
    assert sorted(records.broken) == [1, 2, 4, 5]
    assert records.broken[2] == ("malformed", "5 fields, the header names 4")
    assert records.raw(4) == "[1, 2]"


def test_replay_plays_a_dataset_in_timestamp_order():
    from genrec.data.synthetic import generate_synthetic

    log = generate_synthetic(num_users=30, num_items=40, num_clusters=3)
    source = ReplaySource({"_target_": "genrec.data.synthetic.generate_synthetic", "num_users": 30,
                           "num_items": 40, "num_clusters": 3})
    source.bind(SCHEMA, ".")
    source.restore(None)
    ids, ends = _drain(source, 100)
    frame = event_frame(log)
    assert ids == list(frame["event_id"]) and ends[-1] == len(log.events)
    assert np.all(np.diff(frame["timestamp"].to_numpy()) >= 0)
    # the event ID names the log's row: the same user, item and time
    rows = [int(e.split(":")[1]) for e in frame["event_id"]]
    assert (log.events["item"].to_numpy()[rows] == frame["item_id"].to_numpy()).all()
    source.restore(25)
    assert _drain(source, 100)[0] == ids[25:]


def test_redis_consumer_group_acknowledges_only_committed_entries(redis_server):
    frame = tiny_events(users=10, items=20).iloc[:40]
    stream = "t-ack"
    publish(redis_server.client, stream, frame)
    source = RedisStreamSource(redis_server.url, stream=stream, block_ms=50)
    source.restore(None)
    assert source.backlog() == 40
    first = source.read(15)
    assert list(first.frame["event_id"]) == list(frame["event_id"][:15])
    assert first.end == first.positions[-1] and len(first.arrival) == 15
    assert redis_server.client.xpending(stream, "genrec")["pending"] == 15
    source.read(10)
    source.commit(first.end)  # only what a checkpoint holds
    assert redis_server.client.xpending(stream, "genrec")["pending"] == 10
    source.close()


def test_redis_after_a_crash_redelivers_exactly_the_entries_after_the_checkpoint(redis_server):
    frame = tiny_events(users=10, items=20).iloc[:60]
    stream = "t-crash"
    publish(redis_server.client, stream, frame)
    source = RedisStreamSource(redis_server.url, stream=stream, block_ms=50)
    source.restore(None)
    source.read(20)
    checkpoint = source.read(10).end  # the checkpoint holds 30 entries ...
    source.read(15)  # ... 15 more were read but not trained; nothing was acknowledged: the process dies here
    restarted = RedisStreamSource(redis_server.url, stream=stream, block_ms=50)
    restarted.restore(checkpoint)
    ids, _ = _drain(restarted, 8)
    assert ids == list(frame["event_id"][30:])  # pending 30..44 again, then the new ones; 0..29 not again
    pending = redis_server.client.xpending(stream, "genrec")["pending"]
    assert pending == 30  # 0..29 acknowledged at restore, 30..59 wait for the next commit
    restarted.commit(restarted._position)
    assert redis_server.client.xpending(stream, "genrec")["pending"] == 0


def test_redis_deleted_pending_entry_is_malformed(redis_server):
    frame = pd.DataFrame({"event_id": ["a", "b"], "user_id": [1, 1], "item_id": [2, 3], "timestamp": [5, 6]})
    stream = "t-deleted"
    publish(redis_server.client, stream, frame)
    source = RedisStreamSource(redis_server.url, stream=stream, block_ms=50)
    source.restore(None)
    ids = source.read(2).positions
    redis_server.client.xdel(stream, ids[0])
    restarted = RedisStreamSource(redis_server.url, stream=stream, block_ms=50)
    restarted.restore(None)
    records = restarted.read(10)
    assert records.positions == ids and records.broken == {
        0: ("malformed", "the entry was deleted from the stream before it was acknowledged")}


@pytest.mark.parametrize("kind", ["files", "redis"])
def test_the_trainer_waits_for_records_only_while_it_has_none(tmp_path, kind, request):
    """A backlog smaller than a micro-batch is read at once, without waiting for more (before: one more read that
    waited the whole poll timeout); with nothing there, the read waits the timeout."""
    frame = tiny_events(users=10, items=20).iloc[:50]
    if kind == "files":
        write_event_files(frame, tmp_path / "events", 20, "parquet")
        source = DirectorySource(str(tmp_path / "events"), poll_seconds=3.0)
    else:
        server = request.getfixturevalue("redis_server")
        publish(server.client, "wait", frame)
        source = RedisStreamSource(server.url, "wait", block_ms=3000)
    source.bind(SCHEMA, str(tmp_path))
    source.restore(None)
    trainer = types.SimpleNamespace(source=source, offset=None)
    started = time.monotonic()
    assert len(StreamLoop.read(trainer, 256)) == 50
    assert time.monotonic() - started < 1.5
    started = time.monotonic()
    assert len(StreamLoop.read(trainer, 256)) == 0
    assert time.monotonic() - started >= 2.9
    source.close()
