"""A dataset played as a stream: its events in timestamp order (ML-100K, the synthetic default, any ``data=events``
log), for experiments and tests, and the same events written out for the other sources. Replayed events have no
arrival time (the trainer's lag in seconds is then not measured).

:func:`event_frame` turns a reader's :class:`~genrec.data.schema.InteractionLog` into one event per row, sorted by
timestamp (stable: events with equal timestamps keep the log's order), with the event ID ``<dataset>:<row in the
log>``; :class:`ReplaySource` hands those rows out with the row number as its offset (nothing to commit: the
dataset does not change). ``scripts/stream_events.py`` writes the same frame as event files or to a Redis stream.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from genrec.data.schema import ITEM, TIMESTAMP, USER, InteractionLog
from genrec.errors import DataError
from genrec.stream.events import EventSchema, Records
from genrec.stream.source import Source
from genrec.trust import call_target


def event_frame(log: InteractionLog, schema: EventSchema = EventSchema()) -> pd.DataFrame:
    """``log`` -> events in timestamp order with the schema's column names (event ID, user, item, timestamp)."""
    if not log.has_timestamps:
        raise DataError(log.source or log.name, "a stream replay needs timestamps; this dataset has none")
    events = log.events
    order = np.argsort(events[TIMESTAMP].to_numpy(), kind="stable")
    return pd.DataFrame({schema.event_id: [f"{log.name}:{i}" for i in order],
                         schema.user: events[USER].to_numpy()[order],
                         schema.item: events[ITEM].to_numpy()[order],
                         schema.timestamp: events[TIMESTAMP].to_numpy(np.int64)[order]})


class ReplaySource(Source):
    """The events of a dataset in timestamp order, read from the reader config ``reader`` (a ``data.reader``
    node: ``_target_`` + arguments). Offsets are row numbers of that order; nothing is committed."""

    def __init__(self, reader: dict | DictConfig, limit: int | None = None):
        if isinstance(reader, DictConfig):
            reader = OmegaConf.to_container(reader, resolve=True)
        self.reader, self.limit = dict(reader), limit
        self.frame: pd.DataFrame | None = None
        self.position = 0
        self.description = {"kind": "replay", "reader": dict(reader)}

    def bind(self, schema: EventSchema, run_dir: str) -> None:
        self.frame = event_frame(call_target(self.reader, key="source.reader._target_"), schema)
        if self.limit is not None:
            self.frame = self.frame.iloc[:self.limit].reset_index(drop=True)
        self.description["events"] = len(self.frame)

    def restore(self, offset: int | None) -> None:
        self.position = int(offset or 0)

    def read(self, max_records: int, wait: bool = True) -> Records:
        start, stop = self.position, min(self.position + max_records, len(self.frame))
        self.position = stop
        part = self.frame.iloc[start:stop].reset_index(drop=True)
        return Records(part, [f"row {i}" for i in range(start, stop)], end=stop,
                       raw=lambda row: {k: (v.item() if isinstance(v, np.generic) else v)
                                        for k, v in part.iloc[row].items()})

    def commit(self, offset: Any) -> None:
        """Nothing to do: a dataset has no consumer bookkeeping."""

    def backlog(self) -> int:
        return len(self.frame) - self.position
