"""From an :class:`InteractionLog` to :class:`SequenceData`: filtering, ID remapping, time-ordered sequences.

Every row a filter drops is counted and logged; a filter that leaves nothing raises :class:`DataError`.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from genrec.errors import DataError
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

    def as_dict(self) -> dict:
        return asdict(self)


def _drop(events: pd.DataFrame, keep: np.ndarray | pd.Series, what: str, name: str) -> pd.DataFrame:
    dropped = int(len(events) - int(np.asarray(keep).sum()))
    if dropped:
        log.info("%s: %s dropped %d of %d interactions", name, what, dropped, len(events))
    return events[np.asarray(keep)]


def filter_events(log_: InteractionLog, cfg: PreprocessConfig) -> pd.DataFrame:
    """Apply rating filter, de-duplication and iterative k-core; returns the surviving events in input order."""
    events = log_.events
    name = log_.name
    if cfg.min_rating is not None:
        if RATING not in events.columns:
            raise DataError(log_.source or name, f"min_rating={cfg.min_rating} is set but the data has no ratings")
        events = _drop(events, events[RATING].to_numpy() >= cfg.min_rating, f"min_rating {cfg.min_rating}", name)
    if cfg.dedupe:
        events = _drop(events, ~events.duplicated([USER, ITEM], keep="first").to_numpy(), "dedupe", name)

    min_user = max(cfg.min_user_interactions, MIN_SEQUENCE_LENGTH)
    min_item = cfg.min_item_interactions
    rounds, start = 0, len(events)
    while True:
        item_counts = events.groupby(ITEM, sort=False)[ITEM].transform("size").to_numpy()
        user_counts = events.groupby(USER, sort=False)[USER].transform("size").to_numpy()
        keep = (item_counts >= min_item) & (user_counts >= min_user)
        if keep.all():
            break
        events = events[keep]
        rounds += 1
    if start != len(events):
        log.info("%s: %d-core users / %d-core items dropped %d of %d interactions in %d rounds",
                 name, min_user, min_item, start - len(events), start, rounds)
    if events.empty:
        raise DataError(log_.source or name,
                        f"no interactions left after filtering (min_user_interactions={min_user}, "
                        f"min_item_interactions={min_item}, min_rating={cfg.min_rating}); "
                        f"{len(log_.events)} interactions were read")
    return events


def build_sequences(log_: InteractionLog, cfg: PreprocessConfig) -> SequenceData:
    """Filter, remap IDs (sorted raw IDs -> ``1..num_items``; users -> ``0..num_users-1``) and order by time.

    Within a user, events are sorted by timestamp with ties (and data without timestamps) kept in file order.
    """
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

    item_raw_ids = np.empty(len(item_raw) + 1, dtype=object)
    item_raw_ids[PAD_ITEM] = None
    item_raw_ids[1:] = np.asarray(item_raw)
    items = None
    if log_.items is not None:
        present = pd.Index(item_raw).isin(log_.items.index)
        if not present.all():
            log.warning("%s: %d of %d items have no content row", log_.name, int((~present).sum()), len(item_raw))
        items = log_.items.reindex(pd.Index(item_raw))
        items.index = pd.RangeIndex(1, len(item_raw) + 1, name=ITEM)
    data = SequenceData(
        name=log_.name,
        item_ids=item_codes[order],
        offsets=offsets,
        timestamps=None if timestamps is None else timestamps[order],
        item_raw_ids=item_raw_ids,
        user_raw_ids=np.asarray(user_raw),
        items=items,
    )
    log.info("%s: %s", log_.name, data.summary())
    return data
