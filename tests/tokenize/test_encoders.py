"""Content encoders: item texts and their fallbacks, the real MiniLM (both backends, the cache), categorical
multi-hot vectors, precomputed embedding files and a trained run's item table."""
import json

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from genrec.conf import compose_config
from genrec.errors import DataError, UserError
from genrec.runs import file_digest
from genrec.tokenize.encoders import (CategoricalEncoder, CollaborativeEncoder, FileEncoder, FusedEncoder,
                                      TextEncoder, item_texts)
from genrec.training.builders import build_datamodule, build_task
from tests.shared import skip_without_shared
from tests.tokenize.helpers import make_data

TITLES = ["Red matte lipstick", "Crimson matte lip colour", "Stainless steel hex bolts, 50 pack",
          "Zinc-plated steel hex bolt set", "Vitamin C face serum"]


def test_item_texts_join_fields_and_fall_back_to_other_fields():
    items = pd.DataFrame({"title": ["Eyeshadow &amp; Palette", "", None], "brand": ["WAWO", "Stanley", None],
                          "categories": [["Beauty", "Makeup"], "", "Tools"]})
    texts, without = item_texts(make_data(items), ["title", "brand", "categories", "description"])
    assert texts == ["Title: Eyeshadow & Palette; Brand: WAWO; Categories: Beauty, Makeup",
                     "Brand: Stanley",  # no title: the other fields stand in
                     "Categories: Tools"]
    assert without == 0
    texts, _ = item_texts(make_data(items), ["title"], on_empty="raw_id")
    assert texts == ["Eyeshadow & Palette", "raw2", "raw3"]  # one field: the value alone


def test_items_without_text_fail_with_their_count():
    items = pd.DataFrame({"title": ["a", "", "  ", "d", None]})
    with pytest.raises(DataError, match=r"3 of 5 items have no text in fields \['title'\].*dense IDs \[2, 3, 5\]"):
        item_texts(make_data(items), ["title", "brand"])
    with pytest.raises(DataError, match="none of the text fields"):
        item_texts(make_data(items), ["description"])
    with pytest.raises(DataError, match="no item content"):
        item_texts(make_data(None, raw_ids=[1, 2]))


@pytest.fixture(scope="module")
def minilm_data():
    return make_data(pd.DataFrame({"title": TITLES}))


