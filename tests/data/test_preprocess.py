"""Filtering, ID remapping and ordering; dropped rows are counted; an empty result is a clear error."""
import logging

import numpy as np
import pandas as pd
import pytest

from genrec.errors import DataError
from genrec.data.preprocess import PreprocessConfig, build_sequences
from genrec.data.schema import InteractionLog


def _log(rows, columns=("user", "item", "timestamp")) -> InteractionLog:
    return InteractionLog(name="toy", events=pd.DataFrame(rows, columns=list(columns)), source="toy.csv")


def test_kcore_is_iterative_and_logged(caplog):
    # item "z" has 1 interaction -> dropped; then user "b" falls below 3 -> dropped; then item "y" falls to 1.
    rows = [("a", "x", 1), ("a", "w", 2), ("a", "x", 3), ("a", "w", 4),
            ("b", "y", 1), ("b", "z", 2), ("b", "x", 3),
            ("c", "x", 1), ("c", "w", 2), ("c", "y", 3), ("c", "w", 4)]
    with caplog.at_level(logging.INFO):
        data = build_sequences(_log(rows), PreprocessConfig(min_user_interactions=3, min_item_interactions=2))
    assert data.num_users == 2 and data.num_items == 2  # users a, c; items w, x
    assert "dropped 4 of 11 interactions" in caplog.text


def test_remap_sorts_raw_ids_and_orders_by_time_with_stable_ties():
    rows = [("u2", "b", 30), ("u1", "c", 20), ("u1", "a", 10), ("u1", "b", 20), ("u2", "c", 10), ("u2", "a", 20)]
    data = build_sequences(_log(rows), PreprocessConfig(min_user_interactions=3, min_item_interactions=1))
    assert list(data.item_raw_ids[1:]) == ["a", "b", "c"] and list(data.user_raw_ids) == ["u1", "u2"]
    # u1: a@10, then c@20 and b@20 tie -> file order (c before b); u2: c@10, a@20, b@30
    assert data.sequence(0).tolist() == [1, 3, 2]
    assert data.sequence(1).tolist() == [3, 1, 2]
    assert data.timestamps.tolist() == [10, 20, 20, 10, 20, 30]


def test_without_timestamps_file_order_is_kept():
    rows = [("u", "c"), ("u", "a"), ("u", "b")]
    data = build_sequences(_log(rows, ("user", "item")), PreprocessConfig(1, 1))
    assert data.timestamps is None and data.sequence(0).tolist() == [3, 1, 2]


def test_users_shorter_than_three_are_dropped_even_with_min_one():
    rows = [("a", "x"), ("a", "y"), ("b", "x"), ("b", "y"), ("b", "z")]
    data = build_sequences(_log(rows, ("user", "item")), PreprocessConfig(1, 1))
    assert list(data.user_raw_ids) == ["b"]


def test_empty_after_filtering_names_source_and_thresholds():
    rows = [("a", "x", 1), ("a", "y", 2), ("a", "z", 3)]
    with pytest.raises(DataError, match=r"toy\.csv: no interactions left after filtering.*min_item_interactions=5"):
        build_sequences(_log(rows), PreprocessConfig(min_user_interactions=3, min_item_interactions=5))


def test_dedupe_and_min_rating_are_counted(caplog):
    rows = [("a", "x", 1, 5.0), ("a", "x", 2, 4.0), ("a", "y", 3, 1.0), ("a", "z", 4, 5.0), ("a", "w", 5, 4.0)]
    with caplog.at_level(logging.INFO):
        data = build_sequences(_log(rows, ("user", "item", "timestamp", "rating")),
                               PreprocessConfig(1, 1, min_rating=4.0, dedupe=True))
    assert data.sequence(0).tolist() == [2, 3, 1]  # x@1, z@4, w@5 with sorted ids w=1, x=2, z=3
    assert list(data.item_raw_ids[1:]) == ["w", "x", "z"]
    assert "min_rating 4.0 dropped 1 of 5" in caplog.text and "dedupe dropped 1 of 4" in caplog.text


def test_min_rating_without_ratings_is_an_error():
    with pytest.raises(DataError, match="has no ratings"):
        build_sequences(_log([("a", "x", 1)] * 3), PreprocessConfig(1, 1, min_rating=3))


def test_item_content_follows_the_remap():
    events = pd.DataFrame({"user": [0, 0, 0], "item": [20, 10, 30]})
    items = pd.DataFrame({"title": ["ten", "twenty", "thirty"]}, index=pd.Index([10, 20, 30], name="item"))
    data = build_sequences(InteractionLog("t", events, items), PreprocessConfig(1, 1))
    assert data.items.loc[data.sequence(0), "title"].tolist() == ["twenty", "ten", "thirty"]
    assert np.array_equal(data.item_raw_ids[1:], [10, 20, 30])
