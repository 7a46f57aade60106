"""How sequences become training, validation and test data (``data.split``).

* ``leave_one_out`` (the default): each user's last item is the test target, the one before it the validation
  target, the rest trains.
* ``time``: the global temporal split (Sun et al., "A Critical Study on Data Leakage in Recommender System Offline
  Evaluation", TOIS 2023; Meng et al., RecSys 2020). Training uses only the events before ``valid_from``; a user's
  validation target is their first event in ``[valid_from, test_from)``, the test target their first event at or
  after ``test_from``, each predicted from everything before it. Users without such an event (or without an event
  before it) are not evaluated in that split. Events at a cut's exact time fall after it. A cut in ``(0, 1)`` is a
  quantile of event time (``q``: the time of the event at rank ``floor(q * N)`` of the ``N`` events in time order,
  so at most ``floor(q * N)`` events are earlier); a cut ``>= 1`` is unix seconds.

Either split may also hold a random share of the items out of training entirely (``cold_items``, drawn with
``cold_seed``; TIGER §4.3's cold-start protocol): every event of those items in a training part is removed from the
data, so no model, baseline, teacher or collaborative SID encoder trained on the split sees their interactions.
They stay in the catalogue: their content (text semantic IDs) can still place them, and they remain validation and
test targets (reported apart as cold targets) and, where they are the validation target, the last item of the test
history. The removal happens before the cuts are read, so a user's validation and test targets are the same events
as without it.

Items first seen after the training cut keep their place in the catalogue with untrained embedding rows, as an
item seen only as a held-out target does under leave-one-out; a model rarely ranks them, so such targets count as
(near-certain) misses, and :func:`split_summary` says how many there are.

The split is computed on the preprocessed :class:`SequenceData` (so both preprocessing engines share it) and
carried by it as per-user cut positions (``valid_at`` / ``test_at``), which every consumer reads.
"""
from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, replace

import numpy as np
from omegaconf import DictConfig, OmegaConf

from genrec.data.schema import SequenceData
from genrec.errors import ConfigError, DataError

log = logging.getLogger(__name__)

KINDS = ("leave_one_out", "time")
PROTOCOLS = {"leave_one_out": "leave-one-out (valid: second-to-last, test: last)",
             "time": "global temporal (train: events before valid_from; valid: each user's first event in "
                     "[valid_from, test_from); test: first event from test_from on)"}


@dataclass(frozen=True)
class SplitConfig:
    """``data.split``: ``kind`` and, for ``kind=time``, the cuts ``valid_from < test_from`` (both quantiles of event
    time in ``(0, 1)`` or both unix seconds); ``cold_items``, the share of the items held out of training entirely
    (0: none), drawn with ``cold_seed``."""

    kind: str = "leave_one_out"
    valid_from: float | None = None
    test_from: float | None = None
    cold_items: float = 0.0
    cold_seed: int = 0

    @classmethod
    def from_config(cls, node: dict | DictConfig | None) -> "SplitConfig":
        """The checked settings (``None``: leave-one-out); a bad value is a :class:`ConfigError` naming its key."""
        values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
        keys = ("kind", "valid_from", "test_from", "cold_items", "cold_seed")
        unknown = sorted(set(values) - set(keys))
        if unknown:
            raise ConfigError(f"data.split.{unknown[0]}", f"unknown key; data.split takes {', '.join(keys)}")
        split = cls(**values)
        if split.kind not in KINDS:
            raise ConfigError("data.split.kind", f"got {split.kind!r}, expected one of {KINDS}")
        if isinstance(split.cold_items, bool) or not isinstance(split.cold_items, (int, float)) or \
                not 0 <= split.cold_items < 1:
            raise ConfigError("data.split.cold_items", f"got {split.cold_items!r}; expected the share of items held "
                                                       "out of training, in [0, 1)")
        if isinstance(split.cold_seed, bool) or not isinstance(split.cold_seed, int) or split.cold_seed < 0:
            raise ConfigError("data.split.cold_seed", f"got {split.cold_seed!r}; expected an integer >= 0")
        cuts = {"valid_from": split.valid_from, "test_from": split.test_from}
        if split.kind == "leave_one_out":
            for key, value in cuts.items():
                if value is not None:
                    raise ConfigError(f"data.split.{key}", f"got {value}; only data.split.kind=time takes cuts")
            return split
        for key, value in cuts.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    0 < value < 1 or (value >= 1 and float(value).is_integer())):
                raise ConfigError(f"data.split.{key}", f"got {value!r}; expected a quantile of event time in (0, 1) "
                                                       "or unix seconds (an integer >= 1)")
        if (split.valid_from < 1) != (split.test_from < 1):
            raise ConfigError("data.split.test_from", f"valid_from={split.valid_from}, test_from={split.test_from}: "
                                                      "both quantiles in (0, 1) or both unix seconds")
        if split.valid_from >= split.test_from:
            raise ConfigError("data.split.test_from", f"got {split.test_from}; expected a cut after valid_from="
                                                      f"{split.valid_from}")
        return split

    def require_timestamps(self, has_timestamps: bool, source: str) -> None:
        """A time split of data without timestamps is a :class:`DataError` (checked before preprocessing)."""
        if self.kind == "time" and not has_timestamps:
            raise DataError(source, "data.split.kind=time needs timestamps; the data has none (use leave_one_out, "
                                    "or name the timestamp column)", key="data.split.kind")


