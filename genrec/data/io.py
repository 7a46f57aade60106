"""Helpers shared by the readers: open maybe-gzipped files, parse delimited numeric tables fast, and on failure
find the offending line so the :class:`DataError` can name it.

Files are recognised as gzip by their first two bytes (``1f 8b``), whatever their suffix.
"""
from __future__ import annotations

import csv
import gzip
import io
import logging
import math
import re
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from genrec.errors import DataError
from genrec.data.schema import ITEM

log = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
#: Canonical decimal integers that fit int64 (no leading zeros, so IDs like "0123" stay strings).
_CANONICAL_INT = r"0|-?[1-9]\d{0,17}"
INT64_MIN, INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: Column kinds of :func:`read_numeric_table` -> the dtype pandas reads them as. ``seconds``: a non-negative int64.
_KINDS = {"int": "int64", "seconds": "int64", "float": "float64"}
_DELIMITER_NAMES = {",": "comma", "\t": "tab", "::": "'::'", "|": "'|'", ";": "semicolon", " ": "space"}
#: What a failed read of a table raises: pandas parse errors, int64 overflow, bad gzip, undecodable text.
_READ_ERRORS = (ValueError, OverflowError, OSError, EOFError, zlib.error)


def require_file(path: str | Path) -> Path:
    """``path`` as a :class:`Path`; :class:`DataError` when it is missing or not a file."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, "file not found")
    if not path.is_file():
        raise DataError(path, "expected a file, found a directory")
    return path


def is_gzip(path: str | Path) -> bool:
    with open(require_file(path), "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def _open_binary(path: Path):
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, decompressed when gzipped."""
    path = require_file(path)
    try:
        with _open_binary(path) as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(path, f"cannot read the file (corrupt or truncated gzip?): {e}") from None


def read_text(path: str | Path, encoding: str = "utf-8") -> str:
    """The whole file as text; an undecodable byte is reported with its line."""
    data = read_bytes(path)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(path, f"not valid {encoding} text: byte {data[e.start:e.start + 1]!r}", line=line) from None


def iter_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    r"""``(line_number, line)`` pairs, 1-based, without the line ending, streamed (splits on ``\n`` only, unlike
    ``str.splitlines``, which also splits on the ``\x85`` and ``\x1c``-``\x1e`` that latin-1 titles may hold)."""
    path = require_file(path)
    try:
        with _open_binary(path) as f:
            for number, raw in enumerate(f, start=1):
                try:
                    yield number, raw.decode(encoding).rstrip("\r\n")
                except UnicodeDecodeError as e:
                    raise DataError(path, f"not valid {encoding} text: byte {raw[e.start:e.start + 1]!r}",
                                    line=number) from None
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(path, f"cannot read the file (corrupt or truncated gzip?): {e}") from None


def first_line(path: str | Path, encoding: str = "utf-8") -> str:
    """The first line without its ending, reading no further (for header checks of big files)."""
    path = require_file(path)
    try:
        with _open_binary(path) as f:
            return f.readline().decode(encoding).rstrip("\r\n")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise DataError(path, f"cannot read the first line: {e}", line=1) from None


def pandas_compression(path: str | Path) -> str | None:
    return "gzip" if is_gzip(path) else None


def _delimiter_hint(line: str, expected: str, n_fields: int) -> str:
    for delimiter, label in _DELIMITER_NAMES.items():
        if delimiter != expected and delimiter in line and len(line.split(delimiter)) == n_fields:
            return f"; the line looks {label}-separated"
    return ""


def split_fields(path: Path, number: int, line: str, delimiter: str, names: list[str]) -> list[str]:
    """``line`` split on ``delimiter`` into exactly ``len(names)`` fields, else :class:`DataError`."""
    fields = line.split(delimiter)
    if len(fields) != len(names):
        raise DataError(path, f"expected {len(names)} fields separated by {delimiter!r} ({', '.join(names)}), "
                              f"found {len(fields)}{_delimiter_hint(line, delimiter, len(names))}", line=number)
    return fields


