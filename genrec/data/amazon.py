"""Readers for the Amazon review datasets (McAuley, UCSD) in the three forms they circulate in.

* :func:`read_amazon_sequences` — the 5-core ``user_sequence.txt`` of P5/TIGER/GRAM: one line per user, the user
  ID then its item IDs in chronological order, space-separated (``A1YJEY40YUW4SE B004756YJA B004ZT0SSG``); no
  timestamps. Optional titles: a TSV with header ``asin<TAB>title``.
* :func:`read_amazon_lcrec` — LC-Rec's ``*.inter.json`` (``{"0": [0, 1, 2], "1": [9, 10]}``: user -> chronological
  item IDs) and ``*.item.json`` (``{"0": {"title": ..., "description": ..., "brand": ..., "categories": ...}}``).
* :func:`read_amazon_reviews` — the raw review dumps, one record per line (``{"reviewerID": "A2SUAM1J3GNN3B",
  "asin": "0000013714", "overall": 5.0, "unixReviewTime": 1356998400, ...}``), and the metadata, one product per
  line: JSON (2018) or a Python dict literal (2014: ``{'asin': '0000031852', 'title': ..., 'categories': [[...]]}``).

All files may be gzipped (recognised by content). Item IDs of the sequence and LC-Rec formats become int64 when
every ID in the events and the item file is a canonical integer, else ``str``; raw review IDs stay ``str``.
"""
from __future__ import annotations

import ast
import json
import logging
from itertools import chain
from pathlib import Path

import numpy as np
import pandas as pd

from genrec.errors import DataError
from genrec.data.io import (INT64_MAX, add_missing_items, iter_lines, negative_seconds, normalize_ids, not_float32,
                            not_int64, read_text, require_file)
from genrec.data.schema import ITEM, RATING, TEXT_FIELDS, TIMESTAMP, USER, InteractionLog

log = logging.getLogger(__name__)

_EMPTY_TEXT = {field: "" for field in TEXT_FIELDS}


def read_amazon_sequences(path: str, titles: str | None = None, name: str = "amazon") -> InteractionLog:
    """Read a ``user_sequence.txt`` (gzipped or not) and optionally an ``asin<TAB>title`` TSV.

    Events have columns ``user, item`` only; row order within a user is the file's chronological order. Items in
    the sequences without a title row are kept with an empty title (and a warning with their count).

    Example line: ``A1YJEY40YUW4SE B004756YJA B004ZT0SSG B0020YLEYK 7806397051 B002WLWX82``.
    """
    path = require_file(path)
    users, sequences = _parse_sequences(path)
    title_keys, title_values = _parse_titles(require_file(titles)) if titles else ([], [])
    user_ids, = normalize_ids(users)
    item_ids, title_ids = normalize_ids(list(chain.from_iterable(sequences)), title_keys)
    events = pd.DataFrame({
        USER: np.repeat(user_ids.to_numpy(), [len(s) for s in sequences]),
        ITEM: item_ids.to_numpy(),
    })
    items = None
    if titles:
        items = pd.DataFrame({"title": title_values}, index=pd.Index(title_ids, name=ITEM))
        items = add_missing_items(items, events[ITEM], {"title": ""}, name)
    return InteractionLog(name=name, events=events, items=items, source=str(path))


def _parse_sequences(path: Path) -> tuple[list[str], list[list[str]]]:
    users, sequences, first_line = [], [], {}
    for number, line in iter_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 2 or "," in line:
            raise DataError(path, "expected a user ID followed by at least one item ID, separated by spaces, "
                                  f"found {line[:80]!r}", line=number)
        user = fields[0]
        if user in first_line:
            raise DataError(path, f"user {user!r} already has a sequence on line {first_line[user]}", line=number)
        first_line[user] = number
        users.append(user)
        sequences.append(fields[1:])
    if not users:
        raise DataError(path, "the file is empty; expected one line per user: user ID then item IDs")
    return users, sequences


