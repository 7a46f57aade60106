"""The streamed Parquet path (engine=polars) gives exactly the pandas path's SequenceData, splits and errors."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genrec.data.cache import load_or_build
from genrec.data.datamodule import load_dataset
from genrec.data.event_log import write_event_log
from genrec.data.generic import read_events
from genrec.data.outofcore import ParquetEventLog
from genrec.data.preprocess import PreprocessConfig, build_sequences, kcore_mask
from genrec.data.schema import InteractionLog
from genrec.data.split import SplitConfig, apply_split
from genrec.errors import ConfigError, DataError


def assert_same(a, b):
    """Equal SequenceData: arrays with their dtypes, raw IDs with their Python types, item content, the split."""
    assert a.split == b.split
    for field in ("item_ids", "offsets", "timestamps", "user_raw_ids", "item_raw_ids", "valid_at", "test_at"):
        x, y = getattr(a, field), getattr(b, field)
        if x is None or y is None:
            assert x is None and y is None, field
            continue
        assert x.dtype == y.dtype and np.array_equal(x, y), field
        assert [type(v) for v in x[1:4]] == [type(v) for v in y[1:4]], field
    if a.items is None or b.items is None:
        assert a.items is None and b.items is None
    else:
        pd.testing.assert_frame_equal(a.items, b.items)


def both(path, cfg=PreprocessConfig(), **reader):
    """(streamed, pandas) SequenceData of the same file."""
    streamed = read_events(str(path), engine="polars", **reader)
    assert isinstance(streamed, ParquetEventLog)
    loaded = read_events(str(path), engine="pandas", **reader)
    assert isinstance(loaded, InteractionLog)
    return build_sequences(streamed, cfg), build_sequences(loaded, cfg)


@pytest.mark.parametrize("id_type", ["int", "str"])
@pytest.mark.parametrize("dedupe", [False, True])
def test_generated_log_same_as_pandas(tmp_path, id_type, dedupe):
    path = write_event_log(tmp_path / "log.parquet", 30_000, id_type=id_type, seed=1, chunk_size=7_000)
    streamed, loaded = both(path, PreprocessConfig(dedupe=dedupe), timestamp="timestamp")
    assert_same(streamed, loaded)
    assert streamed.num_interactions > 10_000 and streamed.num_items < 30_000 // 50  # the 5-core bit


@pytest.mark.parametrize("split", [{"kind": "time", "valid_from": 0.7, "test_from": 0.85},
                                   {"kind": "time", "valid_from": 1_710_000_000, "test_from": 1_711_000_000}])
def test_time_split_same_as_pandas(tmp_path, split):
    """The whole data path (read, preprocess, split) of both engines: the same sequences and cut positions."""
    path = write_event_log(tmp_path / "log.parquet", 30_000, seed=4, chunk_size=7_000)
    reader = {"_target_": "genrec.data.generic.read_events", "path": str(path), "timestamp": "timestamp"}
    streamed, loaded = (load_dataset({**reader, "engine": engine}, {}, None, split) for engine in ("polars", "pandas"))
    assert_same(streamed, loaded)
    assert streamed.split["kind"] == "time" and 0 < streamed.train_lengths.sum() < streamed.num_interactions
    assert 0 < len(streamed.targets("test")[0]) < streamed.num_users


def test_id_rules_and_ties_same_as_pandas(tmp_path):
    """Canonical integer strings sort as numbers, '007' keeps a column as text, uint64 beyond int64 becomes text,
    equal timestamps keep file order, ratings filter in float32, dictionary-encoded strings read as strings."""
    users = ["10", "9", "10", "9", "10", "9", "100", "100", "100", "10"]
    table = pa.table({
        "u": pa.array(users).dictionary_encode(),
        "i": pa.array([5, 2 ** 63 + 1, 7, 5, 2 ** 63 + 1, 7, 5, 7, 2 ** 63 + 1, 9], pa.uint64()),
        "t": pa.array([3, 3, 3, 1, 1, 2, 5, 5, 5, 3], pa.int32()),
        "r": pa.array([1.0, 4.0, 3.5, 3.5, 5.0, 3.4999, 4.0, 4.0, 4.0, 4.0], pa.float64()),
        "other": pa.array(["x"] * 10)})
    pq.write_table(table, tmp_path / "log.parquet")
    for cfg in (PreprocessConfig(1, 1), PreprocessConfig(1, 1, min_rating=3.5), PreprocessConfig(1, 1, dedupe=True)):
        streamed, loaded = both(tmp_path / "log.parquet", cfg, user="u", item="i", timestamp="t", rating="r")
        assert_same(streamed, loaded)
    assert streamed.user_raw_ids.tolist() == [9, 10, 100]
    assert streamed.item_raw_ids[1:].tolist() == ["5", "7", "9", str(2 ** 63 + 1)]
    pq.write_table(table.set_column(0, "u", pa.array(["007"] + users[1:])), tmp_path / "log.parquet")
    streamed, loaded = both(tmp_path / "log.parquet", PreprocessConfig(1, 1), user="u", item="i")
    assert_same(streamed, loaded)
    assert streamed.timestamps is None and streamed.user_raw_ids.tolist() == ["10", "100", "9"]  # sorted as text


@pytest.mark.parametrize("tz", [None, "UTC", "Europe/Paris"])
def test_datetime_timestamps_same_as_pandas(tmp_path, tz):
    times = pd.to_datetime(["2024-01-01 10:00:00.7", "2024-01-01 09:00:00", "2024-01-02 00:00:00",
                            "2023-12-31 00:00:00"], format="ISO8601").tz_localize(tz)
    pd.DataFrame({"user_id": [1, 1, 1, 2], "item_id": [3, 4, 3, 4], "when": times}).to_parquet(tmp_path / "l.pq")
    streamed, loaded = both(tmp_path / "l.pq", PreprocessConfig(1, 1), timestamp="when")
    assert_same(streamed, loaded)


def test_item_content_same_as_pandas(tmp_path):
    pd.DataFrame({"user_id": ["a", "a", "a", "b", "b", "b"], "sku": ["1", "2", "1", "2", "3", "3"]}).to_parquet(
        tmp_path / "log.parquet")
    pd.DataFrame({"id": [3, 2, 8], "title": ["Three", None, "Eight"], "price": [1.5, 2.0, 3.0]}).to_csv(
        tmp_path / "items.csv", index=False)
    streamed, loaded = both(tmp_path / "log.parquet", PreprocessConfig(1, 1), item="sku",
                            items_path=str(tmp_path / "items.csv"), item_key="id")
    assert_same(streamed, loaded)
    assert streamed.items["title"].tolist() == ["", "", "Three"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 8), st.integers(0, 4)), min_size=1,
                       max_size=60),
       min_user=st.integers(1, 4), min_item=st.integers(1, 4), dedupe=st.booleans())
def test_random_logs_same_as_pandas(tmp_path, events, min_user, min_item, dedupe):
    """Any small log and thresholds: both paths give the same sequences, or the same 'nothing left' error."""
    users, items, times = (list(column) for column in zip(*events))
    pq.write_table(pa.table({"user_id": users, "item_id": items, "t": times}), tmp_path / "log.parquet")
    cfg = PreprocessConfig(min_user, min_item, dedupe=dedupe)
    try:
        streamed, loaded = both(tmp_path / "log.parquet", cfg, timestamp="t")
    except DataError as error:
        with pytest.raises(DataError) as info:
            build_sequences(read_events(str(tmp_path / "log.parquet"), engine="pandas", timestamp="t"), cfg)
        assert str(info.value) == str(error)
        return
    assert_same(streamed, loaded)
    split = SplitConfig("time", 0.4, 0.7)  # 0..4 in time: cuts at ranks, ties at the cut fall after it
    try:
        streamed_split = apply_split(streamed, split)
    except DataError as error:
        with pytest.raises(DataError) as info:
            apply_split(loaded, split)
        assert str(info.value) == str(error)
        return
    assert_same(streamed_split, apply_split(loaded, split))


def test_kcore_rounds_match_a_hand_checked_log():
    """User 0 has 3 events, one on item 2 (seen once): dropping it leaves user 0 with 2 < 3, which then takes
    item 1 below 2: three rounds."""
    users = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 1], np.int32)
    items = np.array([0, 1, 2, 0, 1, 3, 0, 3, 3, 3], np.int32)
    keep, rounds = kcore_mask(users, items, 3, 4, min_user=3, min_item=2)
    assert keep.tolist() == [False, False, False, True, False, True, True, True, True, True] and rounds == 3


def _rows(tmp_path, **columns) -> str:
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table(columns), path)
    return str(path)


INTS = pa.array([1, 2, 3], pa.int64())


@pytest.mark.parametrize("columns, reader, fragment", [
    ({"user_id": pa.array([1, None, 3], pa.int64()), "item_id": INTS}, {}, "row 2: missing value in ID column"),
    ({"user_id": INTS, "item_id": pa.array(["a", "b", None])}, {}, "row 3: missing value in ID column 'item_id'"),
    ({"user_id": INTS, "item_id": INTS, "t": pa.array([5, None, -1], pa.int64())}, {"timestamp": "t"},
     "row 2: expected integer unix seconds in 't', found nan"),
    ({"user_id": INTS, "item_id": INTS, "t": pa.array([5, -7, -1], pa.int64())}, {"timestamp": "t"},
     "row 2: timestamp -7 is negative"),
    ({"user_id": INTS, "item_id": INTS, "t": pa.array([5, 6, 2 ** 63], pa.uint64())}, {"timestamp": "t"},
     "row 3: timestamp 9223372036854775808 does not fit"),
    ({"user_id": INTS, "item_id": INTS, "t": pa.array([0, -10 ** 6, None], pa.timestamp("ms", "UTC"))},
     {"timestamp": "t"}, "row 3: expected integer unix seconds or an ISO 8601 datetime in 't', found NaT"),
    ({"user_id": INTS, "item_id": INTS, "t": pa.array([0, -10 ** 6, 5], pa.timestamp("ms"))},
     {"timestamp": "t"}, "row 2: timestamp '1969-12-31 23:43:20' is before 1970"),
    ({"user_id": INTS, "item_id": INTS, "r": pa.array([1.0, float("nan"), 1e50])}, {"rating": "r"},
     "row 2: expected a number in 'r', found nan"),
    ({"user_id": INTS, "item_id": INTS, "r": pa.array([1.0, 2.0, -1e50])}, {"rating": "r"},
     "row 3: rating -1e+50 is not a finite number"),
    ({"user_id": INTS, "item_id": INTS, "r": pa.array([1, None, 3], pa.int8())}, {"rating": "r"},
     "row 2: expected a number in 'r', found nan"),
])
def test_errors_same_as_pandas(tmp_path, columns, reader, fragment):
    """Each bad value raises, through the streamed path, the very message of the pandas path."""
    path = _rows(tmp_path, **columns)
    with pytest.raises(DataError) as streamed:
        read_events(path, engine="polars", **reader)
    with pytest.raises(DataError) as loaded:
        read_events(path, engine="pandas", **reader)
    assert str(streamed.value) == str(loaded.value)
    assert str(streamed.value).startswith(f"{path}: {fragment}"), str(streamed.value)


def test_filter_errors_same_as_pandas(tmp_path):
    path = _rows(tmp_path, user_id=INTS, item_id=INTS)
    for cfg in (PreprocessConfig(min_rating=3.0), PreprocessConfig()):
        messages = set()
        for engine in ("polars", "pandas"):
            with pytest.raises(DataError) as info:
                build_sequences(read_events(path, engine=engine), cfg)
            messages.add(str(info.value))
        assert len(messages) == 1, messages


@pytest.mark.parametrize("name, columns, reader, reason", [
    ("log.parquet", {"user_id": pa.array([1.0, 2.0]), "item_id": pa.array([1, 2])}, {}, "stored as double"),
    ("log.parquet", {"user_id": pa.array([1, 2]), "item_id": pa.array([1, 2]), "t": pa.array(["1970-01-02"] * 2)},
     {"timestamp": "t"}, "stored as string"),
    ("log.parquet", {"user_id": pa.array([1, 2]), "item_id": pa.array([1, 2]), "f": pa.array([1, 2])},
     {"features": ["f"]}, "feature columns"),
    ("log.csv", None, {}, "not a Parquet file"),
])
def test_auto_leaves_what_it_cannot_stream_to_pandas(tmp_path, name, columns, reader, reason):
    path = tmp_path / name
    if columns is None:
        path.write_text("user_id,item_id\n1,2\n")
    else:
        pq.write_table(pa.table(columns), path)
    assert isinstance(read_events(str(path), **reader), InteractionLog)
    with pytest.raises(ConfigError) as info:
        read_events(str(path), engine="polars", **reader)
    assert info.value.key == "data.reader.engine" and reason in str(info.value)
    with pytest.raises(ConfigError, match="expected one of"):
        read_events(str(path), engine="spark")


def test_auto_streams_parquet_and_the_cache_round_trips(tmp_path):
    path = write_event_log(tmp_path / "log.parquet", 5_000, seed=2)
    reader = {"name": "events", "_target_": "genrec.data.generic.read_events", "path": str(path),
              "timestamp": "timestamp"}
    assert isinstance(read_events(str(path)), ParquetEventLog)
    built = load_or_build(reader, lambda: read_events(str(path), timestamp="timestamp"), PreprocessConfig(),
                          tmp_path / "cache")
    cached = load_or_build(reader, lambda: pytest.fail("read again"), PreprocessConfig(), tmp_path / "cache")
    assert_same(built, cached)
    assert_same(built, build_sequences(read_events(str(path), timestamp="timestamp", engine="pandas"),
                                       PreprocessConfig()))
