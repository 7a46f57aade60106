"""Collision handling: hand-checked cases and, for random code tables, unique SIDs with the invariants kept."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genrec.tokenize.collisions import (add_disambiguation_level, collision_stats, reassign_to_free_codes,
                                        resolve_collisions)


def test_collision_stats_hand_checked():
    codes = np.array([[0, 1], [0, 1], [2, 3], [0, 1], [2, 2], [2, 2]])
    assert collision_stats(codes) == {"colliding_items": 5, "collision_rate": 5 / 6, "excess_items": 3,
                                      "groups": 2, "max_group": 3}
    assert collision_stats(np.array([[0], [1]]))["colliding_items"] == 0


def test_extra_level_numbers_each_group_by_distance():
    codes = np.array([[0, 1], [0, 1], [2, 3], [0, 1]])
    resolved, size = add_disambiguation_level(codes, order=np.array([0.5, 0.1, 9.0, 0.5]))
    assert resolved.tolist() == [[0, 1, 1], [0, 1, 0], [2, 3, 0], [0, 1, 2]]  # tie 0.5: lower item first
    assert size == 3


def test_nearest_free_hand_checked():
    codes = np.array([[0, 1], [0, 1], [0, 2], [1, 1]])
    distances = np.array([[9.0, 0.1, 9.0, 9.0],    # item 0 is nearest to its code 1: keeps it
                          [0.5, 0.2, 0.3, 0.9],    # item 1 moves: code 2 is nearer but (0, 2) is item 2's
                          [9.0, 9.0, 0.0, 9.0],
                          [9.0, 0.0, 9.0, 9.0]])
    assert reassign_to_free_codes(codes, distances).tolist() == [[0, 1], [0, 0], [0, 2], [1, 1]]


def test_nearest_free_fails_clearly_when_a_prefix_is_full():
    codes = np.array([[0, 0], [0, 0], [0, 0]])
    with pytest.raises(ValueError, match="more than 2 items.*collisions=extra_level"):
        reassign_to_free_codes(codes, np.zeros((3, 2)))


def test_unknown_strategy_names_the_key():
    with pytest.raises(ValueError, match="collisions must be one of"):
        resolve_collisions(np.zeros((2, 2), dtype=np.int64), "shuffle", np.zeros((2, 4)))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 120), levels=st.integers(1, 3), k=st.integers(2, 6), seed=st.integers(0, 2**31 - 1))
def test_every_resolved_sid_is_unique(n, levels, k, seed):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, k, size=(n, levels))
    codes[: n // 3] = codes[0]  # a big shared group besides the random collisions
    distances = rng.random((n, k))
    extra, sizes = resolve_collisions(codes, "extra_level", distances)
    assert len(np.unique(extra, axis=0)) == n and sizes == [k] * levels + [extra[:, -1].max() + 1]
    np.testing.assert_array_equal(extra[:, :levels], codes)
    prefix_items = np.unique(codes[:, :-1], axis=0, return_counts=True)[1].max()
    if prefix_items > k:
        with pytest.raises(ValueError):
            resolve_collisions(codes, "nearest_free", distances)
        return
    free, sizes = resolve_collisions(codes, "nearest_free", distances)
    assert len(np.unique(free, axis=0)) == n and sizes == [k] * levels
    np.testing.assert_array_equal(free[:, :-1], codes[:, :-1])  # earlier levels never change
    _, group, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    group = group.reshape(-1)
    alone = counts[group] == 1
    np.testing.assert_array_equal(free[alone], codes[alone])  # items without a collision keep their codes
    kept = (free == codes).all(axis=1)
    assert (np.bincount(group[kept], minlength=len(counts)) == 1).all()  # one item of each group keeps it
