"""Side features and actions in SASRec and HSTU: the target's action never reaches its score (an input's does),
item vectors stay a function of the item (the same from the full table and from a lookup, changed by the item's
genres), every feature table learns, features off build today's model, a tiny run with every feature trains through
genrec-train, and the export of a feature model and a feature the data lacks are one-line ConfigErrors."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from genrec import train as train_entry
from genrec.conf import compose_config
from genrec.data.batch import EvalSequences, TrainSequences, collate
from genrec.data.features import FeatureConfig, encode_features
from genrec.embedding import ItemEmbedding
from genrec.embedding.features import FeatureEmbedding
from genrec.errors import ConfigError
from genrec.export import cli as export_cli
from genrec.models.hstu import HSTU
from genrec.models.losses import FullSoftmaxLoss
from genrec.models.recommender import SequentialRecommender
from genrec.models.sasrec import SASRec
from genrec.training.builders import build_datamodule, build_task
from tests.conftest import TINY_RUN
from tests.data.test_features import ALL, tiny, write_ml100k

DIM = 16


def recommender(kind: str, encoded, num_items: int) -> SequentialRecommender:
    torch.manual_seed(0)
    encoder = (SASRec(dim=DIM, num_layers=1, num_heads=2, max_len=10, dropout=0.0) if kind == "sasrec" else
               HSTU(dim=DIM, num_layers=1, num_heads=1, attention_dim=8, hidden_dim=8, max_len=10, dropout=0.0))
    features = FeatureEmbedding(encoded, DIM, init_std=0.5) if encoded is not None else None
    return SequentialRecommender(ItemEmbedding(num_items, DIM, init_std=0.5), encoder, "cosine", features).eval()


def scores(model: SequentialRecommender, data, split: str) -> torch.Tensor:
    with torch.no_grad():
        return model.score_all(collate([EvalSequences(data, 10, split)[u] for u in range(data.num_users)]))


@pytest.mark.parametrize("kind", ["sasrec", "hstu"])
@pytest.mark.parametrize("split, held_out", [("valid", 2), ("test", 1)])
def test_the_targets_action_does_not_reach_its_score(tmp_path, kind, split, held_out):
    data, encoded = encode_features(tiny(tmp_path), ALL)
    model = recommender(kind, encoded, data.num_items)
    before = scores(model, data, split)
    target = data.offsets[1:] - held_out  # each user's target event (and, for valid, the test event after it)
    changed = data.actions.copy()
    for t in range(held_out):
        changed[target + t] = changed[target + t] % encoded.num_actions + 1
    assert torch.equal(scores(model, replace(data, actions=changed), split), before)
    changed = data.actions.copy()
    changed[target - 1] = changed[target - 1] % encoded.num_actions + 1  # the last input event's action
    after = scores(model, replace(data, actions=changed), split)
    assert not torch.isclose(after[:, 1:], before[:, 1:]).all(dim=1).any()  # every user's scores move


def test_item_vectors_are_a_function_of_the_item(tmp_path):
    data, encoded = encode_features(tiny(tmp_path), ALL)
    model = recommender("hstu", encoded, data.num_items)
    ids = torch.tensor([[1, 4], [2, 3]])
    with torch.no_grad():
        table = model.all_item_vectors()
        assert torch.allclose(model.item_vectors(ids), table[ids], atol=1e-6)
        items = encoded.items
        items.values[items.offsets[4]:items.offsets[5]] = [2, 4]  # item 4: Action, Drama -> Comedy, unknown
        changed = recommender("hstu", encoded, data.num_items).all_item_vectors()
    assert torch.equal(changed[:4], table[:4]) and not torch.allclose(changed[4], table[4])


@pytest.mark.parametrize("kind", ["sasrec", "hstu"])
def test_every_feature_table_learns(tmp_path, kind):
    data, encoded = encode_features(tiny(tmp_path), ALL)
    model = recommender(kind, encoded, data.num_items).train()
    batch = collate([TrainSequences(data, 10)[i] for i in range(len(TrainSequences(data, 10)))])
    model.training_loss(batch, FullSoftmaxLoss()).backward()
    grads = {name: p.grad for name, p in model.features.named_parameters()}
    assert len(grads) == 3
    assert all(g is not None and g.abs().sum() > 0 for g in grads.values())


def test_features_off_build_todays_model(tmp_path):
    data = tiny(tmp_path)
    with_key = recommender("sasrec", None, data.num_items)
    assert with_key.features is None
    assert not any(name.startswith("features.") for name in with_key.state_dict())
    off, encoded = encode_features(data, FeatureConfig())
    assert off.actions is None and encoded.items is None


@pytest.fixture(scope="module")
def feature_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("feature_run")
    folder = write_ml100k(tmp / "ml-100k")
    overrides = ["experiment=ml100k_hstu", f"data.reader.path={folder}", "data.preprocess.min_user_interactions=3",
                 "trainer.max_epochs=1", "trainer.enable_progress_bar=false", "+trainer.enable_model_summary=false",
                 "model.dim=16", "data.max_len=10", "model.features.actions=true", "model.features.item=[genres]",
                 "model.features.user=[age,gender,occupation]", f"data.cache_dir={tmp / 'cache'}", "baselines=[]"]
    cfg = compose_config("train", overrides=overrides)
    return tmp / "run", train_entry.run(cfg, tmp / "run"), cfg


def test_a_tiny_run_with_every_feature_trains_and_reloads(feature_run):
    run_dir, metrics, cfg = feature_run
    assert metrics["config"]["model"]["features"]["item"] == ["genres"]
    assert np.isfinite(metrics["metrics"]["test"]["ndcg@10"])
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    task = build_task(cfg, datamodule.data.num_items, datamodule.data.item_raw_ids, datamodule.features)
    assert {n.split(".")[3] for n in task.model.features.state_dict()} == {"action_table", "user_table",
                                                                            "item_side_table"}


def test_the_export_of_a_feature_model_is_refused(feature_run, tmp_path):
    cfg = compose_config("export", overrides=[f"run_dir={feature_run[0]}", f"out_dir={tmp_path / 'out'}"])
    with pytest.raises(ConfigError, match="run_dir.*side features"):
        export_cli.run(cfg)


def test_a_feature_the_data_lacks_is_one_config_error(tmp_path):
    cfg = compose_config("train", overrides=TINY_RUN + ["model.features.user=[age]", f"data.cache_dir={tmp_path}"])
    with pytest.raises(ConfigError) as info:
        train_entry.run(cfg, tmp_path / "run")
    assert str(info.value).startswith("model.features.user") and "'synthetic' has no user column 'age'" in str(
        info.value)
