"""Parquet event logs larger than memory (``data.reader.engine=polars``): the generic reader's checks and ID rules,
with the file streamed by Polars instead of loaded into a pandas table.

Two streaming passes over the file (Polars reads it in batches; no pass holds the log):

1. :func:`scan_parquet_events` — the distinct users and items, and the aggregates the checks need (nulls, the
   smallest and largest timestamp, the largest rating). A check that fails looks up its first offending row
   (one more pass, on the error path only) and raises the :class:`DataError` the pandas path raises, the value
   formatted from the same row read through pandas. IDs follow :func:`genrec.data.io.normalize_ids`, applied to
   the distinct values (the rule is a property of the set of values, so it decides the same).
2. :func:`encode_events` — the events as ``(user code, item code, timestamp)`` NumPy arrays in file order: int32
   codes from joins against the sorted ID tables. This is what stays in memory: 16 bytes per event (8 without
   timestamps), whatever the log's other columns and ID types.

Filtering, remapping and ordering then run on those arrays (:func:`genrec.data.preprocess.build_sequences`);
``scripts/bench/bench_preprocess.py`` measured this design against Polars-only and DuckDB-only pipelines
(docs/results.md, "Out-of-core preprocessing").

Column types read here: integer or string IDs (dictionary-encoded strings too), integer or datetime timestamps,
numeric ratings. Anything else (float IDs, timestamps stored as text or floats, extra feature columns) is left to
the pandas path, which ``engine=auto`` then picks (:func:`unsupported`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from genrec.data.io import (FLOAT32_MAX, INT64_MAX, negative_seconds, normalize_ids, not_float32, not_int64,
                            require_columns, shown)
from genrec.data.schema import ITEM, RATING, TIMESTAMP, USER
from genrec.errors import DataError

ENGINES = ("auto", "pandas", "polars")


@dataclass
class ParquetEventLog:
    """A Parquet event log checked and summarised, not loaded: what :func:`genrec.data.preprocess.build_sequences`
    needs to stream it.

    Attributes:
        name: dataset name.
        path: the Parquet file.
        columns: schema column (``user``, ``item``, optionally ``timestamp``, ``rating``) -> column in the file.
        users / items: ``(U,)`` / ``(I,)`` the distinct raw IDs, sorted, int64 or str (as the pandas path types them).
        user_keys / item_keys: the same IDs as the file stores them (the join keys), aligned with ``users`` /
            ``items``.
        num_rows: events in the file.
        content: item content indexed by raw item ID (read by the caller), or ``None``.
    """

    name: str
    path: Path
    columns: dict[str, str]
    users: np.ndarray
    items: np.ndarray
    user_keys: pl.Series
    item_keys: pl.Series
    num_rows: int
    content: pd.DataFrame | None = None

    @property
    def source(self) -> str:
        return str(self.path)

    @property
    def has_timestamps(self) -> bool:
        return TIMESTAMP in self.columns


@dataclass
class EventCodes:
    """The events of a :class:`ParquetEventLog` in file order, as codes into its ID tables.

    Attributes:
        users: ``(N,)`` int32 index into ``log.users``.
        items: ``(N,)`` int32 index into ``log.items``.
        timestamps: ``(N,)`` int64 unix seconds, or ``None``.
    """

    users: np.ndarray
    items: np.ndarray
    timestamps: np.ndarray | None


def parquet_schema(path: Path) -> pa.Schema:
    """The file's Arrow schema; :class:`DataError` when it is not a readable Parquet file."""
    try:
        return pq.read_schema(path)
    except (pa.ArrowException, OSError) as e:
        raise DataError(path, f"not a readable Parquet file: {e}") from None


def unsupported(schema: pa.Schema, columns: dict[str, str]) -> str | None:
    """Why the streaming path cannot read these columns of a Parquet file (``None`` when it can)."""
    for target, column in columns.items():
        kind = schema.field(column).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if target in (USER, ITEM):
            ok = pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind) \
                or pa.types.is_string_view(kind)
        elif target == TIMESTAMP:
            ok = pa.types.is_integer(kind) or pa.types.is_timestamp(kind)
        else:
            ok = pa.types.is_integer(kind) or pa.types.is_floating(kind)
        if not ok:
            return f"column {column!r} ({target}) is stored as {kind}"
    return None


def _key(column: str, dtype: pl.DataType) -> pl.Expr:
    """An ID column as join key: dictionary-encoded strings as plain strings."""
    return pl.col(column).cast(pl.String) if isinstance(dtype, (pl.Categorical, pl.Enum)) else pl.col(column)


