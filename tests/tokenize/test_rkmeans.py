"""Residual k-means: exact recovery of a two-level structure, determinism, normalisation and balance."""
import math

import numpy as np
import pytest

from genrec.tokenize.health import reconstruction_error
from genrec.tokenize.rkmeans import ResidualKMeans
from tests.tokenize.helpers import make_blobs


def _two_level_points(seed=0):
    """Points ``a_i + b_j``: 6 far-apart coarse centres, 4 small offsets; 10 copies of each of the 24 sums."""
    rng = np.random.default_rng(seed)
    coarse = rng.normal(scale=10.0, size=(6, 8))
    fine = rng.normal(scale=1.0, size=(4, 8))
    i, j = np.meshgrid(np.arange(6), np.arange(4), indexing="ij")
    i, j = np.repeat(i.ravel(), 10), np.repeat(j.ravel(), 10)
    return (coarse[i] + fine[j]).astype(np.float32), i, j


def _one_to_one(codes, labels):
    """Each code holds one label and each label one code."""
    pairs = set(zip(codes.tolist(), labels.tolist()))
    return len(pairs) == len(set(codes.tolist())) == len(set(labels.tolist()))


def test_recovers_a_two_level_structure_exactly():
    x, i, j = _two_level_points()
    model = ResidualKMeans(num_levels=2, codebook_size=6, niter=30).fit(x, seed=0)
    codes = model.encode(x)
    assert _one_to_one(codes[:, 0], i)
    # level 2 sees the fine offsets (plus a tiny leftover from the level-1 centroid): 4 of its 6 codes suffice
    assert len(set(zip(codes[:, 1].tolist(), j.tolist()))) == len(set(codes[:, 1].tolist()))
    assert reconstruction_error(x, model.reconstruct(x))["relative"] < 1e-6


def test_more_levels_reconstruct_better_and_decode_sums_centroids():
    x, _ = make_blobs(500, 10, 12, seed=1, spread=0.5)
    errors = [reconstruction_error(x, ResidualKMeans(levels, 16).fit(x).reconstruct(x))["relative"]
              for levels in (1, 2, 3)]
    assert errors[0] > errors[1] > errors[2]
    model = ResidualKMeans(3, 16).fit(x)
    codes = model.encode(x)
    expected = sum(model.codebooks[level][codes[:, level]] for level in range(3))
    np.testing.assert_allclose(model.decode(codes), expected, rtol=1e-6)


def test_seeded_determinism():
    x, _ = make_blobs(400, 8, 10, seed=2, spread=0.4)
    first = ResidualKMeans(3, 12).fit(x, seed=5).encode(x)
    np.testing.assert_array_equal(first, ResidualKMeans(3, 12).fit(x, seed=5).encode(x))
    assert not np.array_equal(first, ResidualKMeans(3, 12).fit(x, seed=6).encode(x))


def test_normalized_residuals_cluster_unit_vectors():
    x, _ = make_blobs(400, 8, 10, seed=3, spread=0.4)
    model = ResidualKMeans(3, 12, normalize_residuals=True).fit(x)
    codes, inputs = model._levels(x)
    for unit in inputs:
        np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-5)
    assert len(model.norm_scales) == 3 and model.norm_scales[1] < 1.0  # residuals of unit vectors are shorter
    assert reconstruction_error(x, model.reconstruct(x))["relative"] < 0.5


def test_balanced_levels_hold_at_most_ceil_n_over_k_items():
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.normal(scale=0.1, size=(450, 6)), rng.normal(scale=2.0, size=(50, 6))]).astype(np.float32)
    codes = ResidualKMeans(2, 16, balanced=True).fit(x).encode(x)
    for level in range(2):
        counts = np.bincount(codes[:, level], minlength=16)
        assert counts.max() <= math.ceil(500 / 16) and (counts > 0).all()


def test_bad_settings_name_the_key():
    with pytest.raises(ValueError, match="tokenizer.codebook_size"):
        ResidualKMeans(2, 1)
    with pytest.raises(ValueError, match="at least 64 points"):
        ResidualKMeans(1, 64).fit(np.zeros((10, 4), dtype=np.float32))
