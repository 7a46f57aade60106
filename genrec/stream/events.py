"""Events on a stream: what a source reads (:class:`Records`), the schema that names their fields, and the checks
that turn records into typed events (:func:`parse`) or reject them with a reason.

An event is ``(event_id, user, item, timestamp[, type])``. User and item IDs are int64, decided record by record,
the same way for every source (JSONL, CSV, Parquet, Redis), so that the same event gives the same IDs from each:

* an integer within int64 is the ID: a JSON or Parquet integer, or text of digits (CSV cells and Redis fields are
  text; ``"007"`` is 7);
* an integer beyond int64 (a uint64 above 2^63 - 1 included) is hashed as its decimal text (``18446744073709551615``
  and ``"18446744073709551615"`` are one ID);
* a number with a fraction or an exponent (a JSON ``2.0`` or ``1e3``, a Parquet double, text of digits with a
  decimal point such as ``"2.0"``, which is how a float column is written to CSV) is the integer it equals when it
  is integral and within +-2^53, where a float holds every integer exactly (JSON and text are read exactly, as
  decimals); otherwise (``1.5``, ``9007199254740993.0``, NaN) the record is ``malformed``, with the field named;
* any other non-empty string is hashed to int64 by :func:`genrec.embedding.dynamic.hashing.string_ids` (blake2b),
  text without a decimal point included (``"12e5"`` is text: hex IDs look like that);
* missing (an absent field, a null, an empty CSV cell) or a boolean: ``malformed``.

Never by column: sources hand over a record's values as read, in object columns (:func:`record_frame`), because a
numeric column with one missing value would become float64 and round every ID above 2^53 in the batch (distinct
items merged, silently). Event IDs follow the same rules, except that text is always text (``"1700000000.5"`` is an
event ID), and are compared as strings (``7`` and ``"7"`` are the same event). Timestamps are integer seconds (a
float is truncated).

Reasons a record is rejected (each counted, logged with its offset and written to the dead letters, never trained):

* ``malformed`` — unreadable (bad JSON or CSV line, a deleted broker entry) or a field missing or of the wrong kind;
* ``unknown_type`` — a ``type`` outside ``event_types``;
* ``duplicate`` — an event ID seen before (in any earlier batch or earlier in the same batch);
* ``out_of_order`` — earlier than its user's latest accepted event by more than ``allowed_lateness`` seconds;
* ``late_file`` — (directory source) a file the stream has not read whose name sorts before the read position
  (it appeared after later files were read, while the stream ran or while it was stopped): not read, its name
  dead-lettered.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd

from genrec.embedding.dynamic.hashing import string_ids
from genrec.errors import ConfigError

REASONS = ("malformed", "unknown_type", "duplicate", "out_of_order", "late_file")
_INTEGER = re.compile(r"[+-]?\d+")
_FRACTION = re.compile(r"[+-]?(\d+\.\d*|\.\d+)([eE][+-]?\d+)?")  # a decimal point: hex text like 12e5 is not one
_INT64 = (-(2**63), 2**63 - 1)
_EXACT = 2**53  # every integer up to this magnitude is exactly a float


def record_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """``n`` records (one dict per record, fields as read; a field may be absent) -> ``n`` rows, one object column
    per field, each cell the value as read (an absent field: None). No column-level conversion: a numeric column
    with a missing value would become float64 and round every integer above 2^53."""
    columns = list(dict.fromkeys(name for record in records for name in record))
    return pd.DataFrame({name: pd.Series([r.get(name) for r in records], dtype=object) for name in columns},
                        index=pd.RangeIndex(len(records)))


@dataclass(frozen=True)
class EventSchema:
    """Where each field of an event is in a record (column or field names), and the accepted event types.

    Attributes:
        event_id / user / item / timestamp: field names (required).
        type: the event-type field, or ``None`` (no type: every event is one kind).
        event_types: the accepted types (``None``: any); a record of another type is ``unknown_type``.
        allowed_lateness: seconds an event may be older than its user's latest accepted event.
    """

    event_id: str = "event_id"
    user: str = "user_id"
    item: str = "item_id"
    timestamp: str = "timestamp"
    type: str | None = None
    event_types: tuple[str, ...] | None = None
    allowed_lateness: int = 0

    @classmethod
    def build(cls, cfg: Any, key: str = "stream.schema") -> "EventSchema":
        """From a plain dict or DictConfig, checked (a bad value raises ConfigError naming ``<key>.<field>``)."""
        values = dict(cfg)
        known = set(cls.__dataclass_fields__)
        for name in values:
            if name not in known:
                raise ConfigError(f"{key}.{name}", f"unknown setting; expected one of {sorted(known)}")
        for name in ("event_id", "user", "item", "timestamp"):
            if not isinstance(values.get(name, "x"), str) or not values.get(name, "x"):
                raise ConfigError(f"{key}.{name}", f"must be a field name, got {values.get(name)!r}")
        types = values.get("event_types")
        if types is not None:
            if values.get("type") is None:
                raise ConfigError(f"{key}.event_types", "needs the event-type field: set stream.schema.type")
            values["event_types"] = tuple(str(t) for t in types)
        lateness = values.get("allowed_lateness", 0)
        if not isinstance(lateness, int) or lateness < 0:
            raise ConfigError(f"{key}.allowed_lateness", f"must be a non-negative number of seconds, got {lateness!r}")
        return cls(**values)

    @property
    def fields(self) -> list[str]:
        """The field names a record should carry."""
        return [self.event_id, self.user, self.item, self.timestamp] + ([self.type] if self.type else [])


@dataclass
class Records:
    """A batch of ``n`` records as a source read them, in stream order.

    Attributes:
        frame: ``n`` rows, one column per field found, values as read (numbers or strings; missing: None/NaN); the
            file and Redis sources hand over object columns (:func:`record_frame`), never a column made float.
        positions: ``n`` human-readable offsets (``"events-0003.jsonl:17"``, ``"1700000000000-0"``).
        end: the source offset just after the last record (JSON-able), what a checkpoint records.
        arrival: ``(n,)`` float seconds since the epoch when each record reached the source, or ``None``.
        broken: row -> (reason, detail) of a record that could not be read at all (its ``frame`` row is empty):
            ``malformed`` (a bad line, a deleted broker entry) or ``late_file``.
        raw: row -> the record as read (a line, a dict), for the dead letters.
    """

    frame: pd.DataFrame
    positions: list[str]
    end: Any
    arrival: np.ndarray | None = None
    broken: dict[int, tuple[str, str]] = field(default_factory=dict)
    raw: Callable[[int], Any] = lambda row: None

    def __len__(self) -> int:
        return len(self.positions)


@dataclass
class Rejected:
    """One rejected record: its row in the batch, offset, reason (one of :data:`REASONS`), detail and content."""

    row: int
    position: str
    reason: str
    detail: str
    record: Any


@dataclass
class Events:
    """The well-formed events of a batch, in stream order (``n`` of them).

    Attributes:
        rows: ``(n,)`` row of each event in its :class:`Records`.
        event_ids: ``(n,)`` object array of event-ID strings; ``keys``: ``(n,)`` int64 hashes of them.
        users / items / times: ``(n,)`` int64.
        arrival: ``(n,)`` float seconds, or ``None``.
    """

    rows: np.ndarray
    event_ids: np.ndarray
    keys: np.ndarray
    users: np.ndarray
    items: np.ndarray
    times: np.ndarray
    arrival: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, keep: np.ndarray) -> "Events":
        """The events selected by a ``(n,)`` bool mask or an index array."""
        return Events(self.rows[keep], self.event_ids[keep], self.keys[keep], self.users[keep], self.items[keep],
                      self.times[keep], None if self.arrival is None else self.arrival[keep])


def _as_number(value: Any, fractions: bool = True) -> Any:
    """Text of digits -> that integer; with ``fractions``, text of digits with a decimal point -> that number
    exactly (a Decimal); any other value as is (other text stripped)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return value
    text = value.strip()
    if _INTEGER.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # more digits than Python converts: far beyond int64, hashed as text
            return text
    return Decimal(text) if fractions and _FRACTION.fullmatch(text) else text


