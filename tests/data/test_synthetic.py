"""The synthetic generator: deterministic, and each mechanism of its module doc shows in the data it makes."""
import numpy as np
import pandas as pd
import pytest

from genrec.data.preprocess import PreprocessConfig, build_sequences
from genrec.data.stats import taste_persistence, transition_stats
from genrec.data.synthetic import generate_synthetic
from genrec.errors import ConfigError

SMALL = dict(num_users=2000, num_items=1000, num_clusters=20, seed=0)


def sequences(**overrides):
    return build_sequences(generate_synthetic(**(SMALL | overrides)), PreprocessConfig(5, 1))


@pytest.fixture(scope="module")
def log():
    return generate_synthetic(**SMALL)


def test_synthetic_is_deterministic_and_seed_sensitive():
    a = generate_synthetic(num_users=200, num_items=100, num_clusters=5, seed=7)
    b = generate_synthetic(num_users=200, num_items=100, num_clusters=5, seed=7)
    c = generate_synthetic(num_users=200, num_items=100, num_clusters=5, seed=8)
    assert a.events.equals(b.events) and a.items.equals(b.items)
    assert not a.events.equals(c.events)


def test_events_time_lengths_and_no_repeats(log):
    ev = log.events
    assert (ev.groupby("user")["timestamp"].diff().dropna() > 0).all()  # time moves forward
    assert not ev.duplicated(["user", "item"]).any()                    # no user meets an item twice
    lengths = ev.groupby("user").size()
    assert lengths.min() >= 5 and lengths.max() <= 200 and len(lengths) == SMALL["num_users"]
    assert lengths.mean() == pytest.approx(20, rel=0.15)
    assert lengths.max() > 3 * lengths.mean()                           # a long tail


def test_popularity_is_skewed(log):
    counts = log.events["item"].value_counts()
    assert counts.iloc[0] > 5 * counts.median()
    assert counts.iloc[:len(counts) // 10].sum() > 0.25 * counts.sum()  # the top 10% of items: 10% if uniform


def test_sessions_follow_one_cluster_and_items_carry_it(log):
    ev = log.events
    cluster = log.items["latent_cluster"].to_numpy()[ev["item"].to_numpy()]
    same_user = ev["user"].to_numpy()[:-1] == ev["user"].to_numpy()[1:]
    gap = np.diff(ev["timestamp"].to_numpy())
    same_cluster = cluster[:-1] == cluster[1:]
    chance = (np.bincount(cluster) / len(cluster)) ** 2
    in_session, new_session = same_user & (gap < 3600), same_user & (gap > 86_400 // 4)
    assert same_cluster[in_session].mean() > 5 * chance.sum()
    assert same_cluster[in_session].mean() > same_cluster[new_session].mean() + 0.2
    # item text carries the cluster: the items of one cluster share their category
    assert (log.items.groupby("latent_cluster")["categories"].nunique() == 1).all()


@pytest.mark.parametrize("lags, lag", [((1.0,), 1), ((0.0, 1.0), 2), ((0.0, 0.0, 1.0), 3)])
def test_related_items_follow_the_item_so_many_steps_back(lags, lag):
    """With one related item per item, always followed from the item ``lag`` steps back, that item predicts the
    next one (its most frequent successor ``lag`` steps later is right most of the time); for ``lag`` 2 or 3 the
    items in between do not (for ``lag`` 1 the chain makes the item two back predictive too)."""
    data = sequences(num_related=1, p_related=1.0, related_lags=lags)
    share = transition_stats(data, lags=(1, 2, 3))["top_successor_share_by_lag"]
    assert share[str(lag)] > 0.5
    if lag > 1:
        assert all(share[str(other)] < 0.25 for other in (1, 2, 3) if other != lag)


def test_related_items_and_sessions_fade_with_the_lag():
    share = transition_stats(sequences(), lags=(1, 2, 3, 8))["top_successor_share_by_lag"]
    assert share["1"] > share["2"] > share["3"] > 2 * share["8"]


def test_users_keep_their_tastes():
    """A user's two halves are more alike than two users' halves (taste lift > 0), more so with one taste and no
    exploring, drift or related items crossing sessions, than when every session explores any cluster (where only
    the sessions that span the middle of a sequence link its halves)."""
    loyal = taste_persistence(sequences(tastes_per_user=1, p_explore=0.0, p_drift=0.0, p_related=0.0), clusters=20)
    anyone = taste_persistence(sequences(p_explore=1.0, p_related=0.0), clusters=20)
    default = taste_persistence(sequences(), clusters=20)
    assert loyal["taste_lift"] > 0.8
    assert loyal["taste_lift"] > anyone["taste_lift"] + 0.4
    assert anyone["taste_lift"] < default["taste_lift"] < loyal["taste_lift"]


@pytest.mark.parametrize("override, key", [
    (dict(num_clusters=1), "data.reader.num_items"),
    (dict(tastes_per_user=0), "data.reader.tastes_per_user"),
    (dict(min_length=10, max_length=5), "data.reader.min_length"),
    (dict(p_related=1.5), "data.reader.p_related"),
    (dict(related_lags=[]), "data.reader.related_lags"),
])
def test_bad_parameters_name_their_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        generate_synthetic(**(dict(num_users=10, num_items=50, num_clusters=5) | override))
