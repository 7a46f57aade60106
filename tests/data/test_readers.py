"""The readers on the real shared datasets (skipped without them) and on small hand-written files of every format."""
from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from genrec.data.amazon import read_amazon_lcrec, read_amazon_reviews, read_amazon_sequences
from genrec.errors import DataError
from genrec.data.generic import read_events
from genrec.data.movielens import GENRES_100K, read_movielens
from genrec.data.schema import ITEM, RATING, TIMESTAMP, USER

from tests.shared import SHARED, skip_without_shared


def write(path: Path, text: str, encoding: str = "utf-8", gz: bool = False) -> Path:
    data = text.encode(encoding)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def per_user(events: pd.DataFrame) -> dict:
    return {user: list(group[ITEM]) for user, group in events.groupby(USER, sort=False)}


# --- real data -----------------------------------------------------------------------------------------------------

@pytest.mark.shared_data
@skip_without_shared
def test_ml100k_real():
    log = read_movielens(str(SHARED / "ml-100k"))
    events, items = log.events, log.items
    assert log.name == "ml-100k"
    assert len(events) == 100_000 and events[USER].nunique() == 943 and events[ITEM].nunique() == 1682
    assert list(events.columns) == [USER, ITEM, TIMESTAMP, RATING]
    assert [str(t) for t in events.dtypes] == ["int64", "int64", "int64", "float32"]
    assert set(events[RATING].unique()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert events[TIMESTAMP].min() == 874724710 and events[TIMESTAMP].max() == 893286638
    assert events.iloc[0].tolist() == [196, 242, 881250949, 3.0]
    assert len(items) == 1682 and items.index.dtype == np.int64 and items.index.name == ITEM
    assert items.loc[1, "title"] == "Toy Story (1995)"
    assert items.loc[1, "genres"] == ["Animation", "Children's", "Comedy"]
    assert items.loc[1, "release_date"] == "01-Jan-1995"
    assert items.loc[267, "release_date"] == ""  # the one 'unknown' movie has no date


@pytest.mark.shared_data
@skip_without_shared
def test_ml1m_real_has_no_ratings():
    with pytest.raises(DataError, match="ratings.dat") as info:
        read_movielens(str(SHARED / "ml-1m"))
    assert "https://grouplens.org/datasets/movielens/1m/" in str(info.value)


@pytest.mark.shared_data
@skip_without_shared
def test_beauty_real(caplog):
    folder = SHARED / "amazon-beauty-2014"
    with caplog.at_level(logging.WARNING):
        log = read_amazon_sequences(str(folder / "user_sequence.txt.gz"), str(folder / "item_titles.tsv"), "beauty")
    assert not caplog.records  # titles cover every item
    events, items = log.events, log.items
    assert list(events.columns) == [USER, ITEM] and not log.has_timestamps
    assert len(events) == 198_502 and events[USER].nunique() == 22_363 and events[ITEM].nunique() == 12_101
    first = events[events[USER] == "A1YJEY40YUW4SE"][ITEM].tolist()
    assert first == ["B004756YJA", "B004ZT0SSG", "B0020YLEYK", "7806397051", "B002WLWX82"]
    assert events.iloc[0][USER] == "A1YJEY40YUW4SE"
    assert len(items) == 12_101 and set(events[ITEM]) == set(items.index)
    assert (items["title"] == "").sum() == 7
    assert items.loc["B00DJQQEGQ", "title"].startswith("Shea Butter - 100% Natural African")
    assert items.loc["7806397051", "title"].startswith("WAWO 15 Color")
    assert events.groupby(USER).size().min() == 5


@pytest.mark.shared_data
@skip_without_shared
def test_scientific_real():
    folder = SHARED / "amazon-scientific-2018"
    log = read_amazon_lcrec(str(folder / "Scientific.inter.json.gz"), str(folder / "Scientific.item.json.gz"),
                            "scientific")
    events, items = log.events, log.items
    assert len(events) == 58_492 and events[USER].nunique() == 8_317 and events[ITEM].nunique() == 4_344
    assert events[USER].dtype == np.int64 and events[ITEM].dtype == np.int64 and items.index.dtype == np.int64
    assert events[events[USER] == 0][ITEM].tolist() == list(range(9))
    assert events[events[USER] == 1][ITEM].tolist() == [9, 10, 11, 12, 6]
    assert len(items) == 4_344 and set(items.index) == set(events[ITEM])
    assert (items["title"] != "").all()
    assert (items["brand"] == "").sum() == 12
    assert items.loc[0, "title"].startswith("SUPCO SPP6 Relay/Capacitor Hard Start Kit")
    assert items.loc[0, "categories"].startswith("Industrial & Scientific,Industrial Electrical")


# --- MovieLens formats ---------------------------------------------------------------------------------------------

def test_movielens_100k(tmp_path):
    write(tmp_path / "u.data", "196\t242\t3\t881250949\n186\t302\t3\t891717742\n196\t1\t5\t881250950\n")
    write(tmp_path / "u.genre", "unknown|0\nAction|1\nComédie|2\n\n", "latin-1")
    write(tmp_path / "u.item", "1|Toy Story (1995)|01-Jan-1995||http://x|0|0|1\n"
                               "242|Kolya (1996)|24-Jan-1997||http://y|0|1|1\n"
                               "302|Café (1997)|||http://z|1|0|0\n", "latin-1")
    log = read_movielens(str(tmp_path), name="tiny")
    assert log.name == "tiny" and log.source == str(tmp_path)
    assert log.events.to_dict("list") == {USER: [196, 186, 196], ITEM: [242, 302, 1],
                                          TIMESTAMP: [881250949, 891717742, 881250950], RATING: [3.0, 3.0, 5.0]}
    assert log.events[RATING].dtype == np.float32
    items = log.items
    assert items.index.tolist() == [1, 242, 302]
    assert items["title"].tolist() == ["Toy Story (1995)", "Kolya (1996)", "Café (1997)"]
    assert items["genres"].tolist() == [["Comédie"], ["Action", "Comédie"], ["unknown"]]
    assert items["release_date"].tolist() == ["01-Jan-1995", "24-Jan-1997", ""]


def test_movielens_100k_standard_genres_and_no_items(tmp_path):
    write(tmp_path / "u.data", "1\t2\t4\t100\n")
    assert read_movielens(str(tmp_path)).items is None
    flags = ["0"] * 19
    flags[3] = flags[18] = "1"
    write(tmp_path / "u.item", "|".join(["2", "Heat (1995)", "", "", ""] + flags) + "\n")
    assert read_movielens(str(tmp_path)).items.loc[2, "genres"] == [GENRES_100K[3], "Western"]


def test_movielens_1m(tmp_path):
    write(tmp_path / "ratings.dat", "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n")
    write(tmp_path / "movies.dat", "1193::One Flew Over the Cuckoo's Nest (1975)::Drama\n"
                                   "661::James and the Giant Peach (1996)::Animation|Children's|Musical\n"
                                   "7::Sabrina: Déjà vu (1995)::Comedy|Romance\n", "latin-1")
    log = read_movielens(str(tmp_path))
    assert log.events.to_dict("list") == {USER: [1, 1, 2], ITEM: [1193, 661, 1193],
                                          TIMESTAMP: [978300760, 978302109, 978298413], RATING: [5.0, 3.0, 4.0]}
    assert log.items.loc[661, "genres"] == ["Animation", "Children's", "Musical"]
    assert log.items.loc[7, "title"] == "Sabrina: Déjà vu (1995)"
    assert "release_date" not in log.items.columns


def test_movielens_20m(tmp_path):
    write(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n1,29,0.5,1112484676\n")
    write(tmp_path / "movies.csv", 'movieId,title,genres\n2,Jumanji (1995),Adventure|Children|Fantasy\n'
                                   '29,"City of Lost Children, The (1995)",(no genres listed)\n')
    log = read_movielens(str(tmp_path))
    assert log.events.to_dict("list") == {USER: [1, 1], ITEM: [2, 29], TIMESTAMP: [1112486027, 1112484676],
                                          RATING: [3.5, 0.5]}
    assert log.items.loc[29, "title"] == "City of Lost Children, The (1995)"
    assert log.items["genres"].tolist() == [["Adventure", "Children", "Fantasy"], []]


# --- Amazon formats ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("gz", [False, True])
def test_amazon_sequences(tmp_path, gz, caplog):
    sequences = write(tmp_path / "user_sequence.txt", "A1 B2 7806397051 B3\nA2 B3 B2\n\n", gz=gz)
    titles = write(tmp_path / "titles.tsv", "asin\ttitle\nB2\tShea Butter\n7806397051\tWAWO \"15\" Color\n"
                                            "B9\tNever bought\n")
    with caplog.at_level(logging.WARNING):
        log = read_amazon_sequences(str(sequences), str(titles), name="beauty")
    assert log.events.to_dict("list") == {USER: ["A1", "A1", "A1", "A2", "A2"],
                                          ITEM: ["B2", "7806397051", "B3", "B3", "B2"]}
    assert log.items["title"].to_dict() == {"B2": "Shea Butter", "7806397051": 'WAWO "15" Color',
                                            "B9": "Never bought", "B3": ""}
    assert "1 of 3 interacted items have no content row" in caplog.text
    assert read_amazon_sequences(str(sequences)).items is None


def test_amazon_sequences_integer_ids(tmp_path):
    log = read_amazon_sequences(str(write(tmp_path / "seq.txt", "1 10 20\n2 20 30 10\n")))
    assert log.events[USER].dtype == np.int64 and log.events[ITEM].dtype == np.int64
    assert per_user(log.events) == {1: [10, 20], 2: [20, 30, 10]}


@pytest.mark.parametrize("gz", [False, True])
def test_amazon_lcrec(tmp_path, gz, caplog):
    inter = write(tmp_path / "X.inter.json", json.dumps({"0": [0, 1, 2], "1": [2, 0], "2": [3]}), gz=gz)
    item = write(tmp_path / "X.item.json", json.dumps({
        "0": {"title": "Relay", "description": "Hard start kit.", "brand": "Supco", "categories": "A,B"},
        "1": {"title": "Staples", "categories": ["Fasteners", "Staples"], "price": 3},
        "2": {"title": "Gloves", "brand": None, "description": ["Nitrile.", "Blue."]},
    }, indent=2), gz=gz)
    with caplog.at_level(logging.WARNING):
        log = read_amazon_lcrec(str(inter), str(item), "sci")
    assert log.events.to_dict("list") == {USER: [0, 0, 0, 1, 1, 2], ITEM: [0, 1, 2, 2, 0, 3]}
    assert log.events[ITEM].dtype == np.int64 and log.items.index.dtype == np.int64
    assert log.items.to_dict("index") == {
        0: {"title": "Relay", "brand": "Supco", "categories": "A,B", "description": "Hard start kit."},
        1: {"title": "Staples", "brand": "", "categories": "Fasteners,Staples", "description": ""},
        2: {"title": "Gloves", "brand": "", "categories": "", "description": "Nitrile. Blue."},
        3: {"title": "", "brand": "", "categories": "", "description": ""},
    }
    assert "1 of 4 interacted items have no content row" in caplog.text


def test_amazon_lcrec_string_ids(tmp_path):
    inter = write(tmp_path / "a.inter.json", json.dumps({"u1": ["B01", "7"], "u2": ["7"]}))
    item = write(tmp_path / "a.item.json", json.dumps({"B01": {"title": "x"}, "7": {"title": "y"}}))
    log = read_amazon_lcrec(str(inter), str(item))
    assert log.events[ITEM].tolist() == ["B01", "7", "7"]
    assert log.items.loc["7", "title"] == "y"  # both files switch to str together, so they still join


REVIEWS = [
    {"reviewerID": "A2SUAM1J3GNN3B", "asin": "0000013714", "reviewerName": "J. McDonald", "helpful": [2, 3],
     "reviewText": "I bought this.", "overall": 5.0, "summary": "Heavenly", "unixReviewTime": 1252800000,
     "reviewTime": "09 13, 2009"},
    {"reviewerID": "A1", "asin": "B0", "overall": 2, "unixReviewTime": 1356998400},
    {"reviewerID": "A2SUAM1J3GNN3B", "asin": "B0", "overall": 4.0, "unixReviewTime": 1356998401, "vote": "3",
     "verified": True, "style": {"Size:": " 1"}},
]


@pytest.mark.parametrize("gz", [False, True])
def test_amazon_reviews_2014(tmp_path, gz):
    reviews = write(tmp_path / "reviews_Beauty_5.json", "\n".join(json.dumps(r) for r in REVIEWS) + "\n", gz=gz)
    meta = write(tmp_path / "meta_Beauty.json", "\n".join([
        "{'asin': '0000013714', 'title': \"Nail 'Polish'\", 'price': 6.99, 'imUrl': 'http://x.jpg', "
        "'related': {'also_bought': ['B1']}, 'brand': 'OPI', "
        "'categories': [['Beauty', 'Makeup', 'Nails'], ['Beauty', 'Tools']], 'description': 'Red.'}",
        "{'asin': 'B0', 'categories': [['Beauty']]}",
    ]) + "\n", gz=gz)
    log = read_amazon_reviews(str(reviews), str(meta), "beauty")
    assert log.events.to_dict("list") == {
        USER: ["A2SUAM1J3GNN3B", "A1", "A2SUAM1J3GNN3B"], ITEM: ["0000013714", "B0", "B0"],
        TIMESTAMP: [1252800000, 1356998400, 1356998401], RATING: [5.0, 2.0, 4.0]}
    assert [str(t) for t in log.events.dtypes] == ["str", "str", "int64", "float32"]
    assert log.items.to_dict("index") == {
        "0000013714": {"title": "Nail 'Polish'", "brand": "OPI", "categories": "Beauty,Makeup,Nails,Tools",
                       "description": "Red."},
        "B0": {"title": "", "brand": "", "categories": "Beauty", "description": ""},
    }


def test_amazon_reviews_2018(tmp_path, caplog):
    reviews = write(tmp_path / "Industrial_and_Scientific_5.json",
                    "\n".join(json.dumps(r) for r in REVIEWS[1:]) + "\n")
    meta_lines = [
        {"asin": "B0", "title": "Gloves", "brand": "Ansell", "category": ["Industrial & Scientific", "Safety"],
         "description": ["Nitrile gloves.", "Box of 100."], "price": "$9.99", "also_buy": []},
        {"asin": "B0", "title": "Gloves (duplicate record)"},
        {"asin": "B7", "title": "Unreviewed", "category": []},
    ]
    meta = write(tmp_path / "meta_Industrial_and_Scientific.json.gz",
                 "\n".join(json.dumps(m) for m in meta_lines) + "\n", gz=True)
    with caplog.at_level(logging.WARNING):
        log = read_amazon_reviews(str(reviews), str(meta))
    assert log.events[ITEM].tolist() == ["B0", "B0"] and log.events[TIMESTAMP].tolist() == [1356998400, 1356998401]
    assert log.items.loc["B0"].to_dict() == {"title": "Gloves", "brand": "Ansell",
                                             "categories": "Industrial & Scientific,Safety",
                                             "description": "Nitrile gloves. Box of 100."}
    assert log.items.loc["B7", "title"] == "Unreviewed"
    assert "repeats 1 asins" in caplog.text


# --- generic reader ------------------------------------------------------------------------------------------------

def test_generic_csv_iso_and_integer_timestamps(tmp_path):
    path = write(tmp_path / "log.csv", "uid,sku,ts,stars,device\n"
                                       "u1,42,2023-05-01T12:00:00Z,4.5,phone\n"
                                       "u1,17,1682946000,3,web\n"
                                       "u2,42,2023-05-01 14:00:00+02:00,1,phone\n")
    log = read_events(str(path), user="uid", item="sku", timestamp="ts", rating="stars", features=["device"],
                      name="shop")
    assert log.events.to_dict("list") == {USER: ["u1", "u1", "u2"], ITEM: [42, 17, 42],
                                          TIMESTAMP: [1682942400, 1682946000, 1682942400],
                                          RATING: [4.5, 3.0, 1.0], "device": ["phone", "web", "phone"]}
    assert log.events[ITEM].dtype == np.int64 and log.events[RATING].dtype == np.float32
    assert log.feature_columns == ["device"] and log.name == "shop" and log.items is None


def test_generic_tsv_gz_with_item_csv(tmp_path):
    path = write(tmp_path / "log.tsv.gz", "user_id\titem_id\tts\n1\tB07\t10\n2\t0042\t20\n1\tB07\t30\n", gz=True)
    items = write(tmp_path / "items.csv", "item_id,title,brand,price\nB07,\"Lamp, red\",,9.5\n0042,Desk,Ikea,80\n"
                                          "B99,Chair,Ikea,20\n")
    log = read_events(str(path), timestamp="ts", items_path=str(items))
    assert log.events.to_dict("list") == {USER: [1, 2, 1], ITEM: ["B07", "0042", "B07"], TIMESTAMP: [10, 20, 30]}
    assert log.items.to_dict("index") == {"B07": {"title": "Lamp, red", "brand": "", "price": 9.5},
                                          "0042": {"title": "Desk", "brand": "Ikea", "price": 80.0},
                                          "B99": {"title": "Chair", "brand": "Ikea", "price": 20.0}}


def test_generic_txt_with_delimiter(tmp_path):
    path = write(tmp_path / "log.txt", "a;b\n1;2\n3;4\n")
    log = read_events(str(path), user="a", item="b", delimiter=";")
    assert log.events.to_dict("list") == {USER: [1, 3], ITEM: [2, 4]}


def test_generic_parquet(tmp_path):
    events = pd.DataFrame({
        "user_id": np.array([7, 7, 8], dtype=np.int32),
        "item_id": [1.0, 2.0, 1.0],  # float IDs that are whole numbers become int64
        "when": pd.to_datetime(["2020-01-01T00:00:00", "2020-01-01T00:00:10", "2020-01-02T00:00:00"]),
        "r": [1, 2, 3],
    })
    events.to_parquet(tmp_path / "log.parquet")
    pd.DataFrame({"id": [1, 2], "title": ["One", None]}).to_parquet(tmp_path / "items.pq")
    log = read_events(str(tmp_path / "log.parquet"), timestamp="when", rating="r", engine="pandas",
                      items_path=str(tmp_path / "items.pq"), item_key="id")
    assert log.events.to_dict("list") == {USER: [7, 7, 8], ITEM: [1, 2, 1],
                                          TIMESTAMP: [1577836800, 1577836810, 1577923200], RATING: [1.0, 2.0, 3.0]}
    assert log.events[USER].dtype == np.int64 and log.events[ITEM].dtype == np.int64
    assert log.items["title"].to_dict() == {1: "One", 2: ""}


def test_generic_parquet_iso_strings(tmp_path):
    pd.DataFrame({"u": ["x"], "i": ["y"], "t": ["1970-01-02"]}).to_parquet(tmp_path / "log.parquet")
    log = read_events(str(tmp_path / "log.parquet"), user="u", item="i", timestamp="t", format="parquet",
                      engine="pandas")
    assert log.events[TIMESTAMP].tolist() == [86_400]


def test_readers_raise_only_data_error_for_missing_file(tmp_path):
    missing = str(tmp_path / "nope.csv")
    for call in (lambda: read_events(missing), lambda: read_amazon_sequences(missing),
                 lambda: read_amazon_lcrec(missing), lambda: read_amazon_reviews(missing)):
        with pytest.raises(DataError, match="nope.csv: file not found"):
            call()
