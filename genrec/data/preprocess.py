"""From raw events to :class:`SequenceData`: filtering, ID remapping, time-ordered sequences.

Two paths give the same result: an in-memory :class:`InteractionLog` goes through pandas; a
:class:`~genrec.data.outofcore.ParquetEventLog` (a Parquet log too large for that) is streamed into int32 codes
and filtered, remapped and ordered on those arrays. Every row a filter drops is counted and logged; a filter that
leaves nothing raises :class:`DataError`.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
from omegaconf import DictConfig, OmegaConf

from genrec.errors import ConfigError, DataError, settings_from
from genrec.data.outofcore import ParquetEventLog, encode_events
from genrec.data.schema import ITEM, PAD_ITEM, RATING, TIMESTAMP, USER, InteractionLog, SequenceData

log = logging.getLogger(__name__)

#: Leave-one-out needs one training item, one validation target and one test target per user.
MIN_SEQUENCE_LENGTH = 3


@dataclass(frozen=True)
class PreprocessConfig:
    """How raw events become sequences.

    Attributes:
        min_user_interactions: k-core threshold for users (raised to 3, the least leave-one-out can split).
        min_item_interactions: k-core threshold for items (1 keeps every item).
        min_rating: keep only events with ``rating >= min_rating`` (``None`` keeps all: implicit feedback).
        dedupe: keep only the first interaction of each (user, item) pair.
    """

    min_user_interactions: int = 5
    min_item_interactions: int = 5
    min_rating: float | None = None
    dedupe: bool = False

    def __post_init__(self) -> None:
        for name in ("min_user_interactions", "min_item_interactions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"data.preprocess.{name}", f"got {value!r}, expected an integer >= 1 (a k-core "
                                                              "threshold; 1 keeps everything)")
        if self.min_rating is not None and (isinstance(self.min_rating, bool)
                                            or not isinstance(self.min_rating, (int, float))):
            raise ConfigError("data.preprocess.min_rating", f"got {self.min_rating!r}, expected a number or null")
        if not isinstance(self.dedupe, bool):
            raise ConfigError("data.preprocess.dedupe", f"got {self.dedupe!r}, expected true or false")

    @classmethod
    def from_config(cls, node: Any) -> "PreprocessConfig":
        """From ``data.preprocess`` (a DictConfig, a dict or ``None``); an unknown key is a ConfigError."""
        values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
        return settings_from(cls, values, "data.preprocess")

    def as_dict(self) -> dict:
        return asdict(self)


def _log_dropped(name: str, what: str, dropped: int, total: int) -> None:
    if dropped:
        log.info("%s: %s dropped %d of %d interactions", name, what, dropped, total)


def _drop(events: pd.DataFrame, keep: np.ndarray | pd.Series, what: str, name: str) -> pd.DataFrame:
    _log_dropped(name, what, int(len(events) - int(np.asarray(keep).sum())), len(events))
    return events[np.asarray(keep)]


def filter_events(log_: InteractionLog, cfg: PreprocessConfig) -> pd.DataFrame:
    """Apply rating filter, de-duplication and iterative k-core; returns the surviving events in input order."""
    events = log_.events
    name = log_.name
    if cfg.min_rating is not None:
        _require_ratings(log_, RATING in events.columns, cfg)
        events = _drop(events, events[RATING].to_numpy() >= cfg.min_rating, f"min_rating {cfg.min_rating}", name)
    if cfg.dedupe:
        events = _drop(events, ~events.duplicated([USER, ITEM], keep="first").to_numpy(), "dedupe", name)

    min_user, min_item = _min_counts(cfg)
    rounds, start = 0, len(events)
    while True:
        item_counts = events.groupby(ITEM, sort=False)[ITEM].transform("size").to_numpy()
        user_counts = events.groupby(USER, sort=False)[USER].transform("size").to_numpy()
        keep = (item_counts >= min_item) & (user_counts >= min_user)
        if keep.all():
            break
        events = events[keep]
        rounds += 1
    _log_kcore(name, cfg, start - len(events), start, rounds)
    if events.empty:
        raise _nothing_left(log_, cfg, len(log_.events))
    return events


def _require_ratings(log_: InteractionLog | ParquetEventLog, present: bool, cfg: PreprocessConfig) -> None:
    if not present:
        raise DataError(log_.source or log_.name, f"min_rating={cfg.min_rating} is set but the data has no ratings")


def _min_counts(cfg: PreprocessConfig) -> tuple[int, int]:
    """The k-core thresholds ``(users, items)``: a user needs at least :data:`MIN_SEQUENCE_LENGTH` events."""
    return max(cfg.min_user_interactions, MIN_SEQUENCE_LENGTH), cfg.min_item_interactions


def _log_kcore(name: str, cfg: PreprocessConfig, dropped: int, total: int, rounds: int) -> None:
    if dropped:
        log.info("%s: %d-core users / %d-core items dropped %d of %d interactions in %d rounds",
                 name, *_min_counts(cfg), dropped, total, rounds)


def _nothing_left(log_: InteractionLog | ParquetEventLog, cfg: PreprocessConfig, read: int) -> DataError:
    min_user, min_item = _min_counts(cfg)
    return DataError(log_.source or log_.name,
                     f"no interactions left after filtering (min_user_interactions={min_user}, "
                     f"min_item_interactions={min_item}, min_rating={cfg.min_rating}); {read} interactions were read")


def _dense_content(items: pd.DataFrame | None, item_raw: np.ndarray | pd.Index, name: str) -> pd.DataFrame | None:
    """Item content re-indexed by dense item ID ``1..len(item_raw)`` (rows missing from ``items`` stay empty)."""
    if items is None:
        return None
    present = pd.Index(item_raw).isin(items.index)
    if not present.all():
        log.warning("%s: %d of %d items have no content row", name, int((~present).sum()), len(item_raw))
    dense = items.reindex(pd.Index(item_raw))
    dense.index = pd.RangeIndex(1, len(item_raw) + 1, name=ITEM)
    return dense


def _dense_users(users: pd.DataFrame | None, user_raw: np.ndarray | pd.Index, name: str) -> pd.DataFrame | None:
    """User attributes re-indexed by user index ``0..len(user_raw)-1`` (rows missing from ``users`` stay empty)."""
    if users is None:
        return None
    present = pd.Index(user_raw).isin(users.index)
    if not present.all():
        log.warning("%s: %d of %d users have no attribute row", name, int((~present).sum()), len(user_raw))
    dense = users.reindex(pd.Index(user_raw))
    dense.index = pd.RangeIndex(len(user_raw), name=USER)
    return dense


def _raw_ids(item_raw: np.ndarray) -> np.ndarray:
    """``(I + 1,)`` object array: ``None`` (the padding slot), then the raw item IDs in dense order."""
    out = np.empty(len(item_raw) + 1, dtype=object)
    out[PAD_ITEM] = None
    out[1:] = item_raw
    return out


def build_sequences(log_: InteractionLog | ParquetEventLog, cfg: PreprocessConfig) -> SequenceData:
    """Filter, remap IDs (sorted raw IDs -> ``1..num_items``; users -> ``0..num_users-1``) and order by time.

    Within a user, events are sorted by timestamp with ties (and data without timestamps) kept in file order.
    """
    if isinstance(log_, ParquetEventLog):
        return _build_streamed(log_, cfg)
    events = filter_events(log_, cfg)
    user_codes, user_raw = pd.factorize(events[USER], sort=True)
    item_codes, item_raw = pd.factorize(events[ITEM], sort=True)
    item_codes = item_codes.astype(np.int64) + 1  # 0 is the padding ID
    row_order = np.arange(len(events))
    if TIMESTAMP in events.columns:
        timestamps = events[TIMESTAMP].to_numpy(np.int64)
        order = np.lexsort((row_order, timestamps, user_codes))
    else:
        timestamps = None
        order = np.lexsort((row_order, user_codes))
    counts = np.bincount(user_codes, minlength=len(user_raw))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    data = SequenceData(
        name=log_.name,
        item_ids=item_codes[order],
        offsets=offsets,
        timestamps=None if timestamps is None else timestamps[order],
        item_raw_ids=_raw_ids(np.asarray(item_raw)),
        user_raw_ids=np.asarray(user_raw),
        items=_dense_content(log_.items, item_raw, log_.name),
        ratings=events[RATING].to_numpy(np.float32)[order] if RATING in events.columns else None,
        users=_dense_users(log_.users, user_raw, log_.name),
    )
    log.info("%s: %s", log_.name, data.summary())
    return data


def kcore_mask(users: np.ndarray, items: np.ndarray, num_users: int, num_items: int, min_user: int,
               min_item: int) -> tuple[np.ndarray, int]:
    """The iterative k-core of :func:`filter_events` on codes: ``((N,) bool mask of the events kept, rounds)``.

    Args:
        users / items: ``(N,)`` codes in ``[0, num_users)`` / ``[0, num_items)``.

    Each round drops the events whose user has fewer than ``min_user`` or whose item has fewer than ``min_item``
    events left, until none does; counts are updated by the dropped events only. A user or item that fell below
    its threshold stays below (counts only fall), so one byte per user and item says which events are gone.
    """
    user_count = np.bincount(users, minlength=num_users)
    item_count = np.bincount(items, minlength=num_items)
    user_out = np.zeros(num_users, bool)
    item_out = np.zeros(num_items, bool)
    dropped = np.zeros(len(users), bool)
    rounds = 0
    while True:
        user_new = (user_count < min_user) & ~user_out
        item_new = (item_count < min_item) & ~item_out
        if not (user_new.any() or item_new.any()):
            return ~dropped, rounds
        newly = (user_new[users] | item_new[items]) & ~dropped
        if newly.any():
            rounds += 1
        dropped |= newly
        user_out |= user_new
        item_out |= item_new
        user_count -= np.bincount(users[newly], minlength=num_users)
        item_count -= np.bincount(items[newly], minlength=num_items)


def time_order(users: np.ndarray, timestamps: np.ndarray | None, num_users: int) -> np.ndarray:
    """``(N,)`` the permutation that sorts events by user, then timestamp, ties in the given order (stable).

    Args:
        users: ``(N,)`` int64 codes in ``[0, num_users)``; OVERWRITTEN (with the sort key, to save memory).
        timestamps: ``(N,)`` int64, or ``None`` (then the order is by user, ties in the given order).

    One stable sort of ``user * span + (t - t_min)`` when that fits int64: about twice as fast as a two-key
    ``np.lexsort``, which is the fallback.
    """
    if timestamps is None:
        return np.argsort(users, kind="stable")
    low, high = int(timestamps.min()), int(timestamps.max())
    span = high - low + 1
    if (num_users - 1) * span + high >= 2 ** 63:
        return np.lexsort((timestamps, users))
    users *= span
    users += timestamps
    users -= low
    return np.argsort(users, kind="stable")


def _build_streamed(log_: ParquetEventLog, cfg: PreprocessConfig) -> SequenceData:
    """:func:`build_sequences` of a Parquet log: stream it into codes, then filter, remap and order the arrays
    (the same steps and log lines as the pandas path)."""
    name = log_.name
    if cfg.min_rating is not None:
        _require_ratings(log_, RATING in log_.columns, cfg)
    codes = encode_events(log_, cfg.min_rating)
    users, items, timestamps = codes.users, codes.items, codes.timestamps
    del codes  # every array below is released as soon as its replacement exists
    if cfg.min_rating is not None:
        _log_dropped(name, f"min_rating {cfg.min_rating}", log_.num_rows - len(users), log_.num_rows)
    if cfg.dedupe:
        pairs = users.astype(np.int64) * len(log_.items) + items
        first = pl.Series(pairs).is_first_distinct().to_numpy()
        del pairs
        _log_dropped(name, "dedupe", len(users) - int(first.sum()), len(users))
        users = users[first]
        items = items[first]
        timestamps = None if timestamps is None else timestamps[first]
    keep, rounds = kcore_mask(users, items, len(log_.users), len(log_.items), *_min_counts(cfg))
    kept = int(keep.sum())
    _log_kcore(name, cfg, len(users) - kept, len(users), rounds)
    if kept == 0:
        raise _nothing_left(log_, cfg, log_.num_rows)
    if kept < len(users):
        users = users[keep]
        items = items[keep]
        timestamps = None if timestamps is None else timestamps[keep]
    del keep
    user_counts = np.bincount(users, minlength=len(log_.users))
    user_kept, item_kept = user_counts > 0, np.bincount(items, minlength=len(log_.items)) > 0
    users = (np.cumsum(user_kept) - 1)[users]  # int64 dense user IDs, overwritten by time_order
    order = time_order(users, timestamps, int(user_kept.sum()))
    del users
    item_ids = np.cumsum(item_kept)[items[order]]  # int64, 1..num_items: 0 is the padding ID
    del items
    timestamps = None if timestamps is None else timestamps[order]
    del order
    item_raw = log_.items[item_kept]
    data = SequenceData(
        name=name,
        item_ids=item_ids,
        offsets=np.concatenate([[0], np.cumsum(user_counts[user_kept])]).astype(np.int64),
        timestamps=timestamps,
        item_raw_ids=_raw_ids(item_raw),
        user_raw_ids=log_.users[user_kept],
        items=_dense_content(log_.content, item_raw, name),
    )
    log.info("%s: %s", name, data.summary())
    return data