def _is_fractional(value: Any) -> bool:
    return isinstance(value, (float, np.floating, Decimal))


def _finite(value: float | np.floating | Decimal) -> bool:
    return value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)


def _within_exact(value: float | np.floating | Decimal) -> bool:
    """Finite and within +-2^53 (a Decimal compared exactly, without arithmetic: 1e999999999 must not overflow)."""
    return _finite(value) and (value.copy_abs() if isinstance(value, Decimal) else abs(value)) <= _EXACT


def _one_id(value: Any, fractions: bool = True) -> int | str | None:
    """An ID as read -> int (within int64), str (to hash: text, or an integer beyond int64 as its decimal text) or
    None (missing, or not an ID: see the module doc). ``fractions=False``: text with a decimal point stays text."""
    value = _as_number(value, fractions)
    if isinstance(value, str):
        return value or None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, np.integer)):
        value = int(value)
        return value if _INT64[0] <= value <= _INT64[1] else str(value)  # beyond int64: hashed as text
    if _is_fractional(value) and _within_exact(value) and int(value) == value:
        return int(value)
    return None


def _id_note(value: Any) -> str:
    """Why a number with a fraction or an exponent beyond +-2^53 is not an ID, or ''."""
    value = _as_number(value)
    if _is_fractional(value) and _finite(value) and not _within_exact(value):
        return " (a number with a fraction or an exponent is an ID only within +-2^53: write the ID as an integer)"
    return ""


def _whole_int64(values: pd.Series) -> np.ndarray | None:
    """``(n,)`` int64 when every value is an integer within int64 (a signed integer column, or an object column of
    integers only), else None: then the values are judged one by one."""
    if isinstance(values.dtype, np.dtype) and values.dtype.kind == "i":
        return values.to_numpy(np.int64)
    if values.dtype != object or pd.api.types.infer_dtype(values, skipna=False) != "integer":
        return None
    try:
        whole = np.array(values.tolist())
    except (OverflowError, ValueError, TypeError):
        return None
    return whole if whole.dtype == np.int64 else None  # an integer beyond int64 makes another dtype


