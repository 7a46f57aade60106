"""Reader for any event log in CSV, TSV or Parquet, given which columns hold what.

A text file has a header line; for example, with ``read_events(path, user="uid", item="sku",
timestamp="ts")``::

    uid,sku,ts
    u1,42,2023-05-01T12:00:00Z
    u1,17,1682946000

Timestamps are integer unix seconds or ISO 8601 datetimes (converted to unix seconds, naive ones read as UTC,
fractions of a second dropped), from 1970 on; Parquet ``timestamp`` columns and whole-number float columns work
too. User and item IDs become int64 when every value is a canonical integer (no leading zeros) that fits int64,
else ``str``; the item IDs of the optional item-content file follow the same rule together with the events, so the
two join.

Parquet logs too large for memory are streamed (``engine="polars"``, or ``"auto"``): :mod:`genrec.data.outofcore`
checks the file with the same messages and returns a :class:`~genrec.data.outofcore.ParquetEventLog`, which
:func:`~genrec.data.preprocess.build_sequences` turns into the same :class:`SequenceData` as the pandas path.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from genrec.errors import ConfigError, DataError
from genrec.data.io import (FLOAT32_MAX, INT64_MAX, INT64_MIN, add_missing_items, first_line, iter_lines,
                            negative_seconds, normalize_ids, not_float32, not_int64, pandas_compression,
                            require_columns, require_file, shown)
from genrec.data.outofcore import ENGINES, ParquetEventLog, parquet_schema, scan_parquet_events, unsupported
from genrec.data.schema import ITEM, RATING, TEXT_FIELDS, TIMESTAMP, USER, InteractionLog

_FORMATS = {".csv": "csv", ".txt": "csv", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet"}
_INTEGER = r"[+-]?\d+"
_EPOCH = pd.Timestamp(0, tz="UTC")


def read_events(path: str, user: str = "user_id", item: str = "item_id", timestamp: str | None = None,
                rating: str | None = None, features: list[str] | None = None, delimiter: str = ",",
                format: str = "auto", name: str = "events", items_path: str | None = None,
                item_key: str | None = None, engine: str = "auto") -> InteractionLog | ParquetEventLog:
    """Read an event log, renaming the mapped columns to ``user, item[, timestamp][, rating]``.

    Args:
        path: a ``.csv``/``.txt`` (``delimiter``-separated), ``.tsv`` (tab) or ``.parquet``/``.pq`` file; text
            files may be gzipped (``.csv.gz``, or any gzip content).
        user, item, timestamp, rating: column names in the file; ``timestamp`` and ``rating`` are optional.
        features: extra per-interaction columns carried as they are (listed in ``feature_columns``).
        format: ``"auto"`` (by suffix), ``"csv"``, ``"tsv"`` or ``"parquet"``.
        items_path: optional item-content file (same formats), one row per item; every other column becomes
            item content (missing text fields become ``""``).
        item_key: the item ID column of ``items_path`` (default: the ``item`` column name).
        engine: ``"pandas"`` loads the file; ``"polars"`` streams a Parquet file (integer or string IDs, integer
            or datetime timestamps, no ``features``) and returns a :class:`ParquetEventLog`; ``"auto"`` streams
            the Parquet files it can and loads the others.
    """
    features = list(features or [])
    clashes = [f for f in features if f in (USER, ITEM, TIMESTAMP, RATING)]
    if clashes:
        raise ValueError(f"feature column names {clashes} clash with the schema's column names")
    mapping = {user: USER, item: ITEM, timestamp: TIMESTAMP, rating: RATING}
    mapping = {column: target for column, target in mapping.items() if column is not None}
    if engine not in ENGINES:
        raise ConfigError("data.reader.engine", f"expected one of {list(ENGINES)}, got {engine!r}")
    if engine != "pandas":
        streamed = _stream(path, format, mapping, features, engine, name, items_path, item_key or item, delimiter)
        if streamed is not None:
            return streamed
    table = _Table(path, format, delimiter, list(mapping) + features, as_text=[c for c in mapping if c != rating])
    frame = table.frame.rename(columns=mapping)
    user_ids, = normalize_ids(table.ids(user))
    events = pd.DataFrame({USER: user_ids.to_numpy()})
    items = None
    if items_path is None:
        events[ITEM] = normalize_ids(table.ids(item))[0].to_numpy()
    else:
        key = item_key or item
        content = _Table(items_path, "auto", delimiter, None, as_text=[key])
        item_ids, key_ids = normalize_ids(table.ids(item), content.ids(key))
        events[ITEM] = item_ids.to_numpy()
        items = _items(content, key, key_ids, events[ITEM], name)
    if timestamp is not None:
        events[TIMESTAMP] = _seconds(table, frame[TIMESTAMP], timestamp)
    if rating is not None:
        events[RATING] = _ratings(table, frame[RATING], rating)
    for column in features:
        events[column] = frame[column].reset_index(drop=True)
    return InteractionLog(name=name, events=events, items=items, source=str(path), feature_columns=features)


def _stream(path: str, format: str, mapping: dict[str, str], features: list[str], engine: str, name: str,
            items_path: str | None, item_key: str, delimiter: str) -> ParquetEventLog | None:
    """The streamed log of a Parquet file, or ``None`` when ``engine="auto"`` leaves the file to pandas."""
    file = require_file(path)
    reason = None if _format(file, format) == "parquet" else "it is not a Parquet file"
    reason = reason or ("feature columns are read by engine=pandas only" if features else None)
    if reason is None:
        schema = parquet_schema(file)
        require_columns(file, list(mapping), schema.names, None)
        if pq.ParquetFile(file).metadata.num_rows == 0:
            raise DataError(file, "the file has no rows")
        reason = unsupported(schema, {target: column for column, target in mapping.items()})
    if reason is not None:
        if engine == "polars":
            raise ConfigError("data.reader.engine", f"engine=polars cannot stream {file}: {reason}; use "
                                                    "engine=pandas (or auto)")
        return None
    content = None
    if items_path is not None:
        content = _Table(items_path, "auto", delimiter, None, as_text=[item_key])
    columns = {target: column for column, target in mapping.items()}
    log, key_ids = scan_parquet_events(file, columns, name, None if content is None else content.ids(item_key))
    if content is not None:
        log.content = _items(content, item_key, key_ids, pd.Series(log.items), name)
    return log


class _Table:
    """One input file read into a DataFrame, able to name the line (or Parquet row) of a bad value."""

    def __init__(self, path: str, format: str, delimiter: str, columns: list[str] | None, as_text: list[str]):
        """Read ``columns`` (``None``: all); ``as_text`` columns are read as strings from text files and must be
        present too."""
        self.path = require_file(path)
        self.format = _format(self.path, format)
        self.delimiter = "\t" if self.format == "tsv" else delimiter
        required = list(dict.fromkeys((columns or []) + as_text))
        if self.format == "parquet":
            self.frame = self._read_parquet(columns, required)
        else:
            if len(self.delimiter) != 1:
                raise ValueError(f"delimiter must be one character, got {self.delimiter!r}")
            self.frame = self._read_text(columns, required, as_text)
        if self.frame.empty:
            raise DataError(self.path, "the file has a header but no data rows" if self.format != "parquet"
                            else "the file has no rows")

    def _read_parquet(self, columns: list[str] | None, required: list[str]) -> pd.DataFrame:
        present = parquet_schema(self.path).names
        require_columns(self.path, required, present, None)
        return pd.read_parquet(self.path, columns=columns)

    def _read_text(self, columns: list[str] | None, required: list[str], as_text: list[str]) -> pd.DataFrame:
        header_line = first_line(self.path)
        if not header_line.strip():
            raise DataError(self.path, "the file is empty; expected a header line naming the columns", line=1)
        self.header = next(csv.reader([header_line], delimiter=self.delimiter))
        repeated = sorted({c for c in self.header if self.header.count(c) > 1})
        if repeated:
            raise DataError(self.path, f"the header names column(s) {repeated} more than once; expected distinct "
                                       "column names", line=1, key=repeated[0])
        require_columns(self.path, required, self.header, self.delimiter)
        try:  # no usecols: it would silently ignore extra fields
            frame = pd.read_csv(self.path, sep=self.delimiter, dtype={c: "str" for c in as_text},
                                compression=pandas_compression(self.path), index_col=False)
        except (ValueError, OSError, EOFError) as e:
            raise self.error(None, f"cannot parse the file: {e}") from None
        return frame if columns is None else frame[columns]

    def error(self, row: int | None, message: str) -> DataError:
        """A :class:`DataError` for data row ``row`` (0-based), or for the first line with a wrong field count."""
        if self.format == "parquet":
            return DataError(self.path, f"row {row + 1}: {message}" if row is not None else message)
        reader = csv.reader((line + "\n" for _, line in iter_lines(self.path)), delimiter=self.delimiter)
        index = -1  # the header
        for fields in reader:
            if not fields:
                continue
            if len(fields) != len(self.header):
                return DataError(self.path, f"expected {len(self.header)} fields separated by {self.delimiter!r} "
                                            f"as in the header, found {len(fields)}", line=reader.line_num)
            if index == row:
                return DataError(self.path, message, line=reader.line_num)
            index += 1
        return DataError(self.path, message)

    def ids(self, column: str) -> pd.Series:
        values = self.frame[column]
        missing = values.isna().to_numpy()
        if missing.any():
            raise self.error(int(missing.argmax()), f"missing value in ID column {column!r}")
        return values


def _format(path: Path, format: str) -> str:
    if format != "auto":
        if format not in ("csv", "tsv", "parquet"):
            raise ValueError(f"format must be 'auto', 'csv', 'tsv' or 'parquet', got {format!r}")
        return format
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    found = _FORMATS.get(suffixes[-1] if suffixes else "")
    if found is None:
        raise DataError(path, "cannot tell the format from the file name; expected a .csv, .tsv, .txt (each "
                              "optionally .gz), .parquet or .pq suffix, or pass format=")
    return found


def _seconds(table: _Table, values: pd.Series, column: str) -> np.ndarray:
    """Integer seconds, ISO 8601 datetimes (each value either), a datetime column or a whole-number float column,
    as int64 unix seconds from 1970 on."""
    if pd.api.types.is_integer_dtype(values) or pd.api.types.is_float_dtype(values):
        return _numeric_seconds(table, values, column)
    if pd.api.types.is_datetime64_any_dtype(values):
        parsed = values.dt.tz_localize("UTC") if values.dt.tz is None else values
        integers = pd.Series(False, index=values.index)
    else:
        text = values.astype(str)
        integers = text.str.fullmatch(_INTEGER)
        parsed = pd.to_datetime(text.mask(integers), utc=True, format="ISO8601", errors="coerce")
    bad = ((parsed.isna() & ~integers) | values.isna()).to_numpy()
    if bad.any():
        row = int(bad.argmax())
        raise table.error(row, f"expected integer unix seconds or an ISO 8601 datetime in {column!r}, "
                               f"found {shown(values.iloc[row])}")
    seconds = ((parsed - _EPOCH) // pd.Timedelta(seconds=1)).fillna(0).to_numpy(np.int64)
    if integers.any():
        long = (integers & (text.str.lstrip("+-").str.lstrip("0").str.len() > 18)).to_numpy()
        for row in np.flatnonzero(long):  # 19 digits or more: may not fit int64
            if not INT64_MIN <= int(text.iloc[row]) <= INT64_MAX:
                raise table.error(int(row), not_int64("timestamp", text.iloc[row]) + f" (column {column!r})")
        seconds[integers.to_numpy()] = text[integers].astype(np.int64).to_numpy()
    negative = seconds < 0
    if negative.any():
        row = int(negative.argmax())
        value = values.iloc[row]
        if integers.iloc[row]:
            raise table.error(row, negative_seconds("timestamp", value) + f" (column {column!r})")
        raise table.error(row, f"timestamp {shown(value)} is before 1970: expected a time from 1970 on "
                               f"(column {column!r})")
    return seconds


def _numeric_seconds(table: _Table, values: pd.Series, column: str) -> np.ndarray:
    """A numeric (Parquet) timestamp column: whole numbers from 0 to the int64 maximum."""
    numbers = values.to_numpy()
    if pd.api.types.is_float_dtype(values):
        bad = ~np.isfinite(numbers) | (numbers != np.round(numbers))
        if bad.any():
            row = int(bad.argmax())
            raise table.error(row, f"expected integer unix seconds in {column!r}, found {shown(values.iloc[row])}")
    too_large = numbers >= 2.0 ** 63 if pd.api.types.is_float_dtype(values) else numbers > INT64_MAX
    if too_large.any():
        row = int(too_large.argmax())
        raise table.error(row, not_int64("timestamp", shown(values.iloc[row])) + f" (column {column!r})")
    negative = numbers < 0
    if negative.any():
        row = int(negative.argmax())
        raise table.error(row, negative_seconds("timestamp", shown(values.iloc[row])) + f" (column {column!r})")
    return numbers.astype(np.int64)


def _ratings(table: _Table, values: pd.Series, column: str) -> np.ndarray:
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    bad = ~(np.abs(numbers) <= FLOAT32_MAX)  # NaN too
    if bad.any():
        row = int(bad.argmax())
        if np.isnan(numbers[row]):
            raise table.error(row, f"expected a number in {column!r}, found {shown(values.iloc[row])}")
        raise table.error(row, not_float32("rating", values.iloc[row]) + f" (column {column!r})")
    return numbers.astype(np.float32)


def _items(content: _Table, key: str, key_ids: pd.Series, event_items: pd.Series, name: str) -> pd.DataFrame:
    repeated = key_ids.duplicated().to_numpy()
    if repeated.any():
        row = int(repeated.argmax())
        raise content.error(row, f"item {str(key_ids.iloc[row])!r} appears twice in {key!r}")
    items = content.frame.drop(columns=[key]).set_axis(pd.Index(key_ids.to_numpy(), name=ITEM))
    text = [c for c in TEXT_FIELDS if c in items.columns]
    if text:
        items[text] = items[text].fillna("").astype(str)
    return add_missing_items(items, event_items, {c: "" for c in text}, name)
