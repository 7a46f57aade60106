"""The global temporal split by hand: cut positions, who is evaluated, what trains and what the baselines count;
bad settings fail with one error naming the key before the data is preprocessed."""
import numpy as np
import pandas as pd
import pytest

from genrec.data.batch import EvalSequences, TrainPrefixes, TrainSequences
from genrec.data.datamodule import load_dataset
from genrec.data.preprocess import PreprocessConfig, build_sequences
from genrec.data.schema import InteractionLog
from genrec.data.split import SplitConfig, apply_split, split_summary
from genrec.errors import ConfigError, DataError
from genrec.models.counts import ItemTransitions, item_popularity
from genrec.training.preferences import preference_examples

# (item, time) per user; raw items are their dense IDs. Cuts 25 and 40:
#   a: trains on 1, 2; validates on 3 (t 30); tests on 6 (t 40, at the cut: after it; 6 never trains)
#   b: trains on 1; validates on 2 (t 25, at the cut, first of a tie kept in file order); no test event
#   c: trains on everything; neither validated nor tested
#   d: only test-period events: its first has nothing before it, so it is not tested
#   e: no training event: its validation target has nothing before it (not validated); tested on 5 from [4]
EVENTS = {"a": [(1, 10), (2, 20), (3, 30), (6, 40), (5, 50)], "b": [(1, 15), (2, 25), (3, 25), (4, 26)],
          "c": [(3, 5), (4, 12), (2, 18)], "d": [(5, 45), (1, 46), (2, 47)], "e": [(4, 30), (5, 41), (1, 42)]}


def _log(with_time: bool = True) -> InteractionLog:
    rows = [(u, i, t) for u, events in EVENTS.items() for i, t in events]
    events = pd.DataFrame(rows, columns=["user", "item", "timestamp"])
    return InteractionLog("toy", events if with_time else events.drop(columns="timestamp"))


@pytest.fixture(scope="module")
def data():
    return apply_split(build_sequences(_log(), PreprocessConfig(1, 1)), SplitConfig("time", 25, 40))


def test_cut_positions_and_evaluated_users(data):
    assert data.offsets.tolist() == [0, 5, 9, 12, 15, 18]
    assert data.valid_at.tolist() == [2, 6, 12, 12, 15] and data.test_at.tolist() == [3, 9, 12, 12, 16]
    valid, test = EvalSequences(data, 10, "valid"), EvalSequences(data, 10, "test")
    assert valid.users.tolist() == [0, 1] and [valid[i].targets.tolist() for i in range(2)] == [[3], [2]]
    assert [valid[i].items.tolist() for i in range(2)] == [[1, 2], [1]]
    assert test.users.tolist() == [0, 4] and [test[i].targets.tolist() for i in range(2)] == [[6], [5]]
    # the test input holds the validation period's events; exclude_history removes everything before the target
    assert [test[i].items.tolist() for i in range(2)] == [[1, 2, 3], [4]] and test[0].seen.tolist() == [1, 2, 3]
    assert test.lengths.tolist() == [3, 1]
    summary = split_summary(data)
    assert summary["training_events"] == 6 and summary["users_evaluated"] == {"valid": 2, "test": 2}
    assert summary["targets_not_in_training"] == {"valid": 0, "test": 2}  # 6 and 5 never train
    assert summary["valid_from_time"] == 25 and summary["test_from_time"] == 40


def test_training_and_baselines_see_only_events_before_valid_from(data):
    train = TrainSequences(data, 10)
    assert train.users.tolist() == [0, 2]  # a and c have two training events or more
    assert [(train[i].items.tolist(), train[i].targets.tolist()) for i in range(2)] == [([1], [2]), ([3, 4], [4, 2])]
    prefixes = TrainPrefixes(data, 10)
    assert [(prefixes[i].items.tolist(), prefixes[i].targets.tolist()) for i in range(len(prefixes))] == [
        ([1], [2]), ([3], [4]), ([3, 4], [2])]
    assert item_popularity(data).tolist() == [0, 2, 2, 1, 1, 0, 0]
    counts = ItemTransitions(data).counts.toarray()
    assert counts[1, 2] == counts[3, 4] == counts[4, 2] == 1 and counts.sum() == 3
    examples = preference_examples(data, 10)
    assert examples.chosen.tolist() == [2, 2]  # each training user's last training item


