"""Reader for the GroupLens MovieLens releases, in their original formats.

The format is detected from the files in the folder:

* **100K** — ``u.data``: ``user<TAB>item<TAB>rating<TAB>timestamp`` (``196	242	3	881250949``);
  ``u.item`` (latin-1): ``id|title|release date|video release date|URL|`` + one 0/1 flag per genre
  (``1|Toy Story (1995)|01-Jan-1995||http://us.imdb.com/...|0|0|0|1|1|1|0|...``); genre names from ``u.genre``
  (``Action|1``) when present, else the standard 19; ``u.user``: ``id|age|gender|occupation|zip code``
  (``1|24|M|technician|85711``).
* **1M / 10M** — ``ratings.dat``: ``user::item::rating::timestamp`` (``1::1193::5::978300760``);
  ``movies.dat`` (latin-1): ``id::title::Genre|Genre`` (``1::Toy Story (1995)::Animation|Children's|Comedy``).
* **20M / 25M / latest** — ``ratings.csv`` with header ``userId,movieId,rating,timestamp`` (``1,296,5.0,1147880044``);
  ``movies.csv`` with header ``movieId,title,genres`` (``1,Toy Story (1995),Adventure|Animation|...``).

Example::

    log = read_movielens("../shared/data/ml-100k")   # 100,000 events, items with title/genres/release_date
"""
from __future__ import annotations

import csv
import io
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from genrec.errors import DataError
from genrec.data.io import (first_line, iter_lines, parse_int, read_numeric_table, read_text, require_file,
                             split_fields)
from genrec.data.schema import ITEM, RATING, TIMESTAMP, USER, InteractionLog

log = logging.getLogger(__name__)

#: ``u.genre`` of MovieLens 100K, used when the file is absent.
GENRES_100K = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
               "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
               "War", "Western")
NO_GENRES = "(no genres listed)"
URL_1M = "https://grouplens.org/datasets/movielens/1m/"
_RATING_COLUMNS = {USER: "int", ITEM: "int", RATING: "float", TIMESTAMP: "seconds"}
_CSV_RATINGS_HEADER = ["userId", "movieId", "rating", "timestamp"]
_CSV_MOVIES_HEADER = ["movieId", "title", "genres"]


