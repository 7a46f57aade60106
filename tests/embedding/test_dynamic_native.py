"""The compiled kernels (genrec/embedding/dynamic/native.c) against the numpy code they replace, bit for bit: each
kernel on random inputs, a whole table trained on a stream (admission, eviction, tier 2) with and without them,
and the fallback to numpy when no compiler is found."""
import logging

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from genrec.embedding.dynamic import DynamicTable, DynamicTableConfig, native
from genrec.embedding.dynamic.admission import CountMinSketch
from genrec.embedding.dynamic.bloom import BloomFilter
from genrec.embedding.dynamic.hashing import init_rows, mix64
from genrec.embedding.dynamic.slot_map import SlotMap
from genrec.embedding.dynamic.table import lookup

needs_kernels = pytest.mark.skipif(native.load() is None, reason="the compiled kernels could not be built here "
                                                                  "(the tables use numpy; see the log)")


def _both(fn):
    """``fn()`` with the compiled kernels, then with numpy (the library counting as not built)."""
    compiled = fn()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "_loaded", [None])
        return compiled, fn()


IDS = np.random.default_rng(0).integers(-2**63, 2**63 - 1, 5000, dtype=np.int64)


@needs_kernels
@pytest.mark.parametrize("dim", [1, 7, 64])
def test_hashes_and_row_init_are_bit_identical(dim):
    a, b = _both(lambda: mix64(IDS, 123456789))
    assert a.dtype == b.dtype == np.uint64 and np.array_equal(a, b)
    a, b = _both(lambda: init_rows(IDS, dim, seed=3, bound=0.0346))
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@needs_kernels
def test_bloom_filter_and_sketch_are_bit_identical():
    def bloom():
        f = BloomFilter(1 << 16, hashes=4)
        f.add(IDS[:2000])
        return f.words.copy(), f.maybe(IDS)

    (words_a, maybe_a), (words_b, maybe_b) = _both(bloom)
    assert np.array_equal(words_a, words_b) and np.array_equal(maybe_a, maybe_b) and maybe_a[:2000].all()

    def sketch():
        s, rng, added = CountMinSketch(width=257, depth=4, seed=9), np.random.default_rng(1), []
        for _ in range(5):
            ids = np.unique(rng.integers(0, 600, 300))
            added.append(s.add(ids, rng.integers(0, 5, len(ids))))
        return s.counts.copy(), s.total, added, s.estimate(IDS[:100])

    a, b = _both(sketch)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1] and np.array_equal(a[3], b[3])
    assert all(np.array_equal(x, y) for x, y in zip(a[2], b[2]))


@needs_kernels
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["insert", "remove", "find"]),
                          st.lists(st.integers(-50, 50), min_size=1, max_size=30, unique=True)), max_size=40))
def test_slot_map_gives_the_same_answers_as_its_numpy_version(operations):
    """The layout of the index may differ (the kernel inserts one ID after the other); what it answers may not."""
    def replay():
        index, answers, value = SlotMap(capacity=40), [], 0
        for op, ids in operations:
            ids = np.array(ids, dtype=np.int64)
            present = index.find(ids) >= 0
            if op == "insert":
                new = ids[~present][: index.capacity - index.live]
                index.insert(new, np.arange(value, value + len(new)))
                value += len(new)
            elif op == "remove":
                index.remove(ids[present])
            answers.append((index.find(ids).tolist(), index.live, index.deleted))
        return answers

    compiled, numpy_ = _both(replay)
    assert compiled == numpy_


@needs_kernels
def test_a_table_trains_identically_with_and_without_the_kernels(tmp_path):
    stream = np.random.default_rng(2).zipf(1.1, (30, 512)).astype(np.int64)
    folder = iter(range(2))

    def train():
        config = DynamicTableConfig.build(16, 300, init_std=0.1, admission={"policy": "min_count", "min_count": 2},
                                          store={"path": str(tmp_path / str(next(folder)))})
        table = DynamicTable(config)
        for ids in stream:
            rows = lookup(table, table.map(ids))
            (rows * torch.sin(rows)).sum().backward()
        out = table.read(np.unique(stream)), table.counters()
        table.close()
        return out

    (rows_a, counters_a), (rows_b, counters_b) = _both(train)
    assert counters_a["evicted"] > 0 and counters_a["hits_tier2"] > 0 and counters_a == counters_b
    assert torch.equal(rows_a, rows_b)


@pytest.mark.parametrize("compiler", ["missing", "not on PATH"])
def test_without_a_compiler_the_tables_use_numpy_and_say_why(compiler, monkeypatch, tmp_path, caplog):
    """A fresh machine without a C compiler: the tables still work (numpy), a warning says why, nothing is left."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "_loaded", [None])
        expected = mix64(IDS[:10], 1)
    monkeypatch.setattr(native, "_loaded", [])
    monkeypatch.setenv("GENREC_NATIVE_DIR", str(tmp_path))
    if compiler == "missing":
        monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    else:
        monkeypatch.delenv("CC", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert native.load() is None
    assert "using numpy" in caplog.text
    assert ("no-such-compiler" if compiler == "missing" else "no C compiler found") in caplog.text
    assert list(tmp_path.iterdir()) == []  # no partial library left behind
    assert np.array_equal(mix64(IDS[:10], 1), expected)  # numpy now
