"""The Parquet cache round-trips a dataset exactly and misses when inputs change."""
import numpy as np
import pandas as pd

from genrec.data.cache import cache_key, load_or_build, load_sequences, save_sequences
from genrec.data.preprocess import PreprocessConfig, build_sequences
from genrec.data.schema import InteractionLog
from genrec.data.synthetic import generate_synthetic


def _same(a, b):
    assert a.name == b.name
    for field in ("item_ids", "offsets", "timestamps", "item_raw_ids", "user_raw_ids"):
        assert np.array_equal(getattr(a, field)[1:] if field == "item_raw_ids" else getattr(a, field),
                              getattr(b, field)[1:] if field == "item_raw_ids" else getattr(b, field)), field
    pd.testing.assert_frame_equal(a.items, b.items, check_dtype=False)


def test_round_trip(tmp_path):
    data = build_sequences(generate_synthetic(num_users=100, num_items=50, num_clusters=5),
                           PreprocessConfig(3, 1, dedupe=True))
    save_sequences(data, tmp_path / "d")
    _same(data, load_sequences(tmp_path / "d"))


def test_string_ids_without_timestamps_round_trip(tmp_path):
    events = pd.DataFrame({"user": ["b", "b", "b", "a", "a", "a"], "item": ["x", "y", "z", "z", "y", "x"]})
    data = build_sequences(InteractionLog("s", events), PreprocessConfig(1, 1))
    save_sequences(data, tmp_path / "d")
    back = load_sequences(tmp_path / "d")
    assert back.timestamps is None and back.items is None
    assert list(back.user_raw_ids) == ["a", "b"] and back.sequence(0).tolist() == data.sequence(0).tolist()


def test_key_depends_on_config_and_file_contents(tmp_path):
    f = tmp_path / "events.csv"
    f.write_text("user_id,item_id\n1,2\n")
    cfg = {"_target_": "genrec.data.generic.read_events", "path": str(f)}
    k1 = cache_key(cfg, PreprocessConfig())
    assert k1 == cache_key(dict(cfg), PreprocessConfig())
    assert k1 != cache_key(cfg, PreprocessConfig(min_item_interactions=1))
    f.write_text("user_id,item_id\n1,2\n3,4\n")
    assert k1 != cache_key(cfg, PreprocessConfig())


def test_load_or_build_reads_once(tmp_path):
    calls = []

    def read():
        calls.append(1)
        return generate_synthetic(num_users=50, num_items=30, num_clusters=6)

    cfg = {"name": "syn", "_target_": "genrec.data.synthetic.generate_synthetic", "num_users": 50}
    first = load_or_build(cfg, read, PreprocessConfig(3, 1, dedupe=True), tmp_path)
    second = load_or_build(cfg, read, PreprocessConfig(3, 1, dedupe=True), tmp_path)
    assert len(calls) == 1
    _same(first, second)