def not_int64(what: str, value) -> str:
    """The message for an integer too large for int64, e.g. ``user 99999999999999999999 does not fit ...``."""
    return f"{what} {value} does not fit in a 64-bit integer ({INT64_MIN} to {INT64_MAX})"


def negative_seconds(what: str, value) -> str:
    """The message for a timestamp before 1970, e.g. ``timestamp -5 is negative: expected seconds since 1970``."""
    return f"{what} {value} is negative: expected seconds since 1970"


def not_float32(what: str, value: str | float) -> str | None:
    """The message for a number that is not finite or too large for float32; ``None`` when ``value`` is fine."""
    if math.isfinite(float(value)) and abs(float(value)) <= FLOAT32_MAX:
        return None
    return f"{what} {value} is not a finite number that fits in a 32-bit float (at most {FLOAT32_MAX:.4g})"


def require_columns(path: Path, wanted: list[str], present: list[str], delimiter: str | None) -> None:
    """:class:`DataError` naming the columns of ``wanted`` that ``present`` lacks (and the delimiter, when a text
    header did not split)."""
    missing = [c for c in wanted if c not in present]
    if missing:
        hint = ""
        if delimiter is not None and len(present) == 1:
            hint = f"; the header splits into one column: is the delimiter {delimiter!r} right?"
        raise DataError(path, f"missing column(s) {missing}; the file has columns {present}{hint}",
                        key=missing[0])


def shown(value) -> str:
    """``value`` for a message: ``'yesterday'``, ``5.5``, ``nan``, ``'1960-01-01 00:00:00'`` (NumPy scalars as
    plain Python values, datetimes as text)."""
    if isinstance(value, pd.Timestamp):
        return repr(str(value))
    return repr(value.item() if isinstance(value, np.generic) else value)


def parse_int(path: Path, number: int, value: str, what: str) -> int:
    """``value`` as an int64 integer, else :class:`DataError` naming line ``number``."""
    if not _INT.fullmatch(value):
        raise DataError(path, f"expected an integer {what}, found {value!r}", line=number)
    if not INT64_MIN <= int(value) <= INT64_MAX:
        raise DataError(path, not_int64(what, value), line=number)
    return int(value)


def _integer(text: str) -> int | None:
    """``text`` as an integer the way pandas' int64 parser reads it (``7``, ``+7``, and whole numbers written as
    floats: ``7.0``, ``7e3``), else ``None``."""
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text) and math.isfinite(float(text)) and float(text).is_integer():
        return int(float(text))
    return None


def _field_problem(column: str, kind: str, value: str) -> str | None:
    """Why ``value`` is not a valid field of ``kind`` (see :data:`_KINDS`), or ``None``."""
    text = value.strip()
    if kind == "float":
        return not_float32(column, text) if _FLOAT.fullmatch(text) else \
            f"expected a number for {column!r}, found {value!r}"
    number = _integer(text)
    if number is None:
        return f"expected an integer for {column!r}, found {value!r}"
    if not INT64_MIN <= number <= INT64_MAX:
        return not_int64(column, text)
    if kind == "seconds" and number < 0:
        return negative_seconds(column, text)
    return None


def _check_line(path: Path, number: int, line: str, delimiter: str, columns: dict[str, str]) -> None:
    fields = split_fields(path, number, line, delimiter, list(columns))
    for (column, kind), value in zip(columns.items(), fields):
        problem = _field_problem(column, kind, value)
        if problem:
            raise DataError(path, problem, line=number)


def _bad_line_error(path: Path, delimiter: str, columns: dict[str, str], skip_header: bool, encoding: str,
                    cause: str) -> DataError:
    """Re-scan the file line by line to name the first bad line (error path only)."""
    for number, line in iter_lines(path, encoding):
        if (skip_header and number == 1) or not line.strip():
            continue
        _check_line(path, number, line, delimiter, columns)
    return DataError(path, f"cannot parse the file: {cause}")


