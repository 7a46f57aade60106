"""IDs are never floats, and no event file is lost silently (issue 47, items 2 and 3).

IDs: the same events, with missing fields and bad records beside IDs above 2^53, at 2^63 - 1, 2^63 and 2^64 - 1,
written as JSONL, CSV and Parquet (and sent to Redis) give the same user and item IDs and the same rejections as
the rules of :mod:`genrec.stream.events` computed by hand: an integer within int64 is itself, one beyond int64 is
the hash of its decimal text, a number with a fraction is an ID only when integral and within +-2^53.

Late files: a file that appears while genrec-stream is stopped, sorting before the read position, is dead-lettered
as ``late_file`` on resume (once: the offset then counts it consumed), by the source and through a resumed run.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from genrec.embedding.dynamic.hashing import string_ids
from genrec.runs import RunFolder
from genrec.stream import cli
from genrec.stream.events import EventSchema, Records, parse, parse_ids
from genrec.stream.files import DirectorySource, write_event_files
from genrec.stream.redis_streams import RedisStreamSource
from genrec.stream.loop import concat_records
from tests.stream.helpers import TINY, compose_stream, redis_server_path, tiny_events

FIELDS = ["event_id", "user_id", "item_id", "timestamp"]
BIG = 2**60  # floats are 256 apart here: BIG + 1 ... BIG + 6 were one float
#: two files of events (event ID, user, item, time); None: the field is missing. The first file's users fit int64
#: (one of them -2^63) and its items uint64 (2^64 - 1, 2^63); the second's users only uint64, without a null (a
#: column of uint64 once wrapped around: 2^64 - 1 became -1), its items only int64.
FILE_1 = [("e0", 1, BIG + 1, 10), ("e1", 2**53 + 3, BIG + 2, 11), ("e2", 3, BIG + 3, 12),
          ("e3", 4, None, 13),  # no item: malformed, between good ones
          ("e4", 5, BIG + 4, 14), ("e5", None, BIG + 5, 15),  # no user
          ("e6", -(2**63), BIG + 6, 16), ("e7", 7, 2**64 - 1, 17), ("e8", 8, 2**63, 18), ("e9", 9, 2**63 - 1, 19),
          (None, 10, 2**53 + 1, 20),  # no event ID
          ("e11", 11, 7, None)]  # no timestamp
FILE_2 = [("f0", 2**64 - 1, -(2**63), 21), ("f1", 2**63, 2**53 + 1, 22), ("f2", 12, BIG + 1, 23)]
#: rows of the batch (both files) that are rejected, and why
REJECTED = [(3, "item_id: missing, expected an item ID"), (5, "user_id: missing, expected a user ID"),
            (10, "event_id: missing, expected an event ID"),
            (11, "timestamp: missing, expected integer seconds >= 0")]


def _expected_id(value: int) -> int:
    """The rule by hand: an integer within int64 is the ID, one beyond it the hash of its decimal text."""
    return value if -(2**63) <= value < 2**63 else int(string_ids([str(value)])[0])


def _write(folder: Path, fmt: str, name: str, rows: list[tuple]) -> None:
    """``rows`` as one event file the way a producer of that format writes them: JSONL leaves a missing field out,
    CSV leaves its cell empty, Parquet stores a null in a column typed by its values (uint64 where one is above
    2^63 - 1, int64 otherwise; strings for event IDs)."""
    path = folder / f"{name}.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({k: v for k, v in zip(FIELDS, row) if v is not None}) + "\n"
                                for row in rows))
    elif fmt == "csv":
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(FIELDS)
        writer.writerows([["" if v is None else v for v in row] for row in rows])
        path.write_text(text.getvalue())
    else:
        columns = {}
        for i, name_ in enumerate(FIELDS):
            values = [row[i] for row in rows]
            numbers = [v for v in values if v is not None]
            kind = pa.string() if i == 0 else pa.uint64() if max(numbers) >= 2**63 else pa.int64()
            columns[name_] = pa.array(values, kind)
        pq.write_table(pa.table(columns), path)


def _outcome(records: Records) -> tuple[dict, list]:
    """What parsing makes of a batch: event ID -> (user, item, time) of the accepted events, and (row, reason,
    detail) of the rejected ones."""
    events, rejected = parse(records, EventSchema())
    accepted = {e: (int(u), int(i), int(t)) for e, u, i, t in
                zip(events.event_ids, events.users, events.items, events.times)}
    return accepted, [(r.row, r.reason, r.detail) for r in rejected]


def test_ids_are_the_same_from_every_format_with_nulls_and_bad_neighbours(tmp_path, request):
    rows = FILE_1 + FILE_2
    bad = {row for row, _ in REJECTED}
    expected = {e: (_expected_id(u), _expected_id(i), t) for row, (e, u, i, t) in enumerate(rows) if row not in bad}
    assert len({i for _, i, _ in expected.values()}) == 10  # five items near 2^60 among them, kept apart
    want = (expected, [(row, "malformed", detail) for row, detail in REJECTED])
    # a column of uint64 alone (no null) is not wrapped around: 2^64 - 1 is hashed, not -1
    assert parse_ids(pd.Series([2**64 - 1, 5], dtype=np.uint64))[0].tolist() == [_expected_id(2**64 - 1), 5]
    for fmt in ("jsonl", "csv", "parquet"):
        folder = tmp_path / fmt
        folder.mkdir()
        _write(folder, fmt, "events-0", FILE_1)
        _write(folder, fmt, "events-1", FILE_2)
        source = DirectorySource(str(folder), poll_seconds=0.01)
        source.restore(None)
        assert _outcome(source.read(100)) == want, fmt  # one read: one batch of both files
        source.restore(None)  # two reads joined as the trainer joins them
        assert _outcome(concat_records([source.read(len(FILE_1)), source.read(100)])) == want, fmt
    if redis_server_path():  # Redis hands over text: the same rules give the same IDs
        server = request.getfixturevalue("redis_server")
        for row in rows:
            server.client.xadd("t-ids", {k: str(v) for k, v in zip(FIELDS, row) if v is not None})
        source = RedisStreamSource(server.url, stream="t-ids", block_ms=50)
        source.restore(None)
        assert _outcome(source.read(100)) == want
        source.close()


def test_a_number_with_a_fraction_is_an_id_only_when_exact(tmp_path):
    # item values as a JSON number / a CSV cell; None: not the same event in Parquet (a double cannot hold it)
    cases = [("2.0", 2), ("1.0e3", 1000), ("-9007199254740992.0", -(2**53)), ("9007199254740994.0", None),
             ("1.5", None), ("1.0e300", None), ("9007199254740993.0", None), ("-1.0e999999999", None)]
    for fmt in ("jsonl", "csv", "parquet"):
        folder = tmp_path / fmt
        folder.mkdir()
        texts = cases if fmt != "parquet" else cases[:-2]  # the last two are not doubles
        if fmt == "jsonl":
            (folder / "a.jsonl").write_text("".join(f'{{"event_id": "e{n}", "user_id": 1, "item_id": {text}, '
                                                    f'"timestamp": 5}}\n' for n, (text, _) in enumerate(texts)))
        elif fmt == "csv":
            (folder / "a.csv").write_text("event_id,user_id,item_id,timestamp\n" + "".join(
                f"e{n},1,{text},5\n" for n, (text, _) in enumerate(texts)))
        else:
            pq.write_table(pa.table({"event_id": [f"e{n}" for n in range(len(texts))], "user_id": [1] * len(texts),
                                     "item_id": pa.array([float(t) for t, _ in texts], pa.float64()),
                                     "timestamp": [5] * len(texts)}), folder / "a.parquet")
        source = DirectorySource(str(folder), poll_seconds=0.01)
        source.restore(None)
        accepted, rejected = _outcome(source.read(100))
        assert accepted == {f"e{n}": (1, item, 5) for n, (_, item) in enumerate(texts) if item is not None}, fmt
        assert [row for row, _, _ in rejected] == [n for n, (_, item) in enumerate(texts) if item is None], fmt
        for row, reason, detail in rejected:
            assert reason == "malformed" and detail.startswith("item_id: ") and "expected an item ID" in detail
            beyond = texts[row][0] != "1.5"  # the others are beyond +-2^53
            assert ("an ID only within +-2^53" in detail) == beyond, (fmt, detail)
    # text without a decimal point is text (hex IDs look like 12e5); an event ID is text whatever its form
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.csv").write_text("event_id,user_id,item_id,timestamp\n1700000000.5,1,12e5,5\n")
    (tmp_path / "text" / "b.jsonl").write_text('{"event_id": "1700000000.5x", "user_id": 1, "item_id": "12e5", '
                                               '"timestamp": 5}\n')
    source = DirectorySource(str(tmp_path / "text"), poll_seconds=0.01)
    source.restore(None)
    item = int(string_ids(["12e5"])[0])
    assert _outcome(source.read(100)) == ({"1700000000.5": (1, item, 5), "1700000000.5x": (1, item, 5)}, [])


def _drain(source: DirectorySource) -> tuple[list[str], list[tuple[int, str]], dict]:
    """Everything the source has now: (positions, (row, reason) of the broken records, the end offset)."""
    positions, broken, end = [], [], None
    while True:
        records = source.read(100)
        if not len(records):
            return positions, broken, records.end if end is None else end
        broken += [(len(positions) + row, why[0]) for row, why in sorted(records.broken.items())]
        positions += records.positions
        end = records.end


def test_a_file_that_appeared_while_stopped_is_dead_lettered_on_resume(tmp_path):
    frame = tiny_events(users=10, items=20).iloc[:40]
    write_event_files(frame.iloc[:20], tmp_path, 10, "csv", prefix="b")
    source = DirectorySource(str(tmp_path), poll_seconds=0.01)
    source.restore(None)
    _, _, stopped_at = _drain(source)  # the offset the last checkpoint of the stopped run holds
    # while it is stopped: a file sorting before the position, and one after it
    write_event_files(frame.iloc[20:30], tmp_path, 10, "csv", prefix="a")
    write_event_files(frame.iloc[30:40], tmp_path, 10, "csv", prefix="c")
    resumed = DirectorySource(str(tmp_path), poll_seconds=0.01)
    resumed.restore(stopped_at)
    positions, broken, end = _drain(resumed)
    assert positions == ["a-000000.csv"] + [f"c-000000.csv:{line}" for line in range(2, 12)]
    assert broken == [(0, "late_file")]
    assert stopped_at == {"file": "b-000001.csv", "row": 10, "consumed": ["b-000000.csv"]}
    assert end == {"file": "c-000000.csv", "row": 10, "consumed": ["a-000000.csv", "b-000000.csv", "b-000001.csv"]}
    again = DirectorySource(str(tmp_path), poll_seconds=0.01)
    again.restore(end)  # dead-lettered once: a later resume does not report it again
    assert _drain(again)[0] == []
    again.restore(stopped_at)  # a crash before the checkpoint that held it: reported again, with what follows
    assert _drain(again)[:2] == (positions, broken)
    # an offset of the older form ({"file", "row"}) still loads: what is in the folder before it counts as read
    again.restore({"file": "b-000001.csv", "row": 10})
    assert _drain(again)[:2] == (positions[1:], [])


def test_the_offset_lists_only_consumed_files_still_in_the_folder(tmp_path):
    frame = tiny_events(users=10, items=20).iloc[:40]
    write_event_files(frame.iloc[:30], tmp_path, 10, "jsonl", prefix="b")
    source = DirectorySource(str(tmp_path), poll_seconds=0.01)
    source.restore(None)
    _, _, end = _drain(source)
    assert end["consumed"] == ["b-000000.jsonl", "b-000001.jsonl"]
    (tmp_path / "b-000000.jsonl").unlink()  # a cleaner deletes what was consumed
    write_event_files(frame.iloc[30:40], tmp_path, 10, "jsonl", prefix="c")
    positions, broken, end = _drain(source)
    assert len(positions) == 10 and broken == []
    assert end == {"file": "c-000000.jsonl", "row": 10, "consumed": ["b-000001.jsonl", "b-000002.jsonl"]}
    resumed = DirectorySource(str(tmp_path), poll_seconds=0.01)
    resumed.restore(end)
    assert _drain(resumed)[0] == []


def _run(tmp_path: Path, folder: Path, resume: bool = False) -> dict:
    run_dir = tmp_path / "run"
    if resume:
        cfg = cli.resumed_config(RunFolder(run_dir).config(), [f"resume_from={run_dir}"])
    else:
        cfg = compose_stream(TINY + [f"source.path={folder}", "source.poll_seconds=0.05",
                                     f"source.commit_path={tmp_path / 'commit.json'}",
                                     f"model.embedding.store.path={tmp_path / 'store'}"])
    return cli.run(cfg, run_dir)


def test_a_resumed_run_dead_letters_the_file_that_appeared_while_it_was_stopped(tmp_path):
    folder = tmp_path / "events"
    frame = tiny_events(users=20, items=30)
    write_event_files(frame.iloc[:100], folder, 50, "csv", prefix="b")
    assert _run(tmp_path, folder)["counts"]["accepted"] == 100
    write_event_files(frame.iloc[100:150], folder, 50, "csv", prefix="a")  # while it is stopped
    write_event_files(frame.iloc[150:200], folder, 50, "csv", prefix="c")
    counts = _run(tmp_path, folder, resume=True)["counts"]
    assert counts["rejected_late_file"] == 1 and counts["accepted"] == 150 and counts["records"] == 151
    letters = [json.loads(line) for line in (tmp_path / "run" / "dead_letters.jsonl").read_text().splitlines()]
    assert [(d["position"], d["reason"], d["record"]) for d in letters] == [
        ("a-000000.csv", "late_file", {"file": "a-000000.csv"})]
    committed = json.loads((tmp_path / "commit.json").read_text())
    assert committed["file"] == "c-000000.csv" and "a-000000.csv" in committed["consumed"]