def _value_at(path: Path, column: str, row: int):
    """The value of ``column`` at data row ``row`` (0-based) as the pandas path reads it (one row group read)."""
    file = pq.ParquetFile(path)
    start = 0
    for group in range(file.num_row_groups):
        size = file.metadata.row_group(group).num_rows
        if row < start + size:
            return file.read_row_group(group, columns=[column]).to_pandas()[column].iloc[row - start]
        start += size
    raise IndexError(row)


def _first_row(scan: pl.LazyFrame, condition: pl.Expr) -> int:
    """The 0-based index of the first row where ``condition`` holds (streamed)."""
    found = (scan.with_row_index("_row").filter(condition).select(pl.col("_row").min())
             .collect(engine="streaming").item())
    return int(found)


class _Checks:
    """The pandas path's checks of one file, in its order: ID nulls, then timestamps, then ratings."""

    def __init__(self, path: Path, scan: pl.LazyFrame, schema: pl.Schema, columns: dict[str, str]):
        self.path, self.scan, self.schema, self.columns = path, scan, schema, columns

    def fail(self, column: str, condition: pl.Expr, message) -> None:
        """Raise for the first row where ``condition`` holds; ``message(value)`` describes its ``column`` value."""
        row = _first_row(self.scan, condition)
        raise DataError(self.path, f"row {row + 1}: {message(_value_at(self.path, column, row))}")

    def aggregates(self) -> list[pl.Expr]:
        """What the checks need from one pass, as named aggregates."""
        out = []
        if TIMESTAMP in self.columns:
            t = pl.col(self.columns[TIMESTAMP])
            out += [t.null_count().alias("t_nulls")]
            if isinstance(self.schema[self.columns[TIMESTAMP]], pl.Datetime):
                out += [t.dt.epoch("s").min().alias("t_min"), pl.lit(0).alias("t_max")]
            else:
                out += [t.min().alias("t_min"), t.max().alias("t_max")]
        if RATING in self.columns:
            r = pl.col(self.columns[RATING]).cast(pl.Float64)
            out += [r.null_count().alias("r_nulls"), r.is_nan().any().alias("r_nan"), r.abs().max().alias("r_max")]
        return out

    def ids(self, target: str, keys: pl.Series) -> None:
        column = self.columns[target]
        if keys.null_count():
            self.fail(column, pl.col(column).is_null(), lambda _: f"missing value in ID column {column!r}")

    def timestamps(self, stats: dict) -> None:
        if TIMESTAMP not in self.columns:
            return
        column = self.columns[TIMESTAMP]
        t = pl.col(column)
        if isinstance(self.schema[column], pl.Datetime):
            if stats["t_nulls"]:
                self.fail(column, t.is_null(), lambda v: "expected integer unix seconds or an ISO 8601 datetime in "
                                                         f"{column!r}, found {shown(v)}")
            if stats["t_min"] is not None and stats["t_min"] < 0:
                self.fail(column, t.dt.epoch("s") < 0, lambda v: f"timestamp {shown(v)} is before 1970: expected "
                                                                 f"a time from 1970 on (column {column!r})")
            return
        if stats["t_nulls"]:  # pandas reads an integer column with nulls as floats
            self.fail(column, t.is_null(), lambda v: f"expected integer unix seconds in {column!r}, found {shown(v)}")
        if stats["t_max"] is not None and stats["t_max"] > INT64_MAX:
            self.fail(column, t > INT64_MAX, lambda v: not_int64("timestamp", shown(v)) + f" (column {column!r})")
        if stats["t_min"] is not None and stats["t_min"] < 0:
            self.fail(column, t < 0, lambda v: negative_seconds("timestamp", shown(v)) + f" (column {column!r})")

    def ratings(self, stats: dict) -> None:
        if RATING not in self.columns:
            return
        column = self.columns[RATING]
        r = pl.col(column).cast(pl.Float64)
        if stats["r_nulls"] or stats["r_nan"]:
            self.fail(column, r.is_null() | r.is_nan(),
                      lambda v: f"expected a number in {column!r}, found {shown(v)}")
        if stats["r_max"] is not None and stats["r_max"] > FLOAT32_MAX:
            self.fail(column, r.abs() > FLOAT32_MAX, lambda v: not_float32("rating", v) + f" (column {column!r})")