def parse_ids(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(n,)`` values as read -> (``(n,)`` int64 IDs, ``(n,)`` bool well-formed), value by value as the module doc
    says (a column of int64 integers at once)."""
    whole = _whole_int64(values)
    if whole is not None:
        return whole, np.ones(len(values), dtype=bool)
    parsed = [_one_id(v) for v in values.tolist()]
    ok = np.fromiter((p is not None for p in parsed), dtype=bool, count=len(parsed))
    ids = np.zeros(len(parsed), dtype=np.int64)
    strings = [i for i, p in enumerate(parsed) if isinstance(p, str)]
    numbers = [i for i, p in enumerate(parsed) if isinstance(p, int)]
    if numbers:
        ids[numbers] = [parsed[i] for i in numbers]
    if strings:
        ids[strings] = string_ids(parsed[i] for i in strings)
    return ids, ok


def _one_time(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value) if 0 <= value <= _INT64[1] else None
    if _is_fractional(value):
        return int(value) if _finite(value) and 0 <= value < 2**63 else None
    if isinstance(value, (str, bytes)):
        text = value.decode("utf-8", "replace").strip() if isinstance(value, bytes) else value.strip()
        try:
            return _one_time(float(text)) if not _INTEGER.fullmatch(text) else _one_time(int(text))
        except ValueError:
            return None
    return None


def parse_times(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(n,)`` values -> (``(n,)`` int64 seconds, ``(n,)`` bool well-formed: a non-negative number)."""
    times = _whole_int64(values)
    if times is not None:
        return times, times >= 0
    parsed = [_one_time(v) for v in values.tolist()]
    ok = np.fromiter((p is not None for p in parsed), dtype=bool, count=len(parsed))
    return np.array([p if p is not None else 0 for p in parsed], dtype=np.int64), ok


def _event_ids(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    def one(value: Any) -> str | None:
        parsed = _one_id(value, fractions=False)  # "1700000000.5" is an event ID like any text
        return None if parsed is None else str(parsed)

    ids = np.array([one(v) for v in values.tolist()], dtype=object)
    return ids, np.fromiter((i is not None for i in ids), dtype=bool, count=len(ids))


def _missing(value: Any) -> bool:
    """None, NaN, NA or blank text (an empty CSV cell)."""
    if isinstance(value, str):
        return not value.strip()
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and math.isnan(value))


def _shown(value: Any) -> str:
    """A field's value in a rejection's detail."""
    if _missing(value):
        return "missing"
    return str(value) if isinstance(value, Decimal) else repr(value.item() if isinstance(value, np.generic) else value)


def parse(records: Records, schema: EventSchema) -> tuple[Events, list[Rejected]]:
    """Records -> the well-formed events of known types, and the rejected records (``malformed``,
    ``unknown_type``), in stream order. Duplicates and order are checked against the trainer's state later."""
    n = len(records)
    frame = records.frame
    bad: dict[int, tuple[str, str]] = dict(records.broken)

    def column(name: str) -> pd.Series:
        if name in frame.columns:
            return frame[name].reset_index(drop=True)
        return pd.Series([None] * n, dtype=object)

    event_ids, ok_event = _event_ids(column(schema.event_id))
    users, ok_user = parse_ids(column(schema.user))
    items, ok_item = parse_ids(column(schema.item))
    times, ok_time = parse_times(column(schema.timestamp))
    checks = [(ok_event, schema.event_id, "an event ID"), (ok_user, schema.user, "a user ID"),
              (ok_item, schema.item, "an item ID"), (ok_time, schema.timestamp, "integer seconds >= 0")]
    for ok, name, expected in checks:
        for row in np.flatnonzero(~ok):
            if int(row) not in bad:
                value = frame[name].iloc[row] if name in frame.columns else None
                note = _id_note(value) if name != schema.timestamp else ""
                bad[int(row)] = ("malformed", f"{name}: {_shown(value)}, expected {expected}{note}")
    if schema.type is not None:
        types = column(schema.type).tolist()
        for row, value in enumerate(types):
            if row in bad:
                continue
            if _missing(value):
                bad[row] = ("malformed", f"{schema.type}: missing, expected an event type")
            elif schema.event_types is not None and str(value) not in schema.event_types:
                bad[row] = ("unknown_type",
                            f"{schema.type}: {_shown(value)} is not one of {list(schema.event_types)}")
    keep = np.ones(n, dtype=bool)
    keep[list(bad)] = False
    rows = np.flatnonzero(keep)
    keys = string_ids(event_ids[rows].tolist()) if len(rows) else np.zeros(0, dtype=np.int64)
    events = Events(rows, event_ids[rows], keys, users[rows], items[rows], times[rows],
                    None if records.arrival is None else records.arrival[rows])
    rejected = [Rejected(row, records.positions[row], reason, detail, records.raw(row))
                for row, (reason, detail) in sorted(bad.items())]
    return events, rejected