def _parse_titles(path: Path) -> tuple[list[str], list[str]]:
    keys, values, first_line = [], [], {}
    for number, line in iter_lines(path):
        if number == 1 or not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(path, f"expected 2 tab-separated fields (asin, title), found {len(fields)}", line=number)
        key, title = fields
        if key in first_line:
            raise DataError(path, f"item {key!r} already has a title on line {first_line[key]}", line=number)
        first_line[key] = number
        keys.append(key)
        values.append(title)
    if not keys:
        raise DataError(path, "no title lines; expected a header 'asin<TAB>title' and then one line per item")
    return keys, values


def read_amazon_lcrec(inter_path: str, item_path: str | None = None, name: str = "amazon") -> InteractionLog:
    """Read LC-Rec's ``*.inter.json`` and optionally ``*.item.json`` (each gzipped or not).

    Events have columns ``user, item`` in each user's list order (chronological). Items carry the text fields
    ``title, description, brand, categories`` (a list value is joined with ``,`` for categories and a space
    otherwise; a missing field is ``""``).

    Example: ``{"0": [0, 1, 2], "1": [9, 10, 11, 12, 6]}`` and ``{"0": {"title": "SUPCO SPP6 Relay...", ...}}``.
    """
    inter_path = require_file(inter_path)
    inter = _load_json_object(inter_path, "user ID -> list of item IDs")
    users, sequences = [], []
    for user, sequence in inter.items():
        if not isinstance(sequence, list) or not all(_is_id(i) for i in sequence):
            raise DataError(inter_path, f"expected a list of item IDs (integers or strings), found "
                                        f"{str(sequence)[:80]}", key=user)
        users.append(user)
        sequences.append([str(i) for i in sequence])
    if not any(sequences):
        raise DataError(inter_path, "no interactions: every user's item list is empty")
    if not all(sequences):
        log.warning("%s: %d users have an empty item list", name, sum(not s for s in sequences))
    records = _load_json_object(require_file(item_path), "item ID -> {title, description, ...}") if item_path else {}
    user_ids, = normalize_ids(users)
    item_ids, record_ids = normalize_ids(list(chain.from_iterable(sequences)), list(records))
    events = pd.DataFrame({
        USER: np.repeat(user_ids.to_numpy(), [len(s) for s in sequences]),
        ITEM: item_ids.to_numpy(),
    })
    items = None
    if item_path:
        rows = [_text_fields(item_path, key, record) for key, record in records.items()]
        items = pd.DataFrame(rows, index=pd.Index(record_ids, name=ITEM), columns=list(TEXT_FIELDS))
        items = add_missing_items(items, events[ITEM], _EMPTY_TEXT, name)
    return InteractionLog(name=name, events=events, items=items, source=str(inter_path))


def _is_id(value) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _load_json_object(path: Path, expected: str) -> dict:
    text = read_text(path)
    if not text.strip():
        raise DataError(path, f"the file is empty; expected one JSON object {expected}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, f"malformed JSON ({e.msg}, column {e.colno}); expected one JSON object {expected}",
                        line=e.lineno) from None
    except RecursionError:
        raise DataError(path, f"JSON nested too deeply to read; expected one JSON object {expected}") from None
    if not isinstance(value, dict):
        raise DataError(path, f"expected one JSON object {expected}, found a {type(value).__name__}")
    return value


def _text_fields(path: str | Path, key: str, record) -> dict:
    if not isinstance(record, dict):
        raise DataError(path, f"expected an object with title, description, ..., found {str(record)[:80]}",
                        key=key)
    return {field: _join(record.get(field), "," if field == "categories" else " ") for field in TEXT_FIELDS}


def _join(value, separator: str) -> str:
    """A text field as one string: ``None`` -> ``""``, a list (of lists) -> its unique strings joined."""
    if value is None:
        return ""
    if isinstance(value, list):
        flat = chain.from_iterable(v if isinstance(v, list) else [v] for v in value)
        return separator.join(dict.fromkeys(str(v).strip() for v in flat if str(v).strip()))
    return str(value).strip()


