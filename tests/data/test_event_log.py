"""The synthetic event log for the out-of-core benchmark: seeded, chunked, long-tailed."""
import numpy as np
import pyarrow.parquet as pq
import pytest

from genrec.data.event_log import START, write_event_log
from genrec.errors import ConfigError


def test_seeded_and_chunked(tmp_path):
    a = write_event_log(tmp_path / "a.parquet", 25_000, seed=3, chunk_size=10_000)
    b = write_event_log(tmp_path / "b.parquet", 25_000, seed=3, chunk_size=10_000)
    c = write_event_log(tmp_path / "c.parquet", 25_000, seed=4, chunk_size=10_000)
    assert pq.read_table(a).equals(pq.read_table(b)) and not pq.read_table(a).equals(pq.read_table(c))
    file = pq.ParquetFile(a)
    assert file.num_row_groups == 3 and file.metadata.num_rows == 25_000
    assert file.schema_arrow.names == ["user_id", "item_id", "timestamp"]
    times = pq.read_table(a)["timestamp"].to_numpy()
    slices = [times[:10_000], times[10_000:20_000], times[20_000:]]  # chunk k covers the k-th slice of 90 days
    assert all(x.max() < y.min() for x, y in zip(slices, slices[1:]))
    assert times.min() >= START and times.max() < START + 90 * 86_400
    assert not np.all(np.diff(slices[0]) >= 0)  # unsorted within a chunk


def test_long_tails(tmp_path):
    """Zipf 1.1 over 2,000 items: by the law, the top 1% hold 54% of the events and items past rank 1,622 (19%)
    expect fewer than 5; log-normal users: the busiest has many times the mean, and some fall under 5 events."""
    table = pq.read_table(write_event_log(tmp_path / "log.parquet", 100_000, seed=0))
    _, item_counts = np.unique(table["item_id"].to_numpy(), return_counts=True)
    _, user_counts = np.unique(table["user_id"].to_numpy(), return_counts=True)
    top = np.sort(item_counts)[::-1][:2_000 // 100]  # 2,000 items in the catalogue
    assert 0.5 < top.sum() / 100_000 < 0.58 and 0.14 < np.mean(item_counts < 5) < 0.24
    assert user_counts.max() > 10 * user_counts.mean() and 0.03 < np.mean(user_counts < 5) < 0.3


def test_string_ids_and_bad_settings(tmp_path):
    table = pq.read_table(write_event_log(tmp_path / "s.parquet", 1_000, id_type="str"))
    ids = table["user_id"].to_pylist()
    assert all(len(v) == 10 for v in ids) and int(ids[0], 16) > 0
    with pytest.raises(ConfigError):
        write_event_log(tmp_path / "x.parquet", 0)
    with pytest.raises(ConfigError):
        write_event_log(tmp_path / "x.parquet", 10, id_type="uuid")
