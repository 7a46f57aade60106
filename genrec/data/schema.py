"""genrec's data schema: what every reader returns and what every model consumes.

Two stages:

* :class:`InteractionLog` — raw events as read from a file, one row per interaction, raw IDs, plus optional item
  content. Every reader (synthetic, MovieLens, Amazon, generic) returns this.
* :class:`SequenceData` — after filtering and ID remapping: one time-ordered item sequence per user, stored
  jagged (values + offsets), dense item IDs ``1..num_items`` with ``0`` reserved for padding.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from genrec.errors import DataError

USER = "user"
ITEM = "item"
TIMESTAMP = "timestamp"
RATING = "rating"
PAD_ITEM = 0

#: Text fields a reader may fill in the item content table, in the order a text encoder joins them.
TEXT_FIELDS = ("title", "brand", "categories", "description")


@dataclass
class InteractionLog:
    """Raw interactions of one dataset.

    Attributes:
        name: dataset name, used in messages and cache keys.
        events: one row per interaction with columns ``user`` and ``item`` (raw IDs, int64 or str), optionally
            ``timestamp`` (int64 seconds), ``rating`` (float32) and feature columns named in ``feature_columns``.
            Within a user, row order is chronological order when there is no ``timestamp`` column.
        items: item content indexed by raw item ID (same dtype as ``events.item``): text columns from
            :data:`TEXT_FIELDS` and attribute columns (e.g. ``genres`` as a list of strings). ``None`` when the
            dataset has no content.
        source: where the events came from (path or a description), used in error messages.
        feature_columns: names of extra per-interaction columns carried through preprocessing.
        users: user attributes indexed by raw user ID (same dtype as ``events.user``), e.g. MovieLens-100K's
            ``age`` (int), ``gender``, ``occupation``, ``zip_code`` (str); ``None`` when the dataset has none.
    """

    name: str
    events: pd.DataFrame
    items: pd.DataFrame | None = None
    source: str = ""
    feature_columns: list[str] = field(default_factory=list)
    users: pd.DataFrame | None = None

    def __post_init__(self) -> None:
        missing = [c for c in (USER, ITEM) if c not in self.events.columns]
        if missing:
            raise DataError(self.source or self.name, f"events table lacks required column(s) {missing}; "
                            f"has {list(self.events.columns)}")
        for col in self.feature_columns:
            if col not in self.events.columns:
                raise DataError(self.source or self.name, f"feature column {col!r} is not in the events table")

    @property
    def has_timestamps(self) -> bool:
        return TIMESTAMP in self.events.columns


@dataclass
class SequenceData:
    """Per-user item sequences after preprocessing, stored jagged.

    Attributes:
        name: dataset name.
        item_ids: ``(sum_u N_u,)`` int64 dense item IDs in ``1..num_items``, user after user, oldest first.
        offsets: ``(num_users + 1,)`` int64; user ``u``'s sequence is ``item_ids[offsets[u]:offsets[u+1]]``.
        timestamps: ``(sum_u N_u,)`` int64 seconds aligned with ``item_ids``, or ``None`` if the data has none.
        item_raw_ids: ``(num_items + 1,)`` raw item ID of each dense ID; entry 0 is the padding slot.
        user_raw_ids: ``(num_users,)`` raw user ID of each user index.
        items: item content indexed by dense item ID (``1..num_items``), or ``None``.
        ratings: ``(sum_u N_u,)`` float32 rating of every event, aligned with ``item_ids``, or ``None``.
        users: user attributes indexed by user index (``0..num_users-1``), or ``None``.
        actions: ``(sum_u N_u,)`` int64 action ID of every event (``1..``; set by
            :func:`genrec.data.features.encode_features` when a model uses actions), else ``None``.
        user_features: ``(num_users, F)`` int64 IDs of the user features a model uses (set by
            :func:`genrec.data.features.encode_features`), else ``None``.
        valid_at / test_at: ``(num_users,)`` int64 positions in ``item_ids``, the split of every sequence: user
            ``u`` trains on ``item_ids[offsets[u]:valid_at[u]]``; its validation target is ``item_ids[valid_at[u]]``
            if ``valid_at[u] < test_at[u]``, its test target ``item_ids[test_at[u]]`` if ``test_at[u] <
            offsets[u + 1]``; each is predicted from every item before it (:meth:`targets`). ``None`` (the default)
            is leave-one-out: ``offsets[1:] - 2`` and ``offsets[1:] - 1``. :func:`genrec.data.split.apply_split`
            sets a time split.
        split: how ``valid_at`` / ``test_at`` were chosen (``{"kind": "leave_one_out"}``, or the time split's
            settings and cut times).
        cold_items: ``(C,)`` sorted dense IDs of the items the split holds out of training entirely
            (``data.split.cold_items``: their events are removed from every training part; they remain in the
            catalogue, as validation and test targets and in evaluation histories), or ``None``.
    """

    name: str
    item_ids: np.ndarray
    offsets: np.ndarray
    timestamps: np.ndarray | None
    item_raw_ids: np.ndarray
    user_raw_ids: np.ndarray
    items: pd.DataFrame | None = None
    ratings: np.ndarray | None = None
    users: pd.DataFrame | None = None
    actions: np.ndarray | None = None
    user_features: np.ndarray | None = None
    valid_at: np.ndarray | None = None
    test_at: np.ndarray | None = None
    split: dict = field(default_factory=lambda: {"kind": "leave_one_out"})
    cold_items: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.valid_at is None:
            self.valid_at, self.test_at = self.offsets[1:] - 2, self.offsets[1:] - 1

    @property
    def num_users(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_items(self) -> int:
        """Number of real items; embedding tables need ``num_items + 1`` rows (row 0 is padding)."""
        return len(self.item_raw_ids) - 1

    @property
    def num_interactions(self) -> int:
        return int(self.offsets[-1])

    @property
    def lengths(self) -> np.ndarray:
        """``(num_users,)`` sequence length per user."""
        return np.diff(self.offsets)

    def sequence(self, user: int) -> np.ndarray:
        return self.item_ids[self.offsets[user]:self.offsets[user + 1]]

    @property
    def train_lengths(self) -> np.ndarray:
        """``(num_users,)`` length of each user's training part."""
        return self.valid_at - self.offsets[:-1]

    def training_positions(self) -> np.ndarray:
        """``(num_interactions,)`` bool: True for the events in a training part (all a model trains on)."""
        train = self.train_lengths
        runs = np.stack([train, self.lengths - train], axis=1).ravel()  # training part, then the rest, per user
        return np.repeat(np.tile([True, False], self.num_users), runs)

    def targets(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """``(users, positions)``: the users evaluated in ``split`` (``"valid"`` or ``"test"``), those with a target
        in it and at least one event before that target, and the position of each one's target in ``item_ids``."""
        if split not in ("valid", "test"):
            raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
        at, end = (self.valid_at, self.test_at) if split == "valid" else (self.test_at, self.offsets[1:])
        users = np.flatnonzero((at > self.offsets[:-1]) & (at < end))
        return users, at[users]

    def summary(self) -> dict:
        lengths = self.lengths
        return {
            "dataset": self.name,
            "users": self.num_users,
            "items": self.num_items,
            "interactions": self.num_interactions,
            "mean_length": round(float(lengths.mean()), 2) if len(lengths) else 0.0,
            "max_length": int(lengths.max()) if len(lengths) else 0,
            "has_timestamps": self.timestamps is not None,
        }