def _sorted_ids(keys: pl.Series, normalized: pd.Series) -> tuple[np.ndarray, pl.Series]:
    """``(sorted normalized IDs, the file's keys in that order)``; strings sort by code point, as in pandas."""
    values = normalized.to_numpy()
    if values.dtype == object:
        order = pl.Series(values, dtype=pl.String).arg_sort().to_numpy()
    else:
        order = np.argsort(values)
    return values[order], keys.gather(order)


def scan_parquet_events(path: Path, columns: dict[str, str], name: str,
                        content_keys: pd.Series | None = None) -> tuple[ParquetEventLog, pd.Series | None]:
    """Check a Parquet event log and collect its ID tables (one streamed pass; see the module docstring).

    Args:
        path: the Parquet file, with rows; its schema was read (:func:`parquet_schema`) and its columns checked.
        columns: schema column (``user``, ``item``, ``timestamp``, ``rating``) -> column in the file.
        content_keys: the item IDs of an item-content file, typed together with the events' items.

    Returns:
        the log, and ``content_keys`` typed like its items (``None`` without them).
    """
    num_rows = pq.ParquetFile(path).metadata.num_rows
    scan = pl.scan_parquet(path)
    schema = scan.select(list(columns.values())).collect_schema()
    checks = _Checks(path, scan, schema, columns)
    user, item = columns[USER], columns[ITEM]
    queries = [scan.select(_key(user, schema[user]).unique()), scan.select(_key(item, schema[item]).unique())]
    aggregates = checks.aggregates()
    if aggregates:
        queries.append(scan.select(aggregates))
    found = pl.collect_all(queries, engine="streaming")
    user_keys, item_keys = found[0].to_series(), found[1].to_series()
    checks.ids(USER, user_keys)
    checks.ids(ITEM, item_keys)
    stats = found[2].row(0, named=True) if aggregates else {}
    checks.timestamps(stats)
    checks.ratings(stats)

    users, = normalize_ids(user_keys.to_pandas())
    if content_keys is None:
        items, content_ids = normalize_ids(item_keys.to_pandas())[0], None
    else:
        items, content_ids = normalize_ids(item_keys.to_pandas(), content_keys)
    users, user_keys = _sorted_ids(user_keys, users)
    items, item_keys = _sorted_ids(item_keys, items)
    log = ParquetEventLog(name=name, path=path, columns=columns, users=users, items=items, user_keys=user_keys,
                          item_keys=item_keys, num_rows=num_rows)
    return log, content_ids


def _take(frame: pl.DataFrame, column: str) -> np.ndarray:
    """One column as a contiguous NumPy array, released from ``frame`` first (one column copied at a time)."""
    return frame.drop_in_place(column).to_numpy()


def encode_events(log: ParquetEventLog, min_rating: float | None = None) -> EventCodes:
    """Stream the log once: events with ``rating >= min_rating`` (compared in float32, like the pandas path) as
    codes into ``log.users`` / ``log.items``, in file order."""
    scan = pl.scan_parquet(log.path)
    schema = scan.collect_schema()
    if min_rating is not None:
        scan = scan.filter(pl.col(log.columns[RATING]).cast(pl.Float32) >= pl.lit(min_rating, pl.Float32))
    user, item = log.columns[USER], log.columns[ITEM]
    selected = [_key(user, schema[user]).alias("_user_key"), _key(item, schema[item]).alias("_item_key")]
    if log.has_timestamps:
        t = pl.col(log.columns[TIMESTAMP])
        selected.append((t.dt.epoch("s") if isinstance(schema[log.columns[TIMESTAMP]], pl.Datetime) else t)
                        .cast(pl.Int64).alias("_time"))
    user_table = pl.LazyFrame({"_user_key": log.user_keys, "_user": np.arange(len(log.users), dtype=np.int32)})
    item_table = pl.LazyFrame({"_item_key": log.item_keys, "_item": np.arange(len(log.items), dtype=np.int32)})
    frame = (scan.select(selected)
             .join(user_table, on="_user_key", maintain_order="left")
             .join(item_table, on="_item_key", maintain_order="left")
             .select(["_user", "_item"] + (["_time"] if log.has_timestamps else []))
             .collect(engine="streaming"))
    if min_rating is None and frame.height != log.num_rows:
        raise DataError(log.path, f"the file changed while it was read ({log.num_rows} rows, then {frame.height})")
    return EventCodes(users=_take(frame, "_user"), items=_take(frame, "_item"),
                      timestamps=_take(frame, "_time") if log.has_timestamps else None)
