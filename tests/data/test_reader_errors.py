"""Bad input: every reader raises one DataError that names the file, the line (or key) and what was expected."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from genrec.data.amazon import read_amazon_lcrec, read_amazon_reviews, read_amazon_sequences
from genrec.errors import DataError
from genrec.data.generic import read_events
from genrec.data.movielens import read_movielens
from tests.cli_runner import run_entry


def write(path: Path, content: str | bytes, gz: bool = False) -> Path:
    data = content.encode() if isinstance(content, str) else content
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def raises_at(call, path: Path, line: int | None, *fragments: str) -> DataError:
    """``call()`` raises DataError whose message starts with ``path[:line]`` and contains ``fragments``."""
    with pytest.raises(DataError) as info:
        call()
    message = str(info.value)
    where = f"{path}:{line}" if line is not None else str(path)
    assert message.startswith(where), message
    if line is not None:
        assert info.value.line == line
    for fragment in fragments:
        assert fragment in message, message
    return info.value


# --- MovieLens -----------------------------------------------------------------------------------------------------

def test_movielens_folder_problems(tmp_path):
    raises_at(lambda: read_movielens(str(tmp_path / "absent")), tmp_path / "absent", None, "does not exist")
    write(tmp_path / "README", "hello")
    raises_at(lambda: read_movielens(str(tmp_path)), tmp_path, None, "u.data", "ratings.csv", "['README']")
    write(tmp_path / "movies.dat", "1::Toy Story (1995)::Comedy\n")
    raises_at(lambda: read_movielens(str(tmp_path)), tmp_path / "ratings.dat", None, "missing",
              "https://grouplens.org/datasets/movielens/1m/")


def test_movielens_100k_comma_separated(tmp_path):
    data = write(tmp_path / "u.data", "1\t2\t3\t4\n5\t6\t7\t8\n9,10,1,12\n")
    raises_at(lambda: read_movielens(str(tmp_path)), data, 3, "expected 4 fields separated by '\\t'",
              "found 1", "comma-separated")


@pytest.mark.parametrize("line, fragment", [
    ("1\tx7\t3\t4", "expected an integer for 'item', found 'x7'"),
    ("1\t2\tnan\t4", "expected a number for 'rating', found 'nan'"),
    ("1\t2\tinf\t4", "expected a number for 'rating', found 'inf'"),
    ("1\t2\t3\t4\t5", "expected 4 fields"),
    ("1\t2\t3", "expected 4 fields"),
    ("1\t2\t3\t4.5", "expected an integer for 'timestamp'"),
    ("99999999999999999999999\t2\t3\t4", "user 99999999999999999999999 does not fit in a 64-bit integer"),
    ("1\t9223372036854775808\t3\t4", "item 9223372036854775808 does not fit in a 64-bit integer"),
    ("1\t2\t3\t99999999999999999999", "timestamp 99999999999999999999 does not fit in a 64-bit integer"),
    ("1\t2\t3\t-5", "timestamp -5 is negative: expected seconds since 1970"),
    ("1\t2\t1e50\t4", "rating 1e50 is not a finite number that fits in a 32-bit float"),
])
def test_movielens_100k_bad_values(tmp_path, line, fragment):
    data = write(tmp_path / "u.data", f"1\t2\t3\t4\n\n{line}\n5\t6\t7\t8\n")
    raises_at(lambda: read_movielens(str(tmp_path)), data, 3, fragment)


def test_movielens_bad_line_in_the_middle_of_a_big_file(tmp_path):
    """The vectorised read finds that something is wrong; the error still names the one bad line."""
    good = "".join(f"{i % 900 + 1}\t{i % 1600 + 1}\t3\t{880000000 + i}\n" for i in range(100_000))
    data = write(tmp_path / "u.data", good + "7\t8\t3\t-1\n" + good)
    raises_at(lambda: read_movielens(str(tmp_path)), data, 100_001, "timestamp -1 is negative")


def test_movielens_whole_floats_read_as_integers(tmp_path):
    """pandas reads ``7.0`` into an int64 column as 7; the reader documents and keeps that (nothing is lost)."""
    write(tmp_path / "u.data", "1.0\t2\t3\t4\n1\t3\t3\t5e0\n")
    events = read_movielens(str(tmp_path)).events
    assert events["user"].tolist() == [1, 1] and events["timestamp"].tolist() == [4, 5]
    assert events["user"].dtype == np.int64


def test_movielens_100k_empty_and_bad_items(tmp_path):
    data = write(tmp_path / "u.data", "")
    raises_at(lambda: read_movielens(str(tmp_path)), data, None, "no data lines (empty)")
    write(data, "\n\n")
    raises_at(lambda: read_movielens(str(tmp_path)), data, None, "no data lines (empty)")
    write(data, "1\t2\t3\t4\n")
    item = write(tmp_path / "u.item", "2|Heat (1995)|||" + "|0" * 19 + "\n3|Short|x\n")
    raises_at(lambda: read_movielens(str(tmp_path)), item, 2, "expected 24 fields separated by '|'", "found 3")
    write(item, "2|Heat (1995)|||" + "|0" * 19 + "\n2|Heat again|||" + "|0" * 19 + "\n")
    raises_at(lambda: read_movielens(str(tmp_path)), item, 2, "movie ID 2 repeats the one on line 1")
    write(item, "2|Heat (1995)|||" + "|0" * 18 + "|yes\n")
    raises_at(lambda: read_movielens(str(tmp_path)), item, 1, "genre flags of 0 or 1")
    write(item, "2|Heat (1995)|||" + "|0" * 19 + "\n99999999999999999999|Big|||" + "|0" * 19 + "\n")
    raises_at(lambda: read_movielens(str(tmp_path)), item, 2, "movie ID 99999999999999999999 does not fit")
    genre = write(tmp_path / "u.genre", "unknown|0\nAction|2\n")
    raises_at(lambda: read_movielens(str(tmp_path)), genre, 2, "expected genre index 1")


def test_movielens_1m_bad_lines(tmp_path):
    ratings = write(tmp_path / "ratings.dat", "1::1193::5::978300760\n1\t661\t3\t978302109\n")
    raises_at(lambda: read_movielens(str(tmp_path)), ratings, 2, "separated by '::'", "tab-separated")
    write(ratings, "1::1193::5::978300760\nA::661::3::978302109\n")
    raises_at(lambda: read_movielens(str(tmp_path)), ratings, 2, "expected an integer for 'user', found 'A'")
    write(ratings, "1::1193::5::978300760\n1::661::3::-978302109\n")
    raises_at(lambda: read_movielens(str(tmp_path)), ratings, 2, "timestamp -978302109 is negative")
    write(ratings, "1::1193::5::978300760\n1::99999999999999999999::3::978302109\n")
    raises_at(lambda: read_movielens(str(tmp_path)), ratings, 2, "item 99999999999999999999 does not fit")
    write(ratings, "1::1193::5::978300760\n")
    movies = write(tmp_path / "movies.dat", "1193::Cuckoo::Drama\n99999999999999999999::Big::Drama\n")
    raises_at(lambda: read_movielens(str(tmp_path)), movies, 2, "movie ID 99999999999999999999 does not fit")
    write(movies, "1193::Cuckoo::Drama\nx::Title::Comedy\n")
    raises_at(lambda: read_movielens(str(tmp_path)), movies, 2, "expected an integer movie ID, found 'x'")
    write(movies, b"1193::Caf\xe9::Drama\n1194::No genres\n")  # latin-1 is accepted; the field count is not
    raises_at(lambda: read_movielens(str(tmp_path)), movies, 2, "expected 3 fields separated by '::'")


def test_movielens_csv_bad_lines(tmp_path):
    ratings = write(tmp_path / "ratings.csv", "user,movie,rating,timestamp\n1,2,3.5,4\n")
    raises_at(lambda: read_movielens(str(tmp_path)), ratings, 1,
              "expected the header 'userId,movieId,rating,timestamp'")
    write(ratings, "userId,movieId,rating,timestamp\n")
    raises_at(lambda: read_movielens(str(tmp_path)), ratings, None, "no data lines after its header")
    write(ratings, "userId,movieId,rating,timestamp\n1,2,3.5,4\n1,3,good,5\n")
    raises_at(lambda: read_movielens(str(tmp_path)), ratings, 3, "expected a number for 'rating', found 'good'")
    write(ratings, "userId,movieId,rating,timestamp\n1,2,3.5,4\n-1,3,4,-5\n")
    raises_at(lambda: read_movielens(str(tmp_path)), ratings, 3, "timestamp -5 is negative")
    write(ratings, "userId,movieId,rating,timestamp\n1,2,3.5,4\n")
    movies = write(tmp_path / "movies.csv", "movieId,title,genres\n2,Heat,Drama\n-99999999999999999999,Big,\n")
    raises_at(lambda: read_movielens(str(tmp_path)), movies, 3, "movieId -99999999999999999999 does not fit")
    write(movies, "movieId,title,genres\n2,City of Lost Children, The (1995),Drama\n")
    raises_at(lambda: read_movielens(str(tmp_path)), movies, 2, "expected 3 comma-separated fields", "found 4")


# --- Amazon --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content, line, fragment", [
    ("A1 B1 B2\nA2,B1,B2\n", 2, "separated by spaces"),
    ("A1 B1 B2\nA2\n", 2, "at least one item ID"),
    ("A1 B1\nA2 B2\n\nA1 B3\n", 4, "user 'A1' already has a sequence on line 1"),
])
@pytest.mark.parametrize("gz", [False, True])
def test_amazon_sequences_bad_lines(tmp_path, content, line, fragment, gz):
    path = write(tmp_path / "user_sequence.txt", content, gz=gz)
    raises_at(lambda: read_amazon_sequences(str(path)), path, line, fragment)


def test_amazon_sequences_empty_undecodable_and_corrupt(tmp_path):
    path = write(tmp_path / "user_sequence.txt", "\n\n")
    raises_at(lambda: read_amazon_sequences(str(path)), path, None, "empty")
    write(path, b"A1 B1\nA2 B\xff\n")
    raises_at(lambda: read_amazon_sequences(str(path)), path, 2, "not valid utf-8")
    lines = "".join(f"A{i} B{i} C{i}\n" for i in range(5000)).encode()
    write(path, gzip.compress(lines)[:2000])
    raises_at(lambda: read_amazon_sequences(str(path)), path, None, "gzip")


def test_amazon_titles_bad_lines(tmp_path):
    path = write(tmp_path / "seq.txt", "A1 B1\n")
    titles = write(tmp_path / "titles.tsv", "asin\ttitle\nB1\tok\nB2,comma title\n")
    raises_at(lambda: read_amazon_sequences(str(path), str(titles)), titles, 3, "expected 2 tab-separated fields")
    write(titles, "asin\ttitle\nB1\tok\nB1\tagain\n")
    raises_at(lambda: read_amazon_sequences(str(path), str(titles)), titles, 3, "already has a title on line 2")
    write(titles, "asin\ttitle\n")
    raises_at(lambda: read_amazon_sequences(str(path), str(titles)), titles, None, "no title lines")
    raises_at(lambda: read_amazon_sequences(str(path), str(tmp_path / "none.tsv")), tmp_path / "none.tsv", None,
              "file not found")


def test_amazon_lcrec_bad_json(tmp_path):
    inter = write(tmp_path / "X.inter.json", '{"0": [0, 1],\n "1": [2 3]}')
    raises_at(lambda: read_amazon_lcrec(str(inter)), inter, 2, "malformed JSON", "user ID -> list of item IDs")
    write(inter, "[[0, 1]]")
    raises_at(lambda: read_amazon_lcrec(str(inter)), inter, None, "expected one JSON object", "found a list")
    write(inter, '{"0": [0, 1], "1": 5}')
    error = raises_at(lambda: read_amazon_lcrec(str(inter)), inter, None, "(key '1')", "expected a list of item IDs")
    assert error.key == "1"
    write(inter, '{"0": [0, true]}')
    raises_at(lambda: read_amazon_lcrec(str(inter)), inter, None, "(key '0')")
    write(inter, "  \n")
    raises_at(lambda: read_amazon_lcrec(str(inter)), inter, None, "empty")
    write(inter, '{"0": []}')
    raises_at(lambda: read_amazon_lcrec(str(inter)), inter, None, "no interactions")
    write(inter, '{"0": ' + "[" * 100_000 + "]" * 100_000 + "}")
    raises_at(lambda: read_amazon_lcrec(str(inter)), inter, None, "nested too deeply")


def test_amazon_lcrec_bad_item_file(tmp_path):
    inter = write(tmp_path / "X.inter.json", '{"0": [0, 1]}')
    item = write(tmp_path / "X.item.json", json.dumps({"0": {"title": "a"}, "1": {"title": "b"}}, indent=2)[:-3],
                 gz=True)
    raises_at(lambda: read_amazon_lcrec(str(inter), str(item)), item, 7, "malformed JSON")
    write(item, json.dumps({"0": {"title": "a"}, "1": "just a string"}))
    raises_at(lambda: read_amazon_lcrec(str(inter), str(item)), item, None, "(key '1')", "expected an object")


REVIEW = {"reviewerID": "A1", "asin": "B1", "overall": 5.0, "unixReviewTime": 1356998400}


@pytest.mark.parametrize("bad, fragment", [
    ("{'reviewerID': 'A2', 'asin': ", "malformed record: expected one JSON object or Python dict literal"),
    ("A2,B1,5.0,1356998400", "malformed record"),
    ("[1, 2]", "expected one object per line, found a list"),
    (json.dumps({k: v for k, v in REVIEW.items() if k != "asin"}), "record lacks 'asin'"),
    (json.dumps({**REVIEW, "unixReviewTime": "09 13, 2009"}), "expected int for 'unixReviewTime'"),
    (json.dumps({**REVIEW, "overall": None}), "expected int or float for 'overall'"),
    (json.dumps({**REVIEW, "reviewerID": 17}), "expected str for 'reviewerID'"),
    (json.dumps({**REVIEW, "unixReviewTime": 10 ** 20}), "unixReviewTime 100000000000000000000 does not fit in a 64"),
    (json.dumps({**REVIEW, "unixReviewTime": -5}), "unixReviewTime -5 is negative: expected seconds since 1970"),
    (json.dumps(REVIEW).replace("5.0", "NaN"), "overall nan is not a finite number"),
    (json.dumps(REVIEW).replace("5.0", "1e400"), "overall inf is not a finite number"),
    (json.dumps(REVIEW).replace("5.0", "1e50"), "overall 1e+50 is not a finite number that fits in a 32-bit float"),
    ("[" * 100_000 + "]" * 100_000, "malformed record"),
])
def test_amazon_reviews_bad_lines(tmp_path, bad, fragment):
    path = write(tmp_path / "reviews.json.gz", f"{json.dumps(REVIEW)}\n\n{bad}\n{json.dumps(REVIEW)}\n", gz=True)
    raises_at(lambda: read_amazon_reviews(str(path)), path, 3, fragment)


def test_amazon_reviews_no_eval_and_empty(tmp_path):
    path = write(tmp_path / "reviews.json", "__import__('os').getcwd()\n")
    raises_at(lambda: read_amazon_reviews(str(path)), path, 1, "malformed record")
    write(path, "")
    raises_at(lambda: read_amazon_reviews(str(path)), path, None, "empty")


def test_amazon_meta_bad_lines(tmp_path):
    reviews = write(tmp_path / "reviews.json", json.dumps(REVIEW) + "\n")
    meta = write(tmp_path / "meta.json", "{'asin': 'B1', 'title': 'ok'}\n{'title': 'no asin'}\n")
    raises_at(lambda: read_amazon_reviews(str(reviews), str(meta)), meta, 2, "record lacks 'asin'")
    write(meta, "{'asin': 'B1', 'title': 'ok'\n")
    raises_at(lambda: read_amazon_reviews(str(reviews), str(meta)), meta, 1, "malformed record")


# --- generic reader ------------------------------------------------------------------------------------------------

def test_generic_missing_column_lists_present_ones(tmp_path):
    path = write(tmp_path / "log.csv", "uid,item_id,ts\n1,2,3\n")
    error = raises_at(lambda: read_events(str(path), timestamp="time"), path, None,
                      "missing column(s) ['user_id', 'time']", "['uid', 'item_id', 'ts']")
    assert error.key == "user_id"


def test_generic_wrong_delimiter(tmp_path):
    path = write(tmp_path / "log.csv", "user_id;item_id\n1;2\n")
    raises_at(lambda: read_events(str(path)), path, None, "missing column(s)", "is the delimiter ',' right?")
    path = write(tmp_path / "log.tsv", "user_id,item_id\n1,2\n")
    raises_at(lambda: read_events(str(path)), path, None, "is the delimiter '\\t' right?")


@pytest.mark.parametrize("row, fragment", [
    ("u3,9,yesterday,4", "expected integer unix seconds or an ISO 8601 datetime in 'ts', found 'yesterday'"),
    ("u3,9,,4", "expected integer unix seconds or an ISO 8601 datetime in 'ts'"),
    ("u3,9,2023-13-45,4", "found '2023-13-45'"),
    (",9,100,4", "missing value in ID column 'user_id'"),
    ("u3,9,100,five", "expected a number in 'stars', found 'five'"),
    ("u3,9,100,4,extra", "expected 4 fields separated by ',' as in the header, found 5"),
    ("u3,9,-5,4", "timestamp -5 is negative: expected seconds since 1970 (column 'ts')"),
    ("u3,9,1969-12-31T23:59:59Z,4", "timestamp '1969-12-31T23:59:59Z' is before 1970"),
    ("u3,9,99999999999999999999,4", "timestamp 99999999999999999999 does not fit in a 64-bit integer"),
    ("u3,9,100,1e50", "rating 1e+50 is not a finite number that fits in a 32-bit float (at most 3.403e+38) (column "),
    ("u3,9,100", "expected 4 fields separated by ',' as in the header, found 3"),
])
@pytest.mark.parametrize("gz", [False, True])
def test_generic_bad_rows(tmp_path, row, fragment, gz):
    path = write(tmp_path / "log.csv.gz" if gz else tmp_path / "log.csv",
                 f"user_id,item_id,ts,stars\nu1,2,100,5\n\nu2,\"quoted,\nnewline\",2023-01-01,3\n{row}\nu4,1,1,1\n",
                 gz=gz)
    raises_at(lambda: read_events(str(path), timestamp="ts", rating="stars"), path, 6, fragment)


def test_generic_repeated_header_column(tmp_path):
    path = write(tmp_path / "log.csv", "user_id,item_id,user_id\n1,2,3\n")
    error = raises_at(lambda: read_events(str(path)), path, 1, "the header names column(s) ['user_id'] more than once")
    assert error.key == "user_id"


def test_generic_empty_and_unknown_files(tmp_path):
    path = write(tmp_path / "log.csv", "")
    raises_at(lambda: read_events(str(path)), path, 1, "empty")
    write(path, "user_id,item_id\n")
    raises_at(lambda: read_events(str(path)), path, None, "no data rows")
    other = write(tmp_path / "log.json", "{}")
    raises_at(lambda: read_events(str(other)), other, None, "cannot tell the format", ".parquet")
    raises_at(lambda: read_events(str(tmp_path / "none.parquet")), tmp_path / "none.parquet", None, "file not found")
    raises_at(lambda: read_events(str(tmp_path)), tmp_path, None, "expected a file")


def test_generic_parquet_problems(tmp_path):
    path = tmp_path / "log.parquet"
    pd.DataFrame({"user_id": [1, 2], "item": [3, 4]}).to_parquet(path)
    raises_at(lambda: read_events(str(path)), path, None, "missing column(s) ['item_id']", "['user_id', 'item']")
    pd.DataFrame({"user_id": [1, 2], "item_id": [3, 4], "t": ["2020-01-01", "never"]}).to_parquet(path)
    raises_at(lambda: read_events(str(path), timestamp="t"), path, None, "row 2: expected integer unix seconds")
    pd.DataFrame({"user_id": [1, None], "item_id": [3, 4]}).to_parquet(path)
    raises_at(lambda: read_events(str(path)), path, None, "row 2: missing value in ID column 'user_id'")
    pd.DataFrame({"user_id": [], "item_id": []}).to_parquet(path)
    raises_at(lambda: read_events(str(path)), path, None, "no rows")
    pd.DataFrame({"user_id": [1, 1], "item_id": [3, 4], "t": [5, -5]}).to_parquet(path)
    raises_at(lambda: read_events(str(path), timestamp="t"), path, None, "row 2: timestamp -5 is negative")
    pd.DataFrame({"user_id": [1, 1], "item_id": [3, 4], "t": np.array([5, 2 ** 63], np.uint64)}).to_parquet(path)
    raises_at(lambda: read_events(str(path), timestamp="t"), path, None,
              "row 2: timestamp 9223372036854775808 does not fit in a 64-bit integer")
    pd.DataFrame({"user_id": [1, 1], "item_id": [3, 4], "t": pd.to_datetime(["2020-01-01", "1960-01-01"])}
                 ).to_parquet(path)
    raises_at(lambda: read_events(str(path), timestamp="t"), path, None,
              "row 2: timestamp '1960-01-01 00:00:00' is before 1970")
    pd.DataFrame({"user_id": [1, 1, 1], "item_id": [3, 4, 5], "t": [5.0, 6.0, float("nan")]}).to_parquet(path)
    raises_at(lambda: read_events(str(path), timestamp="t"), path, None, "row 3: expected integer unix seconds in "
              "'t', found nan")
    pd.DataFrame({"user_id": [1, 1], "item_id": [3, 4], "r": [5.0, 1e50]}).to_parquet(path)
    raises_at(lambda: read_events(str(path), rating="r"), path, None, "row 2: rating 1e+50 is not a finite number")
    write(path, "user_id,item_id\n1,2\n")
    raises_at(lambda: read_events(str(path)), path, None, "not a readable Parquet file")


def test_generic_item_file_problems(tmp_path):
    path = write(tmp_path / "log.csv", "user_id,item_id\n1,2\n")
    items = write(tmp_path / "items.csv", "item_id,title\n2,a\n3,b\n2,c\n")
    raises_at(lambda: read_events(str(path), items_path=str(items)), items, 4, "item '2' appears twice in 'item_id'")
    write(items, "sku,title\n2,a\n")
    raises_at(lambda: read_events(str(path), items_path=str(items)), items, None, "missing column(s) ['item_id']",
              "['sku', 'title']")


def test_generic_parquet_ids_beyond_int64_stay_distinct(tmp_path):
    """A uint64 or float ID column beyond int64 becomes strings instead of wrapping around (and colliding)."""
    path = tmp_path / "log.parquet"
    users = np.array([2 ** 63 + 5, 2 ** 64 - 1], np.uint64)
    pd.DataFrame({"user_id": users, "item_id": [1e20, 3.0], "t": [5.0, 6.0]}).to_parquet(path)
    events = read_events(str(path), timestamp="t").events
    assert events["user"].tolist() == [str(u) for u in users]
    assert events["item"].tolist() == ["1e+20", "3.0"]
    assert events["timestamp"].tolist() == [5, 6]


# --- through the CLI -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset, name, content, line, fragment", [
    ("ml100k", "u.data", "1\t2\t3\t4\n1\t3\t3\t5\n99999999999999999999999\t2\t3\t6\n", 3,
     "user 99999999999999999999999 does not fit in a 64-bit integer"),
    ("ml100k", "u.data", "1\t2\t3\t4\n1\t3\t3\t-5\n", 2, "timestamp -5 is negative: expected seconds since 1970"),
    ("events", "events.csv", "user_id,item_id,ts\n1,2,3\n1,3,-5\n", 3, "timestamp -5 is negative"),
])
def test_cli_reports_reader_holes_in_one_line(tmp_path, preset, name, content, line, fragment):
    """genrec-train exits 2 with one error line naming file:line and what was expected, and no traceback."""
    folder = tmp_path / "data"
    folder.mkdir()
    bad = write(folder / name, content)
    extra = ["data.reader.timestamp=ts"] if preset == "events" else []
    proc = run_entry("genrec.train", f"data={preset}", f"data.reader.path={folder if preset == 'ml100k' else bad}",
                     *extra, f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [row for row in proc.stderr.splitlines() if row.strip() and not row.startswith("Seed set to")]
    assert len(lines) == 1 and lines[0].startswith(f"genrec-train: error: {bad}:{line}: "), proc.stderr[-2000:]
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr
