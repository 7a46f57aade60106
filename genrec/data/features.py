"""Side features and actions as integer IDs for the models: which ones a model uses, checked against the data.

Three kinds (``model.features`` in the config, all off by default):

* ``actions: true`` — every event's action: its rating, one ID per distinct rating value (``1..K``, ``0`` is
  padding). A position's input is the action of its own input event, which happened before the item it predicts.
* ``item: [columns]`` — item side features from :attr:`SequenceData.items` (e.g. ML-100K ``genres``; Amazon
  ``brand``, ``categories``): a list value gives several IDs, a scalar one, a missing or empty value none.
  ``<column>_terms`` (e.g. ``title_terms``) derives a bag of words from a text column: its lower-cased words
  (letters and digits, at least 2 characters), one ID per word that at least :data:`MIN_TERM_ITEMS` items share.
* ``user: [columns]`` — user attributes from :attr:`SequenceData.users` (e.g. ML-100K ``age``, ``gender``,
  ``occupation``): one ID per column; a numeric column is cut into at most :data:`NUMERIC_BUCKETS` quantile buckets.

Every item (and user) column has its own ID range inside one shared vocabulary, so one table serves all of them.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from genrec.data.schema import SequenceData
from genrec.errors import ConfigError

#: Quantile buckets of a numeric user attribute (e.g. age).
NUMERIC_BUCKETS = 10
#: A ``<column>_terms`` word gets an ID when at least this many items' text has it (rarer words would be item IDs).
MIN_TERM_ITEMS = 2
TERMS_SUFFIX = "_terms"
WORD = re.compile(r"[a-z0-9]{2,}")


@dataclass(frozen=True)
class FeatureConfig:
    """Which side features a model uses (``model.features``).

    Attributes:
        actions: embed each input event's action (its rating).
        item: item columns to embed (summed into the item's vector on both the input and the scoring side).
        user: user columns to embed (added to every position of the user's sequence).
    """

    actions: bool = False
    item: tuple[str, ...] = ()
    user: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, cfg) -> "FeatureConfig":
        """From ``model.features`` (a mapping or ``None``); unknown keys are refused."""
        cfg = dict(cfg or {})
        unknown = sorted(set(cfg) - {"actions", "item", "user"})
        if unknown:
            raise ConfigError(f"model.features.{unknown[0]}", "unknown key; expected actions, item, user")
        return cls(bool(cfg.get("actions", False)), tuple(cfg.get("item") or ()), tuple(cfg.get("user") or ()))

    @property
    def enabled(self) -> bool:
        return self.actions or bool(self.item) or bool(self.user)


@dataclass
class ItemFeatures:
    """Every item's side-feature IDs, jagged over items, in one vocabulary of ``vocab_size`` IDs (``0`` unused).

    Attributes:
        values: ``(V,)`` int64 IDs, item after item (dense item IDs ``0..num_items``; item 0, padding, has none).
        offsets: ``(num_items + 2,)`` int64; item ``i``'s IDs are ``values[offsets[i]:offsets[i + 1]]``.
        weights: ``(V,)`` float32 ``1 / (number of the item's IDs from the same column)``: each column adds the mean
            of its IDs' embeddings, so a many-genre item weighs as much as a one-genre one.
        vocab_size: rows of the table (``1 +`` every column's distinct values).
    """

    values: np.ndarray
    offsets: np.ndarray
    weights: np.ndarray
    vocab_size: int


@dataclass
class EncodedFeatures:
    """What a model needs to build its feature tables: vocabulary sizes and the item features.

    Attributes:
        num_actions: distinct actions (the action table has ``num_actions + 1`` rows), ``0`` when off.
        user_vocab_size: rows of the user table (``1 +`` every column's buckets), ``0`` when off.
        items: the item side features, or ``None`` when off.
    """

    num_actions: int = 0
    user_vocab_size: int = 0
    items: ItemFeatures | None = None


def _missing(key: str, data: SequenceData, what: str, have: list[str]) -> ConfigError:
    return ConfigError(key, f"dataset {data.name!r} has no {what}" + (f"; it has {have}" if have else ""))


def check_features(data: SequenceData, config: FeatureConfig) -> None:
    """Refuse a requested feature the dataset lacks, naming the key and the dataset."""
    if config.actions and data.ratings is None:
        raise _missing("model.features.actions", data, "ratings to use as actions", [])
    for key, table, kind in (("item", data.items, "item"), ("user", data.users, "user")):
        have = [] if table is None else list(table.columns)
        for column in getattr(config, key):
            if key == "item" and _terms_source(column, have):
                continue
            if column not in have:
                raise _missing(f"model.features.{key}", data, f"{kind} column {column!r}", have)


def _column_codes(column: pd.Series) -> tuple[list[np.ndarray], int]:
    """One column -> (per row an int64 array of codes ``1..K``, ``K``); numbers are bucketed by quantile."""
    if pd.api.types.is_numeric_dtype(column):
        known = column.notna().to_numpy()
        codes = np.zeros(len(column), np.int64)
        if known.any():
            buckets = pd.qcut(column[known].astype(float), NUMERIC_BUCKETS, labels=False, duplicates="drop")
            codes[known] = buckets.to_numpy(np.int64) + 1
        return [c[c > 0] for c in codes[:, None]], int(codes.max())
    rows = [list(v) if isinstance(v, (list, tuple, np.ndarray)) else ([] if pd.isna(v) or v == "" else [v])
            for v in column]
    vocab = {v: i + 1 for i, v in enumerate(sorted({str(v) for row in rows for v in row}))}
    return [np.array(sorted({vocab[str(v)] for v in row}), np.int64) for row in rows], len(vocab)


def _terms_source(column: str, have: list[str]) -> str | None:
    """The text column a ``<column>_terms`` feature derives from, or ``None`` (not a derived name, or a real
    column of that name exists)."""
    source = column.removesuffix(TERMS_SUFFIX)
    return source if column.endswith(TERMS_SUFFIX) and column not in have and source in have else None


def text_terms(texts: pd.Series) -> pd.Series:
    """Per text its distinct words (lower-cased runs of ``[a-z0-9]``, at least 2 long) that at least
    :data:`MIN_TERM_ITEMS` texts share, sorted; a missing text has none."""
    words = [sorted(set(WORD.findall(t.lower()))) if isinstance(t, str) else [] for t in texts]
    shared = {w for w, n in Counter(w for row in words for w in row).items() if n >= MIN_TERM_ITEMS}
    return pd.Series([[w for w in row if w in shared] for row in words], index=texts.index, dtype=object)


def _item_features(data: SequenceData, columns: tuple[str, ...]) -> ItemFeatures:
    per_item = [[] for _ in range(data.num_items + 1)]  # item 0 (padding) has none
    weights = [[] for _ in range(data.num_items + 1)]
    start = 1
    have = list(data.items.columns)
    for name in columns:
        source = _terms_source(name, have)
        codes, size = _column_codes(text_terms(data.items[source]) if source else data.items[name])
        for item, row in enumerate(codes, start=1):  # data.items is indexed 1..num_items
            per_item[item].append(row + start - 1)
            weights[item].append(np.full(len(row), 1.0 / max(len(row), 1), np.float32))
        start += size
    values = [np.concatenate(parts) if parts else np.zeros(0, np.int64) for parts in per_item]
    lengths = np.array([len(v) for v in values], np.int64)
    return ItemFeatures(values=np.concatenate(values).astype(np.int64),
                        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                        weights=np.concatenate([np.concatenate(w) if w else np.zeros(0, np.float32)
                                                for w in weights]).astype(np.float32),
                        vocab_size=start)


def _user_features(data: SequenceData, columns: tuple[str, ...]) -> tuple[np.ndarray, int]:
    """``((num_users, F) int64 IDs, vocabulary size)``; a missing attribute gets ID 0 (one shared "unknown" row)."""
    out = np.zeros((data.num_users, len(columns)), np.int64)
    start = 1
    for f, name in enumerate(columns):
        codes, size = _column_codes(data.users[name])
        for user, row in enumerate(codes):
            out[user, f] = row[0] + start - 1 if len(row) else 0
        start += size
    return out, start


def _action_ids(ratings: np.ndarray) -> tuple[np.ndarray, int]:
    values, inverse = np.unique(ratings, return_inverse=True)
    return inverse.astype(np.int64) + 1, len(values)


def encode_features(data: SequenceData, config: FeatureConfig) -> tuple[SequenceData, EncodedFeatures]:
    """Check ``config`` against ``data`` and encode the features -> (``data`` with :attr:`SequenceData.actions` /
    :attr:`SequenceData.user_features` set for the batches, what the model's tables need)."""
    check_features(data, config)
    encoded = EncodedFeatures()
    actions = user_features = None
    if config.actions:
        actions, encoded.num_actions = _action_ids(data.ratings)
    if config.user:
        user_features, encoded.user_vocab_size = _user_features(data, config.user)
    if config.item:
        encoded.items = _item_features(data, config.item)
    return replace(data, actions=actions, user_features=user_features), encoded
