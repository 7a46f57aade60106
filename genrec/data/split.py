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
    time in ``(0, 1)`` or both unix seconds)."""

    kind: str = "leave_one_out"
    valid_from: float | None = None
    test_from: float | None = None

    @classmethod
    def from_config(cls, node: dict | DictConfig | None) -> "SplitConfig":
        """The checked settings (``None``: leave-one-out); a bad value is a :class:`ConfigError` naming its key."""
        values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
        unknown = sorted(set(values) - {"kind", "valid_from", "test_from"})
        if unknown:
            raise ConfigError(f"data.split.{unknown[0]}", "unknown key; data.split takes kind, valid_from, test_from")
        split = cls(**values)
        if split.kind not in KINDS:
            raise ConfigError("data.split.kind", f"got {split.kind!r}, expected one of {KINDS}")
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
    """``data`` with the cut positions of ``split`` (leave-one-out: ``data`` itself). A time split that leaves no
    training event, or no validation or test user, is a :class:`DataError` naming the cut."""
    if split.kind == "leave_one_out":
        return data
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
    in each split, and how many of their targets never occur in training."""
    trained = np.zeros(data.num_items + 1, bool)
    trained[data.item_ids[data.training_positions()]] = True
    out = {**data.split, "training_events": int(data.train_lengths.sum()), "users_evaluated": {},
           "targets_not_in_training": {}}
    for name in ("valid", "test"):
        users, at = data.targets(name)
        out["users_evaluated"][name] = len(users)
        out["targets_not_in_training"][name] = int((~trained[data.item_ids[at]]).sum())
    return out
