"""``data.split.cold_items`` (TIGER §4.3's cold start): a seeded share of the items is held out of training entirely.
No training example, baseline count, distillation teacher or collaborative SID table of the split reads a cold
item's interaction; the held-out targets are the same events as without it; bad settings name their key."""
import numpy as np
import pytest

from genrec.data.batch import EvalSequences, TrainPrefixes, TrainSequences
from genrec.data.split import SplitConfig, apply_split, split_summary
from genrec.errors import ConfigError
from genrec.models.counts import ItemTransitions, item_popularity


@pytest.fixture(scope="module")
def cold(data):
    return apply_split(data, SplitConfig(cold_items=0.1, cold_seed=7))


def test_a_seeded_share_of_the_items_is_cold(data, cold):
    assert len(cold.cold_items) == round(0.1 * data.num_items) and cold.num_items == data.num_items
    assert np.array_equal(cold.cold_items, np.unique(cold.cold_items)) and cold.cold_items.min() >= 1
    again = apply_split(data, SplitConfig(cold_items=0.1, cold_seed=7))
    assert np.array_equal(again.cold_items, cold.cold_items)
    assert not np.array_equal(apply_split(data, SplitConfig(cold_items=0.1, cold_seed=8)).cold_items, cold.cold_items)
    assert apply_split(data, SplitConfig()).cold_items is None


def test_no_cold_item_reaches_a_training_example_or_a_baseline(data, cold):
    is_cold = np.isin(np.arange(cold.num_items + 1), cold.cold_items)
    assert not is_cold[cold.item_ids[cold.training_positions()]].any()
    for examples in (TrainSequences(cold, max_len=1000), TrainPrefixes(cold, max_len=5)):
        for i in range(len(examples)):
            ex = examples[i]
            assert not is_cold[ex.items].any() and not is_cold[ex.targets].any()
    assert (item_popularity(cold)[cold.cold_items] == 0).all()
    counts = ItemTransitions(cold, num_last=3, skip=True).counts
    assert counts[cold.cold_items].nnz == 0 and counts[:, cold.cold_items].nnz == 0
    # what was removed is exactly the cold items' training events: the warm training events stay, in order
    for u in range(data.num_users):
        before = data.item_ids[data.offsets[u]:data.valid_at[u]]
        after = cold.item_ids[cold.offsets[u]:cold.valid_at[u]]
        assert after.tolist() == [i for i in before.tolist() if not is_cold[i]]


def test_held_out_targets_are_the_same_events(data, cold):
    """Every user keeps their validation and test targets (cold or not); a user whose training part was all cold is
    not validated (nothing before the target), but tested from the validation item."""
    for split in ("valid", "test"):
        _, before = data.targets(split)
        users, after = cold.targets(split)
        assert cold.item_ids[after].tolist() == data.item_ids[before[np.isin(data.targets(split)[0], users)]].tolist()
    test = EvalSequences(cold, 1000, "test")
    for k in range(len(test)):
        u = int(test.users[k])
        assert test[k].targets.tolist() == [data.sequence(u)[-1]]
        assert test[k].items[-1] == data.sequence(u)[-2]
    summary = split_summary(cold)
    assert summary["cold_items"] == 0.1 and summary["cold_item_count"] == len(cold.cold_items)
    assert summary["cold_training_events_removed"] == data.train_lengths.sum() - cold.train_lengths.sum() > 0
    assert summary["warm_item_count"] == data.num_items - len(cold.cold_items)
    users, at = cold.targets("test")
    assert summary["cold_targets"]["test"] == int(np.isin(cold.item_ids[at], cold.cold_items).sum()) > 0
    assert summary["targets_not_in_training"]["test"] >= summary["cold_targets"]["test"]


@pytest.mark.parametrize("node, key", [({"cold_items": 1.0}, "cold_items"), ({"cold_items": -0.1}, "cold_items"),
                                       ({"cold_items": True}, "cold_items"), ({"cold_seed": -1}, "cold_seed"),
                                       ({"cold_seed": 1.5}, "cold_seed"), ({"cold": 0.1}, "cold")])
def test_bad_settings_name_their_key(node, key):
    with pytest.raises(ConfigError, match=f"data.split.{key}"):
        SplitConfig.from_config(node)
