"""Dynamic tables' parts against brute-force references: the ID map, row init, admission, LRU / LFU / TTL eviction."""
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genrec.embedding.dynamic.admission import CountMinSketch
from genrec.embedding.dynamic.config import DynamicTableConfig
from genrec.embedding.dynamic.eviction import NotEnoughRows
from genrec.embedding.dynamic.hashing import init_rows, owner, string_ids
from genrec.embedding.dynamic.slot_map import SlotMap
from genrec.embedding.dynamic.table import DynamicTable

batches_strategy = st.lists(st.lists(st.integers(0, 30), min_size=0, max_size=6), min_size=1, max_size=25)


def test_string_ids_are_a_fixed_function_of_the_text():
    ids = string_ids(["item1", "item2", "item1", ""])
    # blake2b(b"item1", digest_size=8) = 84895e383a90fc28, read little-endian signed: fixed forever (checkpoints
    # and exports are keyed by it)
    assert ids[0] == 2953394035376425348
    assert ids[0] == ids[2] and len(set(ids.tolist())) == 3 and ids.dtype == np.int64


def test_row_init_depends_on_seed_and_id_only():
    ids = np.array([5, -3, 2**62, 5])
    rows = init_rows(ids, 8, seed=1, bound=0.1)
    assert rows.dtype == np.float32 and rows.shape == (4, 8)
    assert np.array_equal(rows[0], rows[3])  # the same ID, wherever it is in the batch
    assert np.array_equal(rows[1:2], init_rows(np.array([-3]), 8, seed=1, bound=0.1))
    assert not np.array_equal(rows, init_rows(ids, 8, seed=2, bound=0.1))
    many = init_rows(np.arange(20000), 4, seed=0, bound=0.5)
    assert many.min() >= -0.5 and many.max() < 0.5 and abs(float(many.mean())) < 0.01
    assert abs(float(many.std()) - 0.5 / np.sqrt(3)) < 0.01  # uniform on [-b, b): std b / sqrt(3)


def test_owner_splits_ids_evenly():
    counts = np.bincount(owner(np.arange(30000), 3), minlength=3)
    assert counts.min() > 9500


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["insert", "remove"]), st.lists(st.integers(-2**63, 2**63 - 1), max_size=12)),
                max_size=30))
def test_slot_map_equals_a_dict(operations):
    index, reference, next_value = SlotMap(capacity=40), {}, 0
    for kind, ids in operations:
        ids = list(dict.fromkeys(ids))
        if kind == "insert":
            new = [i for i in ids if i not in reference][:40 - len(reference)]
            index.insert(np.array(new, dtype=np.int64), np.arange(next_value, next_value + len(new)))
            reference.update({i: next_value + k for k, i in enumerate(new)})
            next_value += len(new)
        else:
            gone = [i for i in ids if i in reference]
            index.remove(np.array(gone, dtype=np.int64))
            for i in gone:
                del reference[i]
        probe = np.array(ids + list(reference), dtype=np.int64)
        assert index.find(probe).tolist() == [reference.get(i, -1) for i in probe.tolist()]
        assert len(index) == len(reference)


def test_slot_map_rebuilds_after_many_deletes():
    index = SlotMap(capacity=100)
    for round_ in range(50):  # 5000 inserts and deletes through a 256-position index
        ids = np.arange(round_ * 100, round_ * 100 + 100)
        index.insert(ids, ids)
        assert np.array_equal(index.find(ids), ids)
        index.remove(ids)
    assert len(index) == 0 and index.deleted < 256


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 200), min_size=1, max_size=300), st.integers(1, 64), st.integers(1, 4))
def test_count_min_never_underestimates(stream, width, depth):
    sketch = CountMinSketch(width, depth, seed=3)
    ids, counts = np.unique(np.array(stream), return_counts=True)
    sketch.add(ids, counts)
    assert (sketch.estimate(ids) >= counts).all()
    assert sketch.total == len(stream)


def test_count_min_error_bound():
    """estimate <= true + (e / width) * N for all but a fraction exp(-depth) of the IDs (here 5 rows: <= 0.7%)."""
    rng = np.random.default_rng(0)
    stream = rng.zipf(1.2, 200_000) % 50_000
    sketch = CountMinSketch(width=2000, depth=5, seed=0)
    for chunk in np.array_split(stream, 20):
        ids, counts = np.unique(chunk, return_counts=True)
        sketch.add(ids, counts)
    ids, counts = np.unique(stream, return_counts=True)
    over = sketch.estimate(ids) - counts
    assert over.min() >= 0
    assert (over > sketch.error_bound()).mean() <= np.exp(-5)


