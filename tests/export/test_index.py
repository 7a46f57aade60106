"""faiss indexes built from config: exact search by hand, ANN recall against exact, settings kept on disk."""
import faiss
import numpy as np
import pytest
from omegaconf import OmegaConf

from genrec.export.index import build_index, exact_top_k, gpu_available, recall_at_k
from genrec.conf import CONF_DIR


def _clustered(n: int, dim: int, seed: int) -> np.ndarray:
    """Vectors around 20 centres, like trained item embeddings."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dim))
    return (centres[rng.integers(0, 20, n)] + 0.5 * rng.normal(size=(n, dim))).astype(np.float32)


def _conf(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "index" / f"{name}.yaml"))


def test_exact_top_k_by_hand():
    vectors = np.array([[1, 0], [0, 1], [1, 0], [2, 2]], dtype=np.float32)
    ids = np.array([1, 2, 3, 4])
    queries = np.array([[1, 0], [0, -1]], dtype=np.float32)
    # query 0: scores 1, 0, 1, 2 -> 4, then the tie 1/3 towards the lower label; query 1: 0, -1, 0, -2
    assert exact_top_k(queries, vectors, ids, 3).tolist() == [[4, 1, 3], [1, 3, 2]]


def test_recall_at_k_by_hand():
    exact = np.array([[1, 2, 3], [4, 5, 6]])
    approx = np.array([[3, 2, 9], [4, -1, -1]])
    assert recall_at_k(approx, exact) == pytest.approx(3 / 6)


def test_flat_index_is_exact_and_labels_dense_ids():
    vectors = _clustered(300, 16, 0)
    ids = np.arange(1, 301)
    index, info = build_index(vectors, ids, _conf("flat"))
    queries = _clustered(50, 16, 1)
    assert info["type"] == "flat" and info["metric"] == "inner_product"
    assert np.array_equal(index.search(queries, 10)[1], exact_top_k(queries, vectors, ids, 10))


@pytest.mark.parametrize("name", ["ivfpq", "hnsw"])
def test_ann_index_defaults_reach_recall_095_and_survive_a_round_trip(name, tmp_path):
    vectors, queries = _clustered(1000, 32, 0), _clustered(300, 32, 1)
    ids = np.arange(1, 1001)
    index, info = build_index(vectors, ids, _conf(name))
    labels = index.search(queries, 10)[1]
    assert recall_at_k(labels, exact_top_k(queries, vectors, ids, 10)) >= 0.95
    faiss.write_index(index, str(tmp_path / "index.faiss"))
    assert np.array_equal(faiss.read_index(str(tmp_path / "index.faiss")).search(queries, 10)[1], labels)
    if name == "ivfpq":  # defaults chosen by size: nlist <= items / 39, 8-bit codes, m = dim / 2
        assert info["nlist"] == 1000 // 39 and info["nbits"] == 8 and info["m"] == 16


def test_bad_index_configs_name_the_key():
    vectors, ids = _clustered(100, 8, 0), np.arange(1, 101)
    with pytest.raises(ValueError, match="index.type"):
        build_index(vectors, ids, {"type": "lsh"})
    with pytest.raises(ValueError, match="index.m=3 must divide the vector dimension 8"):
        build_index(vectors, ids, {"type": "ivfpq", "m": 3})
    with pytest.raises(ValueError, match="index.gpu must be auto, true or false"):
        build_index(vectors, ids, {"type": "flat", "gpu": "yes"})
    with pytest.raises(ValueError, match="index.gpu=true for an hnsw index"):
        build_index(vectors, ids, {"type": "hnsw", "gpu": True})


@pytest.mark.skipif(gpu_available(), reason="a GPU is visible to faiss")
def test_gpu_required_without_a_gpu_is_a_config_error():
    with pytest.raises(ValueError, match="index.gpu=true but faiss sees no GPU"):
        build_index(_clustered(100, 8, 0), np.arange(1, 101), {"type": "flat", "gpu": True})