def test_minilm_embeds_offline_and_both_backends_agree(minilm_data, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache = tmp_path_factory.mktemp("emb")
    encoder = TextEncoder(fields=["title"], cache_dir=str(cache))
    first = encoder.encode(minilm_data)
    x = first.vectors
    assert x.shape == (5, 384) and x.dtype == np.float32 and not first.info["cache_hit"]
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    similarity = x @ x.T
    assert similarity[0, 1] > similarity[0, 2] + 0.2 and similarity[2, 3] > similarity[2, 0] + 0.2
    # the transformers backend (AutoModel + mean pooling + normalisation) reproduces sentence-transformers
    plain = TextEncoder(fields=["title"], backend="transformers").encode(minilm_data).vectors
    np.testing.assert_allclose(plain, x, atol=2e-5)
    # the second call reads the cache (same vectors, no model); changed text -> another cache file
    again = encoder.encode(minilm_data)
    assert again.info["cache_hit"] and np.array_equal(again.vectors, x)
    assert encoder.cache_path(TITLES) != encoder.cache_path(TITLES[:4] + ["Vitamin C face cream"])


def test_unknown_model_fails_without_downloading(minilm_data, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="encoder.model: cannot load 'no-such-org/no-such-model' without "
                                         "downloading"):
        TextEncoder(model="no-such-org/no-such-model").embed(["x"])


def test_bad_settings_name_the_key():
    with pytest.raises(ValueError, match="encoder.backend"):
        TextEncoder(backend="onnx")
    with pytest.raises(ValueError, match="encoder.on_empty"):
        TextEncoder(on_empty="skip")


def test_categorical_multi_hot_hand_checked():
    items = pd.DataFrame({"brand": ["A", "B", "A", ""], "genres": [["x", "y"], ["y"], [], ["z"]]})
    out = CategoricalEncoder(fields=["brand", "genres"]).encode(make_data(items))
    # vocabularies by frequency: brand A, B; genres y, x, z. Each block unit norm, all scaled by 1/sqrt(2)
    s, h = 1 / np.sqrt(2), 1 / np.sqrt(2) / np.sqrt(2)
    expected = np.array([[s, 0, h, h, 0], [0, s, s, 0, 0], [s, 0, 0, 0, 0], [0, 0, 0, 0, s]], dtype=np.float32)
    np.testing.assert_allclose(out.vectors, expected, rtol=1e-6)
    assert out.info["vocabulary"] == {"brand": 2, "genres": 3}
    with pytest.raises(DataError, match="1 of 2 items have no value"):
        CategoricalEncoder(fields=["brand"]).encode(make_data(pd.DataFrame({"brand": ["A", None]})))
    with pytest.raises(DataError, match=r"lacks categorical field\(s\) \['genres'\]"):
        CategoricalEncoder(fields=["genres"]).encode(make_data(pd.DataFrame({"brand": ["A"]})))


def test_parquet_embeddings_are_reordered_to_dense_ids(tmp_path):
    data = make_data(None, raw_ids=[30, 10, 20])
    path = tmp_path / "emb.parquet"
    pd.DataFrame({"item": [10, 20, 30, 99], "embedding": [[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [9.0, 9.0]]}
                 ).to_parquet(path)
    np.testing.assert_array_equal(FileEncoder(str(path)).encode(data).vectors, [[3, 0], [1, 0], [2, 0]])


def test_fused_embeddings_are_the_weighted_unit_parts_side_by_side(tmp_path):
    data = make_data(None, raw_ids=["a", "b", "c"])
    first, second = np.array([[3.0, 4.0], [0.0, 2.0], [1.0, 0.0]]), np.array([[1.0, 1.0, 0.0], [0, 0, 5], [2, 0, 0]])
    np.save(tmp_path / "first.npy", first.astype(np.float32))
    np.save(tmp_path / "second.npy", second.astype(np.float32))
    parts = {name: {"_target_": "genrec.tokenize.encoders.FileEncoder", "path": str(tmp_path / f"{name}.npy")}
             for name in ("first", "second")}
    out = FusedEncoder(parts, {"first": 1.0, "second": 4.0}).encode(data)
    expected = np.array([[0.6, 0.8, 2 / np.sqrt(2), 2 / np.sqrt(2), 0], [0, 1, 0, 0, 2], [1, 0, 2, 0, 0]])
    np.testing.assert_allclose(out.vectors, expected, rtol=1e-6)
    # squared distances: the weighted sum of the parts' squared distances between unit vectors
    d = ((out.vectors[0] - out.vectors[2]) ** 2).sum()
    unit = [p / np.linalg.norm(p, axis=1, keepdims=True) for p in (first, second)]
    assert d == pytest.approx(((unit[0][0] - unit[0][2]) ** 2).sum() + 4 * ((unit[1][0] - unit[1][2]) ** 2).sum())
    assert out.info["parts"]["second"]["dim"] == 3 and out.info["weights"] == {"first": 1.0, "second": 4.0}
    with pytest.raises(UserError, match="encoder.weights: expected one weight per part"):
        FusedEncoder(parts, {"first": 1.0})
    with pytest.raises(UserError, match="every weight must be positive"):
        FusedEncoder(parts, {"first": 1.0, "second": 0.0})


def test_embedding_files_that_do_not_match_the_items_fail_clearly(tmp_path):
    data = make_data(None, raw_ids=["a", "b", "c"])
    short = tmp_path / "short.npy"
    np.save(short, np.zeros((2, 4), dtype=np.float32))
    with pytest.raises(DataError, match=r"short.npy: has shape \(2, 4\); expected \(3, D\)"):
        FileEncoder(str(short)).encode(data)
    partial = tmp_path / "partial.parquet"
    pd.DataFrame({"item": ["a", "x"], "embedding": [[1.0], [2.0]]}).to_parquet(partial)
    with pytest.raises(DataError, match=r"no embedding for 2 of 3 items .*\['b', 'c'\]"):
        FileEncoder(str(partial)).encode(data)
    twice = tmp_path / "twice.parquet"
    pd.DataFrame({"item": ["a", "a", "b", "c"], "embedding": [[1.0]] * 4}).to_parquet(twice)
    with pytest.raises(DataError, match="1 item IDs appear more than once"):
        FileEncoder(str(twice)).encode(data)
    nan = tmp_path / "nan.npy"
    np.save(nan, np.array([[0.0], [np.nan], [1.0]], dtype=np.float32))
    with pytest.raises(DataError, match=r"1 rows hold NaN.*dense IDs \[2\]"):
        FileEncoder(str(nan)).encode(data)
    with pytest.raises(DataError, match="embedding file not found"):
        FileEncoder(str(tmp_path / "none.npy")).encode(data)


TINY = ["data.reader.num_users=200", "data.reader.num_items=80", "data.reader.num_clusters=6", "model.dim=8"]


def test_collaborative_embeddings_are_the_runs_item_table(tmp_path):
    cfg = compose_config("train", overrides=TINY + [f"data.cache_dir={tmp_path / 'cache'}"])
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    task = build_task(cfg, datamodule.data.num_items)
    best = run_dir / "checkpoints" / "best.ckpt"
    torch.save({"state_dict": task.state_dict()}, best)
    (run_dir / "metrics.json").write_text(json.dumps({"checkpoints": {"best": {"file": "checkpoints/best.ckpt",
                                                                               "sha256": file_digest(best)}}}))
    out = CollaborativeEncoder(str(run_dir)).encode(datamodule.data)
    expected = task.model.item_embedding.table().detach().numpy()[1:]
    np.testing.assert_array_equal(out.vectors, expected)
    other = make_data(None, raw_ids=list(range(1, datamodule.data.num_items + 1)))
    with pytest.raises(DataError, match="the run was trained on 'synthetic'"):
        CollaborativeEncoder(str(run_dir)).encode(other)
    with pytest.raises(UserError, match="encoder.run_dir=.*nothing: does not exist; expected a run folder"):
        CollaborativeEncoder(str(tmp_path / "nothing")).encode(other)


def _real(name):
    cfg = compose_config("tokenize", overrides=[f"data={name}"])
    from genrec.data.datamodule import load_dataset

    return load_dataset(cfg.data.reader, cfg.data.preprocess, cache_dir=None)


@pytest.mark.shared_data
@skip_without_shared
def test_beauty_items_without_title_are_counted():
    data = _real("beauty")
    with pytest.raises(DataError, match="7 of 12101 items have no text in fields \\['title'\\]"):
        item_texts(data)
    texts, without = item_texts(data, on_empty="raw_id")
    assert without == 7 and all(texts) and len(texts) == 12101


@pytest.mark.shared_data
@skip_without_shared
def test_scientific_items_join_all_four_text_fields():
    texts, without = item_texts(_real("scientific"))
    assert without == 0 and len(texts) == 4344
    # counts of empty fields checked against the raw Scientific.item.json: brand 12, categories 131, description 123
    assert sum(t.startswith("Title: ") for t in texts) == 4344
    assert [sum(f"; {field}: " in t for t in texts) for field in ("Brand", "Categories", "Description")] == [
        4344 - 12, 4344 - 131, 4344 - 123]