def read_amazon_reviews(reviews_path: str, meta_path: str | None = None, name: str = "amazon") -> InteractionLog:
    """Read a raw McAuley review dump and optionally its metadata (2014 or 2018 style, gzipped or not).

    Events: ``user`` (reviewerID) and ``item`` (asin) as str, ``timestamp`` (unixReviewTime, int64 seconds) and
    ``rating`` (overall, float32), in file order. Items: ``title, brand, categories, description``;
    ``categories`` joins the 2014 ``categories`` (list of lists) or 2018 ``category`` (list) with ``,``;
    ``description`` joins a list with spaces. A repeated asin in the metadata keeps its first record (logged).

    Example review line: ``{"reviewerID": "A1YJEY40YUW4SE", "asin": "7806397051", "overall": 1.0,
    "unixReviewTime": 1391040000}``; 2014 meta line: ``{'asin': '7806397051', 'title': 'Eyeshadow Palette',
    'categories': [['Beauty', 'Makeup']]}``.
    """
    reviews_path = require_file(reviews_path)
    users, items, times, ratings = [], [], [], []
    for number, record in _records(reviews_path):
        users.append(_field(reviews_path, number, record, "reviewerID", str))
        items.append(_field(reviews_path, number, record, "asin", str))
        times.append(_seconds(reviews_path, number, record, "unixReviewTime"))
        ratings.append(_rating(reviews_path, number, record, "overall"))
    if not users:
        raise DataError(reviews_path, "the file is empty; expected one review record per line")
    events = pd.DataFrame({
        USER: pd.Series(users, dtype=str),
        ITEM: pd.Series(items, dtype=str),
        TIMESTAMP: np.asarray(times, dtype=np.int64),
        RATING: np.asarray(ratings, dtype=np.float32),
    })
    meta = _read_meta(require_file(meta_path), name) if meta_path else None
    if meta is not None:
        meta = add_missing_items(meta, events[ITEM], _EMPTY_TEXT, name)
    return InteractionLog(name=name, events=events, items=meta, source=str(reviews_path))


def _read_meta(path: Path, name: str) -> pd.DataFrame:
    rows, duplicates = {}, 0
    for number, record in _records(path):
        asin = _field(path, number, record, "asin", str)
        if asin in rows:
            duplicates += 1
            continue
        categories = record.get("categories", record.get("category"))
        rows[asin] = {
            "title": _join(record.get("title"), " "),
            "brand": _join(record.get("brand"), " "),
            "categories": _join(categories, ","),
            "description": _join(record.get("description"), " "),
        }
    if not rows:
        raise DataError(path, "the file is empty; expected one product record per line")
    if duplicates:
        log.warning("%s: %s repeats %d asins; kept the first record of each", name, path, duplicates)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(ITEM)


def _records(path: Path):
    """``(line_number, dict)`` per non-blank line: JSON, else a Python literal (``ast.literal_eval``)."""
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            try:
                record = ast.literal_eval(line)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                raise DataError(path, f"malformed record: expected one JSON object or Python dict literal per "
                                      f"line, found {line[:80]!r}", line=number) from None
        if not isinstance(record, dict):
            raise DataError(path, f"expected one object per line, found a {type(record).__name__}", line=number)
        yield number, record


def _seconds(path: Path, number: int, record: dict, key: str) -> int:
    """``record[key]`` as int64 unix seconds from 1970 on."""
    value = _field(path, number, record, key, int)
    if value > INT64_MAX:
        raise DataError(path, not_int64(key, value), line=number, key=key)
    if value < 0:
        raise DataError(path, negative_seconds(key, value), line=number, key=key)
    return value


def _rating(path: Path, number: int, record: dict, key: str) -> float:
    """``record[key]`` as a finite number that fits float32 (JSON's ``NaN``, ``Infinity`` and ``1e400`` do not)."""
    value = _field(path, number, record, key, (int, float))
    problem = not_float32(key, value)
    if problem:
        raise DataError(path, problem, line=number, key=key)
    return value


def _field(path: Path, number: int, record: dict, key: str, kind):
    if key not in record:
        raise DataError(path, f"record lacks {key!r}; has {sorted(record)}", line=number, key=key)
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        raise DataError(path, f"expected {' or '.join(k.__name__ for k in kinds)} for {key!r}, found {value!r}",
                        line=number, key=key)
    return value