def test_quantile_cuts_are_event_ranks(data):
    """18 events; valid_from=0.5 -> the time of the event at rank 9 in time order (30, shared by two events, which
    both fall after the cut); test_from=0.75 -> rank 13 (42)."""
    times = np.sort(data.timestamps)
    assert times[9] == times[10] == 30 and times[13] == 42
    split = apply_split(build_sequences(_log(), PreprocessConfig(1, 1)), SplitConfig("time", 0.5, 0.75))
    summary = split_summary(split)
    assert (summary["valid_from_time"], summary["test_from_time"], summary["training_events"]) == (30, 42, 9)
    assert split.valid_at.tolist() == [2, 9, 12, 12, 15] and split.test_at.tolist() == [4, 9, 12, 12, 17]


def test_leave_one_out_is_the_default():
    data = build_sequences(_log(), PreprocessConfig(1, 1))
    assert apply_split(data, SplitConfig()) is data and data.split == {"kind": "leave_one_out"}
    assert data.valid_at.tolist() == (data.offsets[1:] - 2).tolist()
    assert data.test_at.tolist() == (data.offsets[1:] - 1).tolist()
    assert split_summary(data)["users_evaluated"] == {"valid": 5, "test": 5}


@pytest.mark.parametrize("node, key", [
    ({"kind": "weekly"}, "data.split.kind"),
    ({"kind": "time", "valid_from": 0.8}, "data.split.test_from"),
    ({"kind": "time", "valid_from": 0.9, "test_from": 0.8}, "data.split.test_from"),
    ({"kind": "time", "valid_from": 0.8, "test_from": 0.8}, "data.split.test_from"),
    ({"kind": "time", "valid_from": 0.8, "test_from": 900_000_000}, "data.split.test_from"),
    ({"kind": "time", "valid_from": 0, "test_from": 0.9}, "data.split.valid_from"),
    ({"kind": "time", "valid_from": 1.5e9 + 0.5, "test_from": 1.6e9}, "data.split.valid_from"),
    ({"kind": "time", "valid_from": "May", "test_from": 0.9}, "data.split.valid_from"),
    ({"kind": "leave_one_out", "test_from": 0.9}, "data.split.test_from"),
    ({"kind": "time", "valid_from": 0.8, "test_from": 0.9, "gap": 1}, "data.split.gap"),
])
def test_bad_settings_name_their_key(node, key):
    with pytest.raises(ConfigError, match=f"^{key}: "):
        SplitConfig.from_config(node)


@pytest.mark.parametrize("cuts, key", [((5, 40), "data.split.valid_from"), ((25, 51), "data.split.test_from"),
                                       ((27, 29), "data.split.valid_from"), ((43, 46), "data.split.valid_from")])
def test_cuts_that_leave_a_part_empty(cuts, key):
    """No event before 5 (nothing trains), none from 51 on (no test target), none in [27, 29); in [43, 46) only
    d's first event, which has nothing before it (no validation user)."""
    data = build_sequences(_log(), PreprocessConfig(1, 1))
    with pytest.raises(DataError, match=f"key '{key}'"):
        apply_split(data, SplitConfig("time", *cuts))


def test_time_split_without_timestamps_fails_before_preprocessing(tmp_path):
    path = tmp_path / "events.csv"
    _log(with_time=False).events.rename(columns={"user": "user_id", "item": "item_id"}).to_csv(path, index=False)
    reader = {"_target_": "genrec.data.generic.read_events", "path": str(path)}
    with pytest.raises(DataError, match="key 'data.split.kind'.*needs timestamps"):
        load_dataset(reader, {}, str(tmp_path / "cache"), {"kind": "time", "valid_from": 0.5, "test_from": 0.8})
    assert not (tmp_path / "cache").exists()
    with pytest.raises(DataError, match="needs timestamps"):
        apply_split(build_sequences(_log(with_time=False), PreprocessConfig(1, 1)), SplitConfig("time", 0.5, 0.8))
