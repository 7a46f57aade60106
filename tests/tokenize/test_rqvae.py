"""RQ-VAE: codes equal a NumPy re-computation from the weights, seeded determinism, cluster recovery at level 1,
k-means initialisation and dead-code reset."""
import numpy as np
import pytest
import torch

from genrec.tokenize.rqvae import RQVAE, RQVAETokenizer
from tests.tokenize.helpers import make_blobs, purity

SMALL = dict(hidden_dims=(64, 32), latent_dim=8, batch_size=128, lr=3e-3)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These tiny matrices gain nothing from threads, and on a shared 2-core machine OpenMP's waiting threads
    made them 25x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def clustered():
    return make_blobs(800, 8, 32, seed=0, spread=0.3)


@pytest.fixture(scope="module")
def trained(clustered):
    x, _ = clustered
    return RQVAETokenizer(num_levels=2, codebook_size=16, epochs=30, **SMALL).fit(x, seed=0)


def test_codes_match_a_numpy_recomputation(trained, clustered):
    x, _ = clustered
    model = trained.model
    with torch.no_grad():
        residual = model.encoder(torch.from_numpy(x)).numpy().astype(np.float64)
    books = [book.detach().numpy().astype(np.float64) for book in model.codebooks]
    expected = []
    for book in books:
        code = ((residual[:, None, :] - book[None]) ** 2).sum(-1).argmin(1)
        expected.append(code)
        residual = residual - book[code]
    np.testing.assert_array_equal(trained.encode(x), np.stack(expected, 1))
    last = ((residual + books[-1][expected[-1]])[:, None, :] - books[-1][None]) ** 2
    np.testing.assert_allclose(trained.last_level_distances(x), last.sum(-1), rtol=1e-3, atol=1e-4)


def test_recovers_the_clusters_at_level_one_far_above_chance(trained, clustered):
    x, labels = clustered
    level1 = trained.encode(x)[:, 0]
    chance = purity(np.random.default_rng(0).permutation(level1), labels)
    assert purity(level1, labels) >= 0.95 and chance < 0.3
    assert trained.describe()["latent_unexplained_variance"] < 0.2


def test_seeded_determinism(clustered):
    x, _ = clustered
    x = x[:300]

    def fit(seed):
        return RQVAETokenizer(num_levels=2, codebook_size=8, epochs=4, **SMALL).fit(x, seed=seed)

    first, again, other = fit(3), fit(3), fit(4)
    np.testing.assert_array_equal(first.encode(x), again.encode(x))
    assert all(torch.equal(a, b) for a, b in zip(first.model.codebooks, again.model.codebooks))
    assert [h["recon_loss"] for h in first.history] == [h["recon_loss"] for h in again.history]
    assert not torch.equal(first.model.codebooks[0], other.model.codebooks[0])


def test_kmeans_init_starts_from_the_latents_clusters(clustered):
    x, labels = clustered
    one_epoch = RQVAETokenizer(num_levels=1, codebook_size=8, epochs=1, lr=1e-6, reset_dead_codes=False,
                               hidden_dims=(64, 32), latent_dim=8).fit(x, seed=0)
    assert purity(one_epoch.encode(x)[:, 0], labels) > 0.8  # clusters found before any real training


def test_dead_codes_are_reset_so_no_level_collapses(clustered):
    x, _ = clustered
    settings = dict(num_levels=2, codebook_size=16, epochs=15, kmeans_init=False, **SMALL)
    collapsed = RQVAETokenizer(reset_dead_codes=False, **settings).fit(x, seed=0)
    revived = RQVAETokenizer(reset_dead_codes=True, **settings).fit(x, seed=0)
    used = [[len(np.unique(t.encode(x)[:, level])) for level in range(2)] for t in (collapsed, revived)]
    assert revived.dead_codes_reset > 0
    assert min(used[1]) >= 14 and min(used[0]) < min(used[1])


def test_straight_through_gradient_reaches_the_encoder():
    model = RQVAE(input_dim=6, hidden_dims=(5,), latent_dim=3, codebook_sizes=(4, 4))
    out = model(torch.randn(10, 6))
    (out.recon_loss + out.quant_loss).backward()
    assert model.encoder[0].weight.grad.abs().sum() > 0 and model.codebooks[0].grad.abs().sum() > 0
    assert out.codes.shape == (10, 2) and out.residuals.shape == (10, 2, 3)


def test_too_few_items_for_the_codebook():
    with pytest.raises(ValueError, match="codebooks of 64 codes exceed the 10 items"):
        RQVAETokenizer(codebook_size=64, epochs=1).fit(np.zeros((10, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="first_codebook_size >= 2"):
        RQVAETokenizer(first_codebook_size=1)


def test_a_larger_first_codebook_splits_the_first_level_finer(clustered):
    """``first_codebook_size``: the first level has its own size (every code a valid index, more of them used), the
    others keep ``codebook_size``; the codes still equal the nearest-code recomputation."""
    x, _ = clustered
    wide = RQVAETokenizer(num_levels=2, codebook_size=8, first_codebook_size=32, epochs=5, **SMALL).fit(x, seed=0)
    assert wide.codebook_sizes == [32, 8] and [tuple(b.shape) for b in wide.model.codebooks] == [(32, 8), (8, 8)]
    codes = wide.encode(x)
    assert codes[:, 0].max() < 32 and codes[:, 1].max() < 8 and len(np.unique(codes[:, 0])) > 8
    with torch.no_grad():
        z = wide.model.encoder(torch.from_numpy(x))
        first = torch.cdist(z, wide.model.codebooks[0]).argmin(1).numpy()
    np.testing.assert_array_equal(codes[:, 0], first)
    assert wide.describe()["first_codebook_size"] == 32
    assert wide.last_level_distances(x).shape == (len(x), 8)


@pytest.mark.slow
def test_minilm_text_of_synthetic_items_gives_their_latent_clusters_at_level_one():
    """genrec's synthetic items: cluster-specific vocabulary, brands and categories in their text."""
    from genrec.data.synthetic import generate_synthetic
    from genrec.tokenize.encoders import TextEncoder
    from tests.tokenize.helpers import make_data

    items = generate_synthetic(num_users=50, num_items=600, num_clusters=10, seed=1).items
    x = TextEncoder().encode(make_data(items)).vectors
    labels = items["latent_cluster"].to_numpy()
    tokenizer = RQVAETokenizer(num_levels=2, codebook_size=16, epochs=60, hidden_dims=(128, 64), latent_dim=16,
                               batch_size=128, lr=3e-3).fit(x, seed=0)
    level1 = tokenizer.encode(x)[:, 0]
    chance = purity(np.random.default_rng(0).permutation(level1), labels)
    assert purity(level1, labels) >= 0.9 and chance < 0.3
