"""genrec.data.stats against hand-computed values on tiny datasets, and scripts/analysis/data_stats.py end to end."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from genrec.data.schema import InteractionLog, SequenceData
from genrec.data.stats import (dataset_stats, gini, length_stats, popularity_stats, repeat_rate, taste_persistence,
                               transition_stats)

ROOT = Path(__file__).resolve().parents[2]


def sequences(*rows: list[int], num_items: int | None = None) -> SequenceData:
    """SequenceData with one user per row of dense item IDs."""
    items = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows])
    num_items = num_items or int(items.max())
    return SequenceData(name="t", item_ids=items, offsets=np.cumsum([0] + [len(r) for r in rows]).astype(np.int64),
                        timestamps=None, item_raw_ids=np.arange(num_items + 1, dtype=object),
                        user_raw_ids=np.arange(len(rows)))


def test_gini_by_hand():
    assert gini(np.array([3, 3, 3, 3])) == pytest.approx(0.0)
    assert gini(np.array([0, 0, 0, 4])) == pytest.approx(0.75)  # 2 * 16 / (4 * 4) - 5 / 4


def test_lengths_and_popularity_by_hand():
    data = sequences([1, 2, 3], [1, 2, 4], [1, 3, 2, 5, 6, 7, 8, 9, 10, 11])
    assert length_stats(data) == {"mean": pytest.approx(16 / 3), "median": 3.0, "p90": pytest.approx(8.6),
                                  "max": 10}
    popularity = popularity_stats(data)  # counts: item 1 x3, 2 x3, 3 x2, eight items x1 (11 items, 16 events)
    assert popularity["top_1pct_share"] == pytest.approx(3 / 16)  # ceil(0.11) = 1 item
    assert popularity["top_10pct_share"] == pytest.approx(6 / 16)  # ceil(1.1) = 2 items
    ranked = np.array([3, 3, 2] + [1] * 8)
    slope = np.polyfit(np.log(np.arange(1, 12)), np.log(ranked), 1)[0]
    assert popularity["zipf_exponent"] == pytest.approx(-slope)


def test_transitions_by_hand():
    """Pairs (1,2) (2,3) | (1,2) (2,4) | (1,3) (3,2): successors of 1 are {2: 2, 3: 1}, of 2 {3: 1, 4: 1}, of 3
    {2: 1}. Leave-one-out: each (1,2) ties with 3 once its own count is removed (1/2 each), (1,3) loses to 2, the
    others have a tie or no other pair: 1 hit in 6 pairs."""
    data = sequences([1, 2, 3], [1, 2, 4], [1, 3, 2])
    stats = transition_stats(data, lags=(1, 2))
    assert stats["pairs"] == 6
    h1 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    assert stats["transition_entropy_bits"] == pytest.approx(3 / 6 * h1 + 2 / 6 * 1.0)
    next_counts = np.array([3, 2, 1]) / 6  # next items: 2 x3, 3 x2, 4 x1
    assert stats["next_entropy_bits"] == pytest.approx(-(next_counts * np.log2(next_counts)).sum())
    assert stats["top_successor_share"] == pytest.approx(1 / 6)
    # two apart: (1,3) (1,4) (1,2): three successors of 1 once each, always a tie after leaving one out
    assert stats["top_successor_share_by_lag"] == {"1": pytest.approx(1 / 6), "2": 0.0}


def test_a_deterministic_chain_is_fully_predictable():
    data = sequences(*[[1, 2, 3, 4, 5]] * 4)
    stats = transition_stats(data, lags=(1, 3))
    assert stats["transition_entropy_bits"] == pytest.approx(0.0)
    assert stats["top_successor_share_by_lag"] == {"1": 1.0, "3": 1.0}


def test_repeat_rate_counts_items_seen_before():
    events = pd.DataFrame({"user": [1, 1, 1, 2, 2], "item": [7, 8, 7, 7, 7], "timestamp": [5, 1, 9, 2, 3]})
    assert repeat_rate(InteractionLog("t", events)) == pytest.approx(2 / 5)


def _grouped_users(rng, users: int, switch: bool) -> SequenceData:
    """Items 1..40 in 4 groups of 10 that users draw from: one group for the whole sequence, or (``switch``) the
    second half from an independently drawn group."""
    rows = []
    for _ in range(users):
        first = int(rng.integers(4))
        second = int(rng.integers(4)) if switch else first
        rows.append(np.concatenate([1 + 10 * g + rng.choice(10, size=6, replace=False) for g in (first, second)]))
    return sequences(*rows, num_items=40)


def test_taste_persistence_tells_loyal_from_switching_users():
    rng = np.random.default_rng(0)
    loyal = taste_persistence(_grouped_users(rng, 400, switch=False), clusters=4)
    switching = taste_persistence(_grouped_users(rng, 400, switch=True), clusters=4)
    assert loyal["users"] == switching["users"] == 200  # the other half fits the clusters
    assert loyal["taste_persistence"] > 0.95 and loyal["taste_lift"] > 0.9
    assert abs(switching["taste_lift"]) < 0.1  # a second half as alike as another user's


def test_dataset_stats_is_deterministic(data):
    log = InteractionLog("t", pd.DataFrame({"user": [0, 0], "item": [1, 2]}))
    assert json.dumps(dataset_stats(data, log, clusters=5)) == json.dumps(dataset_stats(data, log, clusters=5))


def test_data_stats_script_writes_the_preprocessed_numbers(tmp_path):
    out = tmp_path / "stats.json"
    proc = subprocess.run([sys.executable, "-m", "scripts.analysis.data_stats", "synthetic",
                           "data.reader.num_users=300", "data.reader.num_items=200", "data.reader.num_clusters=8",
                           f"data.cache_dir={tmp_path / 'cache'}", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = json.loads(out.read_text())
    stats = written["datasets"]["synthetic"]
    assert written["kind"] == "data_stats" and written["commit"]
    assert stats["config"]["reader"]["num_users"] == 300 and stats["users"] <= 300
    assert stats["interactions"] == pytest.approx(stats["length"]["mean"] * stats["users"])
    assert stats["repeat_rate"] == 0.0  # the generator never repeats an item within a user
