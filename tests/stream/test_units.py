"""The stream trainer's parts against hand-checked values: parsing and its rejections, training examples from
histories and new events, the online baselines, prequential ranks and windows."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from genrec.embedding.dynamic.hashing import string_ids
from genrec.stream.baselines import ItemIndex, OnlinePopularity, OnlineTransitions
from genrec.stream.events import EventSchema, Events, Records, parse
from genrec.stream.examples import build_examples
from genrec.stream.logs import CsvLog
from genrec.stream.prequential import MISS, Prequential, ranks_of


def _records(rows: list[dict]) -> Records:
    return Records(pd.DataFrame(rows), [f"r{i}" for i in range(len(rows))], end=len(rows), raw=lambda i: rows[i])


def test_parse_types_ids_and_names_what_is_wrong():
    rows = [{"event_id": 7, "user_id": "42", "item_id": "sku-1", "timestamp": 10.9, "kind": "click"},
            {"event_id": "x", "user_id": None, "item_id": 3, "timestamp": 5, "kind": "click"},
            {"event_id": "y", "user_id": 1, "item_id": 1.5, "timestamp": 5, "kind": "click"},
            {"event_id": "z", "user_id": 1, "item_id": 3, "timestamp": -1, "kind": "click"},
            {"event_id": "w", "user_id": 1, "item_id": 3, "timestamp": 5, "kind": "buy"},
            {"event_id": "v", "user_id": 99999999999999999999, "item_id": 3, "timestamp": "12", "kind": "view"}]
    schema = EventSchema(type="kind", event_types=("click", "view"))
    events, rejected = parse(_records(rows), schema)
    assert events.rows.tolist() == [0, 5]
    assert events.event_ids.tolist() == ["7", "v"] and events.keys.tolist() == string_ids(["7", "v"]).tolist()
    assert events.users[0] == 42 and events.items[0] == string_ids(["sku-1"])[0] and events.times.tolist() == [10, 12]
    assert events.users[1] == string_ids(["99999999999999999999"])[0]  # beyond int64: hashed like a string
    assert [(r.position, r.reason) for r in rejected] == [("r1", "malformed"), ("r2", "malformed"),
                                                          ("r3", "malformed"), ("r4", "unknown_type")]
    assert rejected[0].detail == "user_id: missing, expected a user ID"
    assert rejected[1].detail == "item_id: 1.5, expected an item ID"
    assert rejected[2].detail == "timestamp: -1, expected integer seconds >= 0"
    assert rejected[3].record == rows[4]


def _events(users, items, times) -> Events:
    n = len(users)
    return Events(np.arange(n), np.array([str(i) for i in range(n)], dtype=object), np.arange(n),
                  np.array(users), np.array(items), np.array(times))


def test_examples_from_histories_and_new_events():
    # user 5 has history [1, 2] (times 10, 11); user 9 is new. New events: 5:3, 9:7, 5:4, 9:8, 9:6
    users = np.array([5, 9])
    lengths = np.array([2, 0])
    items = np.array([[1, 2, 0], [0, 0, 0]])
    times = np.array([[10, 11, 0], [0, 0, 0]])
    events = _events([5, 9, 5, 9, 9], [3, 7, 4, 8, 6], [12, 20, 13, 21, 22])
    ex = build_examples(events, users, lengths, items, times, max_len=3)
    b = ex.batch
    # user 5: S = 1 2 3 4, targets 3 (p=2) and 4 (p=3): one window S[0:3] predicting 2 3 4, the last two count
    # user 9: S = 7 8 6, targets 8 (p=1) and 6 (p=2): window S[0:2] predicting 8 6; event 7 is cold
    assert b.item_ids.tolist() == [1, 2, 3, 7, 8] and b.offsets.tolist() == [0, 3, 5]
    assert b.target_ids.tolist() == [2, 3, 4, 8, 6] and ex.mask.tolist() == [False, True, True, True, True]
    assert b.timestamps.tolist() == [10, 11, 12, 20, 21] and b.query_timestamps.tolist() == [11, 12, 13, 21, 22]
    assert ex.target_events.tolist() == [0, 2, 3, 4] and ex.cold.tolist() == [1]
    seen = [ex.seen_ids[a:z].tolist() for a, z in zip(ex.seen_offsets[:-1], ex.seen_offsets[1:])]
    assert seen == [[1, 2], [1, 2, 3], [7], [7, 8]]
    # histories kept: the last max_len events
    assert ex.lengths.tolist() == [3, 3] and ex.items.tolist() == [[2, 3, 4], [7, 8, 6]]
    assert ex.times.tolist() == [[11, 12, 13], [20, 21, 22]]


def test_more_new_events_than_max_len_are_all_targets_once():
    events = _events([1] * 7, [10, 11, 12, 13, 14, 15, 16], list(range(7)))
    ex = build_examples(events, np.array([1]), np.array([0]), np.zeros((1, 3), int), np.zeros((1, 3), int), 3)
    # targets at positions 1..6 in windows of 3 targets: S[0:3] -> 11 12 13, S[3:6] -> 14 15 16
    assert ex.batch.offsets.tolist() == [0, 3, 6]
    assert ex.batch.target_ids[ex.mask].tolist() == [11, 12, 13, 14, 15, 16]
    assert ex.target_events.tolist() == [1, 2, 3, 4, 5, 6]


def _reference_examples(events, users, lengths, items, times, max_len):
    """The module doc's definition, one user at a time: (inputs, targets, input times, query times, mask, owners)
    per window, target events, seen prefixes, cold events, kept histories, sequences."""
    windows, target_events, seen, cold, kept, sequences = [], [], [], [], [], []
    for u, user in enumerate(users):
        mine = np.flatnonzero(events.users == user)
        h = int(lengths[u])
        s_items = np.concatenate([items[u, :h], events.items[mine]])
        s_times = np.concatenate([times[u, :h], events.times[mine]])
        sequences.append(s_items.tolist())
        positions = np.arange(h, h + len(mine))
        cold += mine[positions == 0].tolist()
        target_pos, target_ev = positions[positions >= 1], mine[positions >= 1]
        for start in range(0, len(target_pos), max_len):
            chunk = target_pos[start:start + max_len]
            end = int(chunk[-1])
            lo = max(0, end - max_len)
            mask = np.zeros(end - lo, dtype=bool)
            mask[chunk - 1 - lo] = True
            windows.append((s_items[lo:end].tolist(), s_items[lo + 1:end + 1].tolist(), s_times[lo:end].tolist(),
                            s_times[lo + 1:end + 1].tolist(), mask.tolist(), int(user)))
            target_events += target_ev[start:start + max_len].tolist()
            seen += [s_items[:p].tolist() for p in chunk]
        keep = min(len(s_items), max_len)
        kept.append((keep, s_items[len(s_items) - keep:].tolist(), s_times[len(s_times) - keep:].tolist()))
    return windows, target_events, seen, sorted(cold), kept, sequences


@pytest.mark.parametrize("seed", range(4))
def test_examples_match_the_definition_one_user_at_a_time(seed):
    rng = np.random.default_rng(seed)
    max_len, num_users, n = 4, 30, 200
    users = np.sort(rng.choice(1000, num_users, replace=False))
    lengths = rng.integers(0, max_len + 1, num_users)
    items = np.where(np.arange(max_len) < lengths[:, None], rng.integers(1, 50, (num_users, max_len)), 0)
    times = np.where(np.arange(max_len) < lengths[:, None], np.sort(rng.integers(0, 100, (num_users, max_len))), 0)
    events = _events(rng.choice(users, n), rng.integers(1, 50, n), np.sort(rng.integers(100, 200, n)))
    ex = build_examples(events, users, lengths, items, times, max_len)
    windows, target_events, seen, cold, kept, sequences = _reference_examples(events, users, lengths, items, times,
                                                                              max_len)
    b, o = ex.batch, ex.batch.offsets.tolist()
    got = [(b.item_ids[x:y].tolist(), b.target_ids[x:y].tolist(), b.timestamps[x:y].tolist(),
            b.query_timestamps[x:y].tolist(), ex.mask[x:y].tolist(), int(b.user_ids[w]))
           for w, (x, y) in enumerate(zip(o[:-1], o[1:]))]
    assert got == windows and ex.target_events.tolist() == target_events and ex.cold.tolist() == cold
    assert [ex.seen_ids[x:y].tolist() for x, y in zip(ex.seen_offsets[:-1], ex.seen_offsets[1:])] == seen
    assert [(int(n), ex.items[u, :n].tolist(), ex.times[u, :n].tolist()) for u, n in enumerate(ex.lengths)] == kept
    assert (ex.items[np.arange(max_len) >= ex.lengths[:, None]] == 0).all()
    assert [s.tolist() for s in ex.sequences] == sequences and ex.history_lengths.tolist() == lengths.tolist()
    assert ex.num_targets == n - len(cold) and len(cold) == (lengths[np.isin(users, events.users)] == 0).sum()


@pytest.mark.parametrize("max_targets", [1, 3, 7, 40, 10**6])
def test_training_steps_take_whole_sequences_and_every_target_once(max_targets):
    rng = np.random.default_rng(max_targets)
    max_len, num_users, n = 6, 40, 300
    users = np.sort(rng.choice(1000, num_users, replace=False))
    lengths = rng.integers(0, max_len + 1, num_users)
    items = np.where(np.arange(max_len) < lengths[:, None], rng.integers(1, 50, (num_users, max_len)), 0)
    times = np.where(np.arange(max_len) < lengths[:, None], np.sort(rng.integers(0, 100, (num_users, max_len))), 0)
    events = _events(rng.choice(users, n), rng.integers(1, 50, n), np.sort(rng.integers(100, 200, n)))
    ex = build_examples(events, users, lengths, items, times, max_len)
    b, o = ex.batch, ex.batch.offsets.tolist()
    whole = [(b.item_ids[x:y].tolist(), b.target_ids[x:y].tolist(), b.timestamps[x:y].tolist(),
              b.query_timestamps[x:y].tolist(), ex.mask[x:y].tolist(), int(b.user_ids[w]))
             for w, (x, y) in enumerate(zip(o[:-1], o[1:]))]
    steps = ex.steps(max_targets)
    parts, targets = [], []
    for step in steps:
        sb, so = step.batch, step.batch.offsets.tolist()
        sequences = [(sb.item_ids[x:y].tolist(), sb.target_ids[x:y].tolist(), sb.timestamps[x:y].tolist(),
                      sb.query_timestamps[x:y].tolist(), step.mask[x:y].tolist(), int(sb.user_ids[w]))
                     for w, (x, y) in enumerate(zip(so[:-1], so[1:]))]
        assert step.num_targets <= max_targets or len(sequences) == 1
        # each target's index among the micro-batch's targets: its item and query time are the same
        assert sb.target_ids[step.mask].tolist() == b.target_ids[ex.mask][step.targets].tolist()
        assert sb.query_timestamps[step.mask].tolist() == b.query_timestamps[ex.mask][step.targets].tolist()
        parts += sequences
        targets += step.targets.tolist()
    # every sequence whole in exactly one step, shortest first; every target once
    assert sorted(parts) == sorted(whole) and [len(p[0]) for p in parts] == sorted(len(w[0]) for w in whole)
    assert sorted(targets) == list(range(ex.num_targets))
    if max_targets >= ex.num_targets:
        assert len(steps) == 1


def test_queries_in_steps_are_the_queries_of_the_whole_micro_batch():
    from genrec.conf import compose_config
    from genrec.stream.cli import build_learner
    from tests.stream.helpers import TINY

    rng = np.random.default_rng(0)
    users = np.arange(20)
    lengths = rng.integers(0, 13, 20)
    items = np.where(np.arange(12) < lengths[:, None], rng.integers(1, 60, (20, 12)), 0)
    times = np.where(np.arange(12) < lengths[:, None], np.sort(rng.integers(0, 100, (20, 12))), 0)
    ex = build_examples(_events(rng.choice(users, 90), rng.integers(1, 60, 90), np.sort(rng.integers(100, 200, 90))),
                        users, lengths, items, times, 12)
    learner = build_learner(compose_config("stream", overrides=TINY))
    try:
        learner.train(ex)  # the table holds rows for the items: the queries read trained vectors
        learner.model.eval()
        with torch.no_grad():
            whole = learner.model.encode(ex.batch)[ex.mask]
        for max_targets in (1, 5, 1000):
            assert torch.allclose(learner.queries(ex, max_targets), whole, atol=1e-6)
    finally:
        learner.embedding.close()


def test_online_baselines_match_their_offline_formula():
    index = ItemIndex()
    popularity = OnlinePopularity()
    transitions = OnlineTransitions(popularity, num_last=2, decay=0.5)
    # users: A = 10 20 30, B = 10 20 40 (B's first two in one batch, then 40)
    for seqs, new_from in [([[10, 20], [10, 20]], [0, 0]), ([[10, 20, 40]], [2])]:
        new = np.concatenate([s[f:] for s, f in zip(seqs, new_from)])
        popularity.update(index.add(new), len(index))
        transitions.update([index.columns(np.array(s)) for s in seqs], new_from)
    popularity.update(index.add(np.array([30])), len(index))
    transitions.update([index.columns(np.array([10, 20, 30]))], [2])
    assert index.ids.tolist() == [10, 20, 40, 30]
    assert popularity.counts.tolist() == [2, 2, 1, 1]
    # context ... 10 20: C[20, .] = {40: 1, 30: 1}, C[10, .] = {20: 2} (weight 0.5); fill = pop / 3 * 1e-3
    scores = transitions.scores([index.columns(np.array([10, 20]))], 4)[0]
    fill = np.array([2, 2, 1, 1]) / 3 * 1e-3
    assert np.allclose(scores, fill + np.array([0, 0.5 * 2, 1, 1]))
    assert popularity.scores([np.zeros(0)], 4).tolist() == [[2, 2, 1, 1]]
    # state round trip
    again = OnlineTransitions(popularity, num_last=2, decay=0.5)
    again.load(transitions.state())
    assert np.array_equal(again.scores([index.columns(np.array([10, 20]))], 4), scores[None])


def test_ranks_remove_the_context_and_count_non_candidates_as_misses():
    scores = torch.tensor([[0.9, 0.5, 0.5, 0.1], [0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    targets = np.array([2, 1, -1])
    seen = [np.array([0]), np.array([], dtype=np.int64), np.array([3])]
    ranks = ranks_of(scores, targets, seen)
    # row 0: item 0 removed, 1 ties with 2 and wins (lower column) -> rank 1; row 1: ties, column 1 -> rank 1;
    # row 2: not a candidate -> a miss
    assert ranks.tolist() == [1, 1, MISS]
    assert ranks_of(torch.zeros(1, 0), np.array([-1]), [np.zeros(0, np.int64)]).tolist() == [MISS]


def test_prequential_windows_and_totals(tmp_path):
    csv = CsvLog(tmp_path / "p.csv", ["window", "index", "start", "end", "events", "complete", "method",
                                       "recall@10", "ndcg@10", "mrr"])
    p = Prequential(["m", "b"], (10,), window_events=2, window_seconds=100, from_time=None, csv=csv)
    ranks = {"m": torch.tensor([0, 3, MISS]), "b": torch.tensor([20, 1, 0])}
    p.add(ranks, np.array([50, 120, 160]))
    p.add({"m": torch.tensor([1]), "b": torch.tensor([1])}, np.array([230]))
    p.close_open_windows()
    rows = pd.read_csv(tmp_path / "p.csv")
    events_m = rows[(rows.window == "events") & (rows.method == "m")]
    assert events_m["events"].tolist() == [2, 2] and events_m["complete"].tolist() == [1, 0]
    assert events_m["mrr"].tolist() == pytest.approx([(1 + 1 / 4) / 2, (0 + 1 / 2) / 2])
    time_b = rows[(rows.window == "time") & (rows.method == "b")]
    assert time_b["index"].tolist() == [0, 1, 2] and time_b["recall@10"].tolist() == [0, 1, 1]
    summary = p.summary()
    assert summary["all"]["m"]["recall@10"] == pytest.approx(3 / 4)
    assert summary["all"]["m"]["ndcg@10"] == pytest.approx((1 + 1 / math.log2(5) + 1 / math.log2(3)) / 4)
    assert summary["evaluated"] == 4 and summary["all"]["b"]["mrr"] == pytest.approx((1 / 21 + 1 / 2 + 1 + 1 / 2) / 4)
    again = Prequential(["m", "b"], (10,), 2, 100, None, csv)
    again.load(p.state())
    assert again.summary() == summary


def test_the_stores_report_their_own_memory(tmp_path):
    from genrec.storage.stores import open_store

    store = open_store("rocksdb", tmp_path / "db", 800, cache_mib=8)
    ids = np.arange(5000, dtype=np.int64)
    store.put(ids, np.ones((5000, 800), dtype=np.uint8))
    held = store.memory_bytes()
    assert held >= 5000 * 800  # the memtable holds the rows written
    store.checkpoint(tmp_path / "snap")  # flushes the memtable
    assert store.memory_bytes() < held / 2
    store.close()
    lmdb = open_store("lmdb", tmp_path / "lmdb", 8)
    assert lmdb.memory_bytes() == 0
    lmdb.close()


def test_a_rocksdb_store_keeps_to_its_cache_with_its_memtables_charged_to_it(tmp_path):
    """160 MB written in small batches and read back into a store of 8 MiB: its memory stays near 8 MiB (RocksDB's
    cache capacity is not strict; memtables of its own, outside the cache, would hold tens of MiB)."""
    from genrec.storage.stores import open_store

    store = open_store("rocksdb", tmp_path / "db", 800, cache_mib=8)
    assert store.memory_bound_bytes() == 8 << 20
    rng = np.random.default_rng(0)
    peak = 0
    for i in range(400):
        store.put(np.arange(i * 500, (i + 1) * 500, dtype=np.int64), np.full((500, 800), i % 251, dtype=np.uint8))
        query = rng.integers(0, (i + 1) * 500, 200)
        found, records = store.get(query)
        assert found.all() and (records[:, 0] == (query // 500) % 251).all()
        peak = max(peak, store.memory_bytes())
    assert 4 << 20 < peak <= 1.25 * store.memory_bound_bytes()
    store.close()