def read_movielens(path: str, name: str | None = None) -> InteractionLog:
    """Read a MovieLens folder (100K, 1M/10M or 20M/25M format, detected from its files; see the module doc).

    Returns events ``user, item, timestamp`` (int64) and ``rating`` (float32) in file order, and items indexed by
    movie ID with ``title``, ``genres`` (list of str) and, for 100K, ``release_date`` (str as in the file,
    ``""`` when unknown); for 100K also users indexed by user ID with ``age`` (int64), ``gender``, ``occupation``
    and ``zip_code`` (str), when ``u.user`` is present. ``name`` defaults to the folder name.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise DataError(folder, "expected a MovieLens folder (with u.data, ratings.dat or ratings.csv), "
                                + ("found a file" if folder.exists() else "it does not exist"))
    users = None
    if (folder / "u.data").exists():
        events, items = _ratings(folder / "u.data", "\t"), _optional(folder / "u.item", _movies_100k)
        users = _users_100k(folder / "u.user") if (folder / "u.user").exists() else None
    elif (folder / "ratings.dat").exists():
        events, items = _ratings(folder / "ratings.dat", "::"), _optional(folder / "movies.dat", _movies_dat)
    elif (folder / "ratings.csv").exists():
        events, items = _ratings_csv(folder / "ratings.csv"), _optional(folder / "movies.csv", _movies_csv)
    elif (folder / "movies.dat").exists():
        raise DataError(folder / "ratings.dat", "missing: the folder has movies.dat but no ratings.dat, so it "
                                                f"holds no interactions; download ml-1m.zip from {URL_1M} and "
                                                f"put its ratings.dat into {folder}")
    else:
        present = sorted(p.name for p in folder.iterdir())
        raise DataError(folder, "no MovieLens ratings file: expected u.data (100K), ratings.dat (1M/10M) or "
                                f"ratings.csv (20M/25M); files present: {present}")
    return InteractionLog(name=name or folder.name, events=events, items=items, source=str(folder), users=users)


def _ratings(path: Path, delimiter: str) -> pd.DataFrame:
    frame = read_numeric_table(path, delimiter, _RATING_COLUMNS)
    return frame[[USER, ITEM, TIMESTAMP, RATING]]


def _ratings_csv(path: Path) -> pd.DataFrame:
    _check_header(path, _CSV_RATINGS_HEADER)
    frame = read_numeric_table(path, ",", _RATING_COLUMNS, skip_header=True)
    return frame[[USER, ITEM, TIMESTAMP, RATING]]


def _check_header(path: Path, expected: list[str]) -> None:
    first = first_line(path)
    if not first:
        raise DataError(path, f"the file is empty; expected the header {','.join(expected)!r}", line=1)
    if first.split(",") != expected:
        raise DataError(path, f"expected the header {','.join(expected)!r}, found {first!r}", line=1)


def _optional(path: Path, reader) -> pd.DataFrame | None:
    if not path.exists():
        log.warning("%s not found: the MovieLens items have no titles or genres", path)
        return None
    return reader(path)


def _add_movie(path: Path, rows: dict[int, dict], lines: dict[int, int], number: int, movie_id: int,
               row: dict) -> None:
    """Add ``row`` for ``movie_id`` to ``rows``, rejecting a repeated ID."""
    if movie_id in rows:
        raise DataError(path, f"movie ID {movie_id} repeats the one on line {lines[movie_id]}", line=number)
    rows[movie_id] = row
    lines[movie_id] = number


def _to_frame(path: Path, rows: dict[int, dict]) -> pd.DataFrame:
    if not rows:
        raise DataError(path, "the file has no movies")
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index = frame.index.astype(np.int64).rename(ITEM)
    return frame


def _genres_100k(folder: Path) -> list[str]:
    path = folder / "u.genre"
    if not path.exists():
        return list(GENRES_100K)
    genres = []
    for number, line in iter_lines(path, "latin-1"):
        if not line.strip():
            continue
        genre, index = split_fields(path, number, line, "|", ["genre", "index"])
        if parse_int(path, number, index, "genre index") != len(genres):
            raise DataError(path, f"expected genre index {len(genres)}, found {index!r}", line=number)
        genres.append(genre)
    return genres


def _movies_100k(path: Path) -> pd.DataFrame:
    genres = _genres_100k(path.parent)
    names = ["movie id", "title", "release date", "video release date", "URL"] + genres
    rows, lines = {}, {}
    for number, line in iter_lines(path, "latin-1"):
        if not line.strip():
            continue
        fields = split_fields(path, number, line, "|", names)
        flags = fields[5:]
        if any(flag not in ("0", "1") for flag in flags):
            raise DataError(path, f"expected {len(genres)} genre flags of 0 or 1, found {flags}", line=number)
        movie_id = parse_int(path, number, fields[0], "movie ID")
        _add_movie(path, rows, lines, number, movie_id, {
            "title": fields[1],
            "genres": [g for g, flag in zip(genres, flags) if flag == "1"],
            "release_date": fields[2],
        })
    return _to_frame(path, rows)


def _users_100k(path: Path) -> pd.DataFrame:
    rows, lines = {}, {}
    for number, line in iter_lines(path, "latin-1"):
        if not line.strip():
            continue
        user, age, gender, occupation, zip_code = split_fields(path, number, line, "|",
                                                               ["user id", "age", "gender", "occupation", "zip code"])
        user_id = parse_int(path, number, user, "user ID")
        if user_id in rows:
            raise DataError(path, f"user ID {user_id} repeats the one on line {lines[user_id]}", line=number)
        rows[user_id], lines[user_id] = {"age": parse_int(path, number, age, "age"), "gender": gender,
                                         "occupation": occupation, "zip_code": zip_code}, number
    if not rows:
        raise DataError(path, "the file has no users")
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index = frame.index.astype(np.int64).rename(USER)
    return frame


def _split_genres(value: str) -> list[str]:
    return [] if value in ("", NO_GENRES) else value.split("|")


def _movies_dat(path: Path) -> pd.DataFrame:
    rows, lines = {}, {}
    for number, line in iter_lines(path, "latin-1"):
        if not line.strip():
            continue
        movie_id, title, genres = split_fields(path, number, line, "::", _CSV_MOVIES_HEADER)
        _add_movie(path, rows, lines, number, parse_int(path, number, movie_id, "movie ID"),
                     {"title": title, "genres": _split_genres(genres)})
    return _to_frame(path, rows)


def _movies_csv(path: Path) -> pd.DataFrame:
    _check_header(path, _CSV_MOVIES_HEADER)
    reader = csv.reader(io.StringIO(read_text(require_file(path)), newline=""))
    next(reader)
    rows, lines = {}, {}
    for fields in reader:
        number = reader.line_num
        if not fields:
            continue
        if len(fields) != len(_CSV_MOVIES_HEADER):
            raise DataError(path, f"expected 3 comma-separated fields (movieId,title,genres; quote titles "
                                  f"with commas), found {len(fields)}", line=number)
        movie_id, title, genres = fields
        _add_movie(path, rows, lines, number, parse_int(path, number, movie_id, "movieId"),
                     {"title": title, "genres": _split_genres(genres)})
    return _to_frame(path, rows)