def read_numeric_table(path: str | Path, delimiter: str, columns: dict[str, str], *, skip_header: bool = False,
                       encoding: str = "utf-8") -> pd.DataFrame:
    """Read a delimited file of numeric columns, vectorised (pandas' C parser).

    Args:
        columns: column name -> ``"int"`` (int64), ``"seconds"`` (int64 unix seconds, not negative) or
            ``"float"`` (float32, finite), in file order.
        delimiter: one character, or ``"::"`` (MovieLens 1M/10M).
        skip_header: the first line is a header (checked by the caller) and is skipped.

    Blank lines are skipped. Any other line that does not have exactly ``len(columns)`` fields of the right kind
    raises :class:`DataError` naming it. Whole numbers written as floats (``7.0``) are read as integers, as pandas
    does.
    """
    path = require_file(path)
    source, sep = path, delimiter
    options = {"compression": pandas_compression(path), "encoding": encoding}
    if len(delimiter) > 1:
        text = read_text(path, encoding)
        if "\t" in text:
            raise _bad_line_error(path, delimiter, columns, skip_header, encoding, "unexpected tab character")
        source, sep, options = io.StringIO(text.replace(delimiter, "\t")), "\t", {}
    try:
        frame = pd.read_csv(source, sep=sep, header=None, names=list(columns), skiprows=int(skip_header),
                            dtype={c: _KINDS[k] for c, k in columns.items()}, quoting=csv.QUOTE_NONE,
                            index_col=False, na_filter=False, **options)
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame()
    except _READ_ERRORS as e:
        raise _bad_line_error(path, delimiter, columns, skip_header, encoding, str(e)) from None
    if frame.empty:
        raise DataError(path, "the file has no data lines" + (" after its header" if skip_header else " (empty)"))
    floats = [c for c, k in columns.items() if k == "float"]
    if floats and not (np.abs(frame[floats].to_numpy()) <= FLOAT32_MAX).all():  # False for NaN too
        raise _bad_line_error(path, delimiter, columns, skip_header, encoding, "a number outside float32")
    seconds = [c for c, k in columns.items() if k == "seconds"]
    if seconds and (frame[seconds].to_numpy() < 0).any():
        raise _bad_line_error(path, delimiter, columns, skip_header, encoding, "a negative timestamp")
    return frame.astype({c: np.float32 for c in floats})


def normalize_ids(*columns: pd.Series | list) -> list[pd.Series]:
    """Give ID columns that must join one dtype: int64 when every value is a canonical integer, else ``str``."""
    series = [c if isinstance(c, pd.Series) else pd.Series(c, dtype=object) for c in columns]
    if all(_is_integral(s) for s in series):
        return [s.astype(np.int64) for s in series]
    as_text = [s.astype(str) for s in series]
    if all(s.str.fullmatch(_CANONICAL_INT).all() for s in as_text):
        return [s.astype(np.int64) for s in as_text]
    return as_text


def _is_integral(values: pd.Series) -> bool:
    """Integer dtype, or a float dtype whose values are all whole numbers (Parquet IDs written as floats), and
    every value fits int64 (a uint64 or float ID beyond it stays a string rather than wrapping around)."""
    if not (pd.api.types.is_integer_dtype(values) or pd.api.types.is_float_dtype(values)):
        return False
    numbers = values.to_numpy()
    if pd.api.types.is_unsigned_integer_dtype(values):
        return bool((numbers <= INT64_MAX).all())
    if pd.api.types.is_integer_dtype(values):
        return True
    return bool(np.isfinite(numbers).all() and (numbers == np.round(numbers)).all()
                and (np.abs(numbers) < 2.0 ** 63).all())


def add_missing_items(items: pd.DataFrame, event_items: pd.Series, fill: dict, name: str) -> pd.DataFrame:
    """Append a row filled with ``fill`` for every event item that ``items`` lacks, logging the count."""
    missing = pd.Index(event_items.unique()).difference(items.index)
    if len(missing) == 0:
        return items
    log.warning("%s: %d of %d interacted items have no content row; they get empty %s", name, len(missing),
                event_items.nunique(), ", ".join(fill))
    extra = pd.DataFrame({column: [value] * len(missing) for column, value in fill.items()},
                         index=missing.rename(ITEM))
    return pd.concat([items, extra])
