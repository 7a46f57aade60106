"""The SID table: item ⇄ codes round trip for every item, save/load, integrity checks, torch-free loading."""
import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from genrec.errors import DataError
from genrec.tokenize.sid_table import PARQUET_FILE, PAD_CODE, SIDTable
from genrec.utils.provenance import REPO_ROOT


def _table(n=500, sizes=(8, 8, 8), seed=0, raw_ids=None):
    rng = np.random.default_rng(seed)
    space = np.stack(np.unravel_index(rng.choice(np.prod(sizes), size=n, replace=False), sizes), axis=1)
    codes = np.vstack([np.full((1, len(sizes)), PAD_CODE), space])
    raw = np.empty(n + 1, dtype=object)
    raw[1:] = raw_ids if raw_ids is not None else [f"B{i:05d}" for i in range(n)]
    return SIDTable(codes=codes, codebook_sizes=sizes, item_raw_ids=raw, dataset="toy",
                    config={"tokenizer": {"name": "rqvae"}, "seed": 0}, semantic_levels=len(sizes) - 1)


def test_every_item_round_trips():
    table = _table()
    items = np.arange(1, table.num_items + 1)
    np.testing.assert_array_equal(table.item_of(table.codes[1:]), items)
    assert all(table.item_of(table.codes[i]) == i for i in (1, 17, table.num_items))
    assert table.num_levels == 3 and table.codebook_sizes == (8, 8, 8)


def test_unknown_and_out_of_range_tuples_map_to_zero():
    table = _table(n=10)
    taken = {tuple(row) for row in table.codes[1:].tolist()}
    free = next((a, b, c) for a in range(8) for b in range(8) for c in range(8) if (a, b, c) not in taken)
    assert table.item_of(list(free)) == 0
    assert table.item_of(np.array([[8, 0, 0], [-1, 0, 0], list(free)])).tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="length 3"):
        table.item_of([1, 2])


def test_duplicate_codes_are_refused():
    codes = np.array([[PAD_CODE, PAD_CODE], [0, 1], [1, 1], [0, 1]])
    with pytest.raises(ValueError, match="1 items share a semantic ID.*dense IDs \\[3\\]"):
        SIDTable(codes=codes, codebook_sizes=(2, 2), item_raw_ids=np.array([None, "a", "b", "c"], dtype=object))
    with pytest.raises(ValueError, match="level 1 fall outside 0..1"):
        SIDTable(codes=np.array([[-1, -1], [0, 2]]), codebook_sizes=(2, 2), item_raw_ids=np.array([None, "a"]))


@pytest.mark.parametrize("raw_ids", [None, list(range(100, 600))])
def test_save_load_round_trip(tmp_path, raw_ids):
    table = _table(raw_ids=raw_ids)
    table.save(tmp_path)
    loaded = SIDTable.load(tmp_path)
    np.testing.assert_array_equal(loaded.codes, table.codes)
    assert loaded.codebook_sizes == table.codebook_sizes and loaded.semantic_levels == 2
    assert list(loaded.item_raw_ids[1:]) == list(table.item_raw_ids[1:])
    assert loaded.config == table.config and loaded.content_hash == table.content_hash
    frame = pq.read_table(tmp_path / PARQUET_FILE).to_pandas()
    assert list(frame.columns) == ["item", "raw_id", "level_0", "level_1", "level_2"]
    assert frame["item"].tolist() == list(range(1, 501))
    loaded.require_items(table.item_raw_ids)
    other = table.item_raw_ids.copy()
    other[7] = "changed"
    with pytest.raises(DataError, match="first difference at dense ID 7"):
        loaded.require_items(other, "beauty")


def test_edited_files_are_detected(tmp_path):
    _table().save(tmp_path)
    parquet = pq.read_table(tmp_path / PARQUET_FILE)
    frame = parquet.to_pandas()
    frame.loc[3, "raw_id"] = "edited"
    import pyarrow as pa

    edited = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(parquet.schema.metadata)
    pq.write_table(edited, tmp_path / PARQUET_FILE)
    with pytest.raises(DataError, match="content hash .* does not match"):
        SIDTable.load(tmp_path)
    frame.loc[3, "level_0"] = (frame.loc[3, "level_0"] + 1) % 8
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(
        parquet.schema.metadata), tmp_path / PARQUET_FILE)
    with pytest.raises(DataError, match="hold different codes"):
        SIDTable.load(tmp_path)
    (tmp_path / PARQUET_FILE).unlink()
    with pytest.raises(DataError, match="sid_table.parquet: not found"):
        SIDTable.load(tmp_path)


def test_loads_without_torch_or_the_tokenizer_code(tmp_path):
    table = _table()
    table.save(tmp_path)
    script = f"""
import sys
for name in ("torch", "faiss", "lightning", "hydra", "sentence_transformers", "transformers", "genrec.tokenize.rqvae"):
    sys.modules[name] = None  # any import of these fails
from genrec.tokenize.sid_table import SIDTable
t = SIDTable.load({str(tmp_path)!r})
print(t.num_items, t.num_levels, int(t.item_of(t.codes[42])))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["500", "3", "42"]
    assert json.loads(pq.read_schema(tmp_path / PARQUET_FILE).metadata[b"genrec_sid_table"])["num_items"] == 500
