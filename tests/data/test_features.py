"""Side features and actions on the data side: the ML-100K reader keeps users and ratings (hand-checked rows),
preprocessing and the cache keep them aligned, encoding gives hand-checked IDs, a missing feature is a one-line
ConfigError naming the key and the dataset, and batches / KeyedJaggedTensors carry actions and user features
aligned with the input items (never the target's action)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from genrec.data.batch import (ACTION_FEATURE, ITEM_FEATURE, USER_FEATURE, EvalSequences, TrainPrefixes,
                               TrainSequences, collate)
from genrec.data.cache import load_sequences, save_sequences
from genrec.data.features import FeatureConfig, encode_features, text_terms
from genrec.data.movielens import read_movielens
from genrec.data.preprocess import PreprocessConfig, build_sequences
from genrec.errors import ConfigError
from tests.shared import SHARED, skip_without_shared

ALL = FeatureConfig(actions=True, item=("genres",), user=("age", "gender", "occupation"))


def write_ml100k(folder: Path) -> Path:
    """A hand-written ML-100K folder: 3 users, 4 movies, ratings 1-5."""
    folder.mkdir(parents=True, exist_ok=True)
    # user 7: items 10, 20, 30, 40 (ratings 5, 1, 4, 2); user 8: 20, 10, 30 (3, 3, 5); user 9: 40, 30, 20 (1, 2, 4)
    rows = [(7, 10, 5, 100), (7, 20, 1, 101), (8, 20, 3, 100), (7, 30, 4, 102), (8, 10, 3, 101), (7, 40, 2, 103),
            (8, 30, 5, 102), (9, 40, 1, 100), (9, 30, 2, 101), (9, 20, 4, 102)]
    (folder / "u.data").write_text("".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows))
    (folder / "u.genre").write_text("unknown|0\nAction|1\nComedy|2\nDrama|3\n")
    (folder / "u.item").write_text("10|A (1990)|||x|0|1|1|0\n20|B (1991)|||x|0|0|0|1\n"
                                   "30|C (1992)|||x|1|0|0|0\n40|D (1993)|||x|0|1|0|1\n")
    (folder / "u.user").write_text("7|24|M|writer|11111\n8|53|F|other|22222\n9|31|M|writer|33333\n")
    return folder


def tiny(tmp_path: Path):
    log = read_movielens(str(write_ml100k(tmp_path / "ml")), name="tiny")
    return build_sequences(log, PreprocessConfig(min_user_interactions=3, min_item_interactions=1))


@pytest.mark.shared_data
@skip_without_shared
def test_ml100k_reader_keeps_users_and_ratings():
    log = read_movielens(str(SHARED / "ml-100k"))
    users = log.users
    assert len(users) == 943 and users.index.name == "user" and list(users.columns) == ["age", "gender",
                                                                                       "occupation", "zip_code"]
    assert users.loc[1].tolist() == [24, "M", "technician", "85711"]  # u.user line 1
    assert users.loc[196].tolist() == [49, "M", "writer", "55105"]  # the user of u.data's first row
    data = build_sequences(log, PreprocessConfig(min_user_interactions=5, min_item_interactions=1))
    assert data.ratings is not None and len(data.ratings) == data.num_interactions
    u = int(np.flatnonzero(data.user_raw_ids == 196)[0])
    first, last = data.offsets[u], data.offsets[u + 1]
    kolya = int(np.flatnonzero(data.item_raw_ids == 242)[0])  # u.data row 1: 196 242 3 881250949
    at = first + int(np.flatnonzero(data.item_ids[first:last] == kolya)[0])
    assert data.ratings[at] == 3.0 and data.timestamps[at] == 881250949
    assert data.users.loc[u].tolist() == [49, "M", "writer", "55105"]
    assert data.items.loc[kolya, "genres"] == ["Comedy"]  # u.item line 242: only the Comedy flag


def test_preprocess_and_cache_keep_ratings_and_users(tmp_path):
    data = tiny(tmp_path)
    # users 7, 8, 9 -> 0, 1, 2; items 10, 20, 30, 40 -> 1..4; time order within a user
    assert data.item_ids.tolist() == [1, 2, 3, 4, 2, 1, 3, 4, 3, 2]
    assert data.ratings.tolist() == [5, 1, 4, 2, 3, 3, 5, 1, 2, 4]
    assert data.users["occupation"].tolist() == ["writer", "other", "writer"]
    save_sequences(data, tmp_path / "cache")
    back = load_sequences(tmp_path / "cache")
    assert back.ratings.dtype == np.float32 and back.ratings.tolist() == data.ratings.tolist()
    pd.testing.assert_frame_equal(back.users, data.users)
    (fresh, fresh_ids), (loaded, loaded_ids) = encode_features(data, ALL), encode_features(back, ALL)
    assert np.array_equal(fresh_ids.items.values, loaded_ids.items.values)  # genres come back as arrays, not lists
    assert np.array_equal(fresh.actions, loaded.actions)
    assert np.array_equal(fresh.user_features, loaded.user_features)


def test_encoding_hand_checked(tmp_path):
    data, encoded = encode_features(tiny(tmp_path), ALL)
    assert encoded.num_actions == 5 and data.actions.tolist() == [5, 1, 4, 2, 3, 3, 5, 1, 2, 4]
    # genres Action=1, Comedy=2, Drama=3, unknown=4; item 0 (padding) has none
    items = encoded.items
    per_item = [items.values[items.offsets[i]:items.offsets[i + 1]].tolist() for i in range(5)]
    assert per_item == [[], [1, 2], [3], [4], [1, 3]] and items.vocab_size == 5
    assert items.weights.tolist() == [0.5, 0.5, 1.0, 1.0, 0.5, 0.5]
    # age 24, 53, 31 in 10 quantile buckets (edges interpolated between the three: 24 is the lowest, 31 the median,
    # 53 the highest) -> 1, 10, 5; then gender F=11 M=12, then occupation other=13 writer=14
    assert data.user_features.tolist() == [[1, 12, 14], [10, 11, 13], [5, 12, 14]] and encoded.user_vocab_size == 15


def test_features_off_leave_the_data_alone(tmp_path):
    data = tiny(tmp_path)
    out, encoded = encode_features(data, FeatureConfig())
    assert out.actions is None and out.user_features is None and encoded.items is None
    assert not FeatureConfig.from_config({"actions": False, "item": [], "user": []}).enabled


def test_title_terms_hand_checked(tmp_path):
    data = tiny(tmp_path)
    data.items["title"] = ["Rose Face Cream 2oz", "rose cream, rose!", None, "Face mask & a CREAM"]
    # words in >= 2 items: cream (1, 2, 4), face (1, 4), rose (1, 2); "2oz", "mask" and the 1-letter "a" are dropped
    assert text_terms(data.items["title"]).tolist() == [["cream", "face", "rose"], ["cream", "rose"], [],
                                                        ["cream", "face"]]
    _, encoded = encode_features(data, FeatureConfig(item=("genres", "title_terms")))
    items = encoded.items
    per_item = [items.values[items.offsets[i]:items.offsets[i + 1]].tolist() for i in range(5)]
    # genres 1-4 as in test_encoding_hand_checked, then cream=5 face=6 rose=7
    assert per_item == [[], [1, 2, 5, 6, 7], [3, 5, 7], [4], [1, 3, 5, 6]] and items.vocab_size == 8
    assert items.weights[items.offsets[1]:items.offsets[2]].tolist() == pytest.approx([.5, .5, 1 / 3, 1 / 3, 1 / 3])
    with pytest.raises(ConfigError, match="item column 'brand_terms'"):
        encode_features(data, FeatureConfig(item=("brand_terms",)))


@pytest.mark.parametrize("config, key, missing", [
    (FeatureConfig(item=("brand",)), "model.features.item", "item column 'brand'"),
    (FeatureConfig(user=("country",)), "model.features.user", "user column 'country'"),
])
def test_missing_feature_is_a_config_error(tmp_path, config, key, missing):
    with pytest.raises(ConfigError) as info:
        encode_features(tiny(tmp_path), config)
    message = str(info.value)
    assert key in message and "'tiny'" in message and missing in message and "\n" not in message


def test_missing_ratings_and_unknown_key(tmp_path):
    data = tiny(tmp_path)
    data.ratings = None
    with pytest.raises(ConfigError, match="model.features.actions.*'tiny' has no ratings"):
        encode_features(data, FeatureConfig(actions=True))
    with pytest.raises(ConfigError, match="model.features.genres"):
        FeatureConfig.from_config({"genres": True})


def test_batches_carry_the_inputs_actions_and_user_features(tmp_path):
    data, _ = encode_features(tiny(tmp_path), ALL)
    train = collate([TrainSequences(data, max_len=10)[i] for i in range(len(TrainSequences(data, 10)))])
    # training parts (all but the last two events): user 7 -> items 1, 2 with actions 5, 1: input item 1 (action 5)
    # predicts item 2; its own action 1 is not an input
    assert train.item_ids.tolist() == [1] and train.target_ids.tolist() == [2] and train.actions.tolist() == [5]
    test = collate([EvalSequences(data, 10, "test")[u] for u in range(3)])
    assert test.item_ids.tolist() == [1, 2, 3, 2, 1, 4, 3]
    assert test.actions.tolist() == [5, 1, 4, 3, 3, 1, 2]  # the targets' actions (2, 5, 4) are left out
    assert test.user_features.tolist() == data.user_features.tolist()
    kjt = test.to_kjt()
    assert kjt.keys() == [ITEM_FEATURE, ACTION_FEATURE, USER_FEATURE]
    assert torch.equal(kjt[ITEM_FEATURE].values(), test.item_ids)
    assert torch.equal(kjt[ACTION_FEATURE].values(), test.actions)
    assert torch.equal(kjt[ACTION_FEATURE].lengths(), test.lengths)
    assert kjt[USER_FEATURE].lengths().tolist() == [3, 3, 3]
    assert kjt[USER_FEATURE].values().tolist() == [1, 12, 14, 10, 11, 13, 5, 12, 14]
    prefixes = TrainPrefixes(data, 10)
    example = prefixes[0]
    assert example.items.tolist() == [1] and example.actions.tolist() == [5] and example.targets.tolist() == [2]


def test_batches_without_features_are_unchanged(tmp_path):
    data = tiny(tmp_path)
    batch = collate([EvalSequences(data, 10, "valid")[u] for u in range(3)])
    assert batch.actions is None and batch.user_features is None
    assert batch.to_kjt().keys() == [ITEM_FEATURE]


def test_empty_and_missing_item_values_give_no_ids(tmp_path):
    data = tiny(tmp_path)
    data.items["brand"] = ["Acme", "", None, "Acme"]  # Amazon's reader writes "" for a missing brand
    _, encoded = encode_features(data, FeatureConfig(item=("brand",)))
    items = encoded.items
    assert items.offsets.tolist() == [0, 0, 1, 1, 1, 2] and items.values.tolist() == [1, 1]
    assert items.vocab_size == 2