def _cut_time(timestamps: np.ndarray, value: float) -> int:
    if value >= 1:
        return int(value)
    k = int(value * len(timestamps))
    return int(np.partition(timestamps, k)[k])


def _utc(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def apply_split(data: SequenceData, split: SplitConfig) -> SequenceData:
    """``data`` with the cut positions of ``split`` (leave-one-out without cold items: ``data`` itself) and, with
    ``cold_items``, without the held-out items' training events. A time split that leaves no training event, or no
    validation or test user, is a :class:`DataError` naming the cut."""
    data = _time_split(data, split) if split.kind == "time" else data
    return hold_out_items(data, split.cold_items, split.cold_seed) if split.cold_items else data


def hold_out_items(data: SequenceData, share: float, seed: int) -> SequenceData:
    """``data`` without any training-part event of ``round(share * num_items)`` items drawn at random (``seed``):
    the cold items (:attr:`SequenceData.cold_items`). Each user's validation and test targets stay the same events;
    the per-event arrays (timestamps, ratings, actions) lose the same rows."""
    cold = np.sort(np.random.default_rng(seed).choice(np.arange(1, data.num_items + 1),
                                                      int(round(share * data.num_items)), replace=False))
    if not len(cold):
        raise ConfigError("data.split.cold_items", f"got {share}: holds out no item of {data.num_items}")
    is_cold = np.zeros(data.num_items + 1, bool)
    is_cold[cold] = True
    drop = data.training_positions() & is_cold[data.item_ids]
    user = np.repeat(np.arange(data.num_users), data.lengths)
    dropped = np.bincount(user[drop], minlength=data.num_users)  # all in the training parts, before valid_at
    offsets = np.concatenate([[0], np.cumsum(data.lengths - dropped)]).astype(data.offsets.dtype)
    valid_at = data.valid_at - data.offsets[:-1] - dropped + offsets[:-1]
    test_at = data.test_at - data.valid_at + valid_at
    keep = ~drop

    def kept(values):
        return None if values is None else values[keep]

    if not (data.training_positions() & ~drop).any():
        raise DataError(data.name, f"data.split.cold_items={share} leaves no training event",
                        key="data.split.cold_items")
    out = replace(data, item_ids=data.item_ids[keep], offsets=offsets, timestamps=kept(data.timestamps),
                  ratings=kept(data.ratings), actions=kept(data.actions), valid_at=valid_at, test_at=test_at,
                  split={**data.split, "cold_items": share, "cold_seed": seed,
                         "cold_training_events_removed": int(drop.sum())}, cold_items=cold)
    log.info("%s: %d cold items held out of training (%d training events removed)", data.name, len(cold),
             int(drop.sum()))
    return out


def _time_split(data: SequenceData, split: SplitConfig) -> SequenceData:
    """``data`` with the cut positions of a time split."""
    split.require_timestamps(data.timestamps is not None, data.name)
    times = data.timestamps
    valid_time, test_time = _cut_time(times, split.valid_from), _cut_time(times, split.test_from)
    starts = data.offsets[:-1]
    # sequences are in time order: the events before a cut are a prefix of each one
    valid_at = starts + np.add.reduceat(times < valid_time, starts, dtype=np.int64)
    test_at = starts + np.add.reduceat(times < test_time, starts, dtype=np.int64)
    out = replace(data, valid_at=valid_at, test_at=test_at,
                  split={"kind": "time", "valid_from": split.valid_from, "test_from": split.test_from,
                         "valid_from_time": valid_time, "test_from_time": test_time,
                         "valid_from_utc": _utc(valid_time), "test_from_utc": _utc(test_time)})
    first, last = _utc(int(times.min())), _utc(int(times.max()))
    if not out.train_lengths.any():
        raise DataError(data.name, f"no event is before valid_from={split.valid_from} ({_utc(valid_time)}; the "
                                   f"events run from {first} to {last}): nothing to train on",
                        key="data.split.valid_from")
    for name, key in (("valid", "valid_from"), ("test", "test_from")):
        if not len(out.targets(name)[0]):
            raise DataError(data.name, f"no user has a {name} target after an earlier event (cuts {_utc(valid_time)}"
                                       f", {_utc(test_time)}; the events run from {first} to {last})",
                            key=f"data.split.{key}")
    log.info("%s: %s", data.name, split_summary(out))
    return out


def split_summary(data: SequenceData) -> dict:
    """The split of ``data`` (its settings, cut times) and what it leaves: training events, the users evaluated
    in each split, how many of their targets never occur in training and, with cold items, how many items are
    cold and how many targets are cold items."""
    trained = np.zeros(data.num_items + 1, bool)
    trained[data.item_ids[data.training_positions()]] = True
    out = {**data.split, "training_events": int(data.train_lengths.sum()), "users_evaluated": {},
           "targets_not_in_training": {}}
    if data.cold_items is not None:
        out |= {"cold_item_count": len(data.cold_items), "warm_item_count": data.num_items - len(data.cold_items),
                "cold_targets": {}}
    for name in ("valid", "test"):
        users, at = data.targets(name)
        out["users_evaluated"][name] = len(users)
        out["targets_not_in_training"][name] = int((~trained[data.item_ids[at]]).sum())
        if data.cold_items is not None:
            out["cold_targets"][name] = int(np.isin(data.item_ids[at], data.cold_items).sum())
    return out