def _table(capacity=8, **settings) -> DynamicTable:
    return DynamicTable(DynamicTableConfig.build(4, capacity, **settings))


def _resident(table: DynamicTable) -> set[int]:
    return set(table.index.items()[0].tolist())


@settings(max_examples=40, deadline=None)
@given(batches_strategy, st.integers(1, 4))
def test_min_count_admits_exactly_at_the_kth_occurrence(batches, k):
    table = _table(capacity=64, admission={"policy": "min_count", "min_count": k, "sketch_width": 1 << 16})
    seen = Counter()
    for batch in batches:
        table.map(np.array(batch, dtype=np.int64))
        seen.update(batch)
        assert _resident(table) == {i for i, n in seen.items() if n >= k}


def test_probability_admission_is_a_function_of_seed_id_and_step():
    def admitted(seed):
        table = _table(capacity=5000, seed=seed, admission={"policy": "probability", "probability": 0.3})
        table.map(np.arange(4000))
        return _resident(table)

    first = admitted(0)
    assert first == admitted(0) and first != admitted(1)
    assert abs(len(first) / 4000 - 0.3) < 3 * np.sqrt(0.3 * 0.7 / 4000)


def _reference_lru(batches, capacity, pinned):
    """Exact LRU at batch granularity: victims are the rows last used longest ago (ties: smaller raw ID first),
    never one used by the current batch or the ``pinned`` batches before it."""
    last: dict[int, int] = {}
    for step, batch in enumerate(batches, 1):
        ids = sorted(set(batch))
        for i in ids:
            if i in last:
                last[i] = step
        new = [i for i in ids if i not in last]
        need = len(last) + len(new) - capacity
        if need > 0:
            candidates = sorted((s, i) for i, s in last.items() if s < step - pinned)
            if len(candidates) < need:
                yield None
                return
            for _, i in candidates[:need]:
                del last[i]
        last.update({i: step for i in new})
        yield set(last)


@settings(max_examples=60, deadline=None)
@given(batches_strategy, st.integers(1, 2), st.integers(6, 12))
def test_lru_equals_brute_force(batches, pinned, capacity):
    table = _table(capacity=capacity, pinned_batches=pinned)
    for batch, expected in zip(batches, _reference_lru(batches, capacity, pinned)):
        if expected is None:
            with pytest.raises(NotEnoughRows):
                table.map(np.array(batch, dtype=np.int64))
            return
        table.map(np.array(batch, dtype=np.int64))
        assert _resident(table) == expected


@settings(max_examples=40, deadline=None)
@given(batches_strategy, st.sampled_from([1.0, 0.8]))
def test_lfu_with_full_sampling_evicts_the_lowest_decayed_counts(batches, decay):
    """Every evicted row had a decayed count no larger than any row that stayed and could have gone."""
    capacity, pinned = 8, 1
    table = _table(capacity=capacity, pinned_batches=pinned,
                   eviction={"policy": "lfu", "lfu_decay": decay, "lfu_sample": 10_000})
    score: dict[int, float] = {}
    last: dict[int, int] = {}
    for step, batch in enumerate(batches, 1):
        before = _resident(table)
        try:
            table.map(np.array(batch, dtype=np.int64))
        except NotEnoughRows:
            return
        after = _resident(table)
        evicted = before - after
        stayed = {i for i in before & after if last[i] < step - pinned and i not in batch}
        for i in evicted:
            assert all(score[i] <= score[j] * (1 + 1e-12) for j in stayed), (i, score, stayed)
            del score[i]
        for i in list(score):
            score[i] *= decay
        for i, n in Counter(batch).items():
            score[i] = score.get(i, 0.0) + n
            last[i] = step


def test_ttl_deletes_rows_unused_for_longer_than_ttl_in_event_time():
    table = _table(capacity=16, pinned_batches=1, eviction={"ttl": 100, "ttl_every": 1})
    table.map(np.array([1, 2]), times=np.array([1000, 1000]))
    table.map(np.array([2, 3]), times=np.array([1050]))
    table.map(np.array([4]), times=np.array([1120]))  # 1 unused since 1000 < 1120 - 100: expired
    assert _resident(table) == {2, 3, 4}
    assert table.deletions.since(0).tolist() == [1] and table.counters()["expired"] == 1
    table.map(np.array([5]), times=np.array([1300]))
    assert _resident(table) == {4, 5}  # 2 and 3 expired; 4 too old as well, but the previous batch used it
