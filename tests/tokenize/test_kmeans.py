"""faiss k-means and assignment against NumPy references; the balanced assignment's guarantees."""
import math

import numpy as np
import pytest

from genrec.tokenize.kmeans import assign, balanced_assign, balanced_kmeans, kmeans, squared_distances
from tests.tokenize.helpers import make_blobs, purity


def _numpy_distances(x, centroids):
    x, centroids = x.astype(np.float64), centroids.astype(np.float64)
    return ((x[:, None, :] - centroids[None, :, :]) ** 2).sum(-1)


def test_faiss_assignment_equals_numpy_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 24)).astype(np.float32)
    centroids = rng.normal(size=(97, 24)).astype(np.float32)
    codes, distances = assign(x, centroids)
    reference = _numpy_distances(x, centroids)
    expected = reference.argmin(1)
    differ = np.nonzero(codes != expected)[0]
    # float32 vs float64 may only flip exact near-ties: both codes must then be equally near
    assert len(differ) <= 2
    np.testing.assert_allclose(reference[differ, codes[differ]], reference[differ, expected[differ]], rtol=1e-5)
    np.testing.assert_allclose(distances, reference[np.arange(len(x)), codes], rtol=1e-4, atol=1e-4)


def test_squared_distances_equal_numpy_reference():
    rng = np.random.default_rng(1)
    x, centroids = rng.normal(size=(200, 8)), rng.normal(size=(13, 8))
    np.testing.assert_allclose(squared_distances(x, centroids), _numpy_distances(x, centroids), rtol=1e-4, atol=1e-4)


def test_kmeans_is_seeded_and_finds_separated_clusters():
    x, labels = make_blobs(600, 12, 16, seed=3, spread=0.05)
    first, again, other = kmeans(x, 12, seed=7), kmeans(x, 12, seed=7), kmeans(x, 12, seed=8)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert purity(assign(x, first)[0], labels) > 0.9


def test_kmeans_needs_as_many_points_as_codes():
    with pytest.raises(ValueError, match="at least 10 points"):
        kmeans(np.zeros((5, 3), dtype=np.float32), 10)


def test_balanced_assign_hand_checked():
    # every point prefers centroid 0; capacity 2: the two nearest to 0 stay, the farthest moves to 1
    distances = np.array([[0.0, 5.0], [1.0, 4.0], [2.0, 3.0]])
    assert balanced_assign(distances, capacity=2).tolist() == [0, 0, 1]
    # point 2 is nearer to centroid 0 than point 0 is: point 0 gives way, although it proposed first
    distances = np.array([[3.0, 3.5], [0.0, 9.0], [1.0, 1.1]])
    assert balanced_assign(distances, capacity=2).tolist() == [1, 0, 0]


def test_balanced_assign_without_pressure_is_nearest():
    distances = np.random.default_rng(0).random((50, 7))
    np.testing.assert_array_equal(balanced_assign(distances, capacity=50), distances.argmin(1))


def test_balanced_assign_respects_capacity():
    rng = np.random.default_rng(2)
    distances = rng.random((1000, 16)) * (1 + 10 * rng.random(16))  # some centroids far from everything
    codes = balanced_assign(distances, capacity=63)
    assert (codes >= 0).all() and np.bincount(codes, minlength=16).max() <= 63
    with pytest.raises(ValueError, match="cannot hold"):
        balanced_assign(distances, capacity=62)


def test_balanced_kmeans_evens_out_skewed_data():
    rng = np.random.default_rng(4)
    dense = rng.normal(scale=0.1, size=(900, 8))      # most points in one blob
    sparse = rng.normal(scale=3.0, size=(100, 8))
    x = np.concatenate([dense, sparse]).astype(np.float32)
    k = 20
    plain = np.bincount(assign(x, kmeans(x, k, seed=0))[0], minlength=k)
    centroids = balanced_kmeans(x, k, seed=0)
    balanced = np.bincount(balanced_assign(squared_distances(x, centroids), math.ceil(len(x) / k)), minlength=k)
    assert balanced.max() <= math.ceil(len(x) / k) < plain.max()
    assert (balanced > 0).all()
