"""Results as data: every file in results/ (archive/ included) is one envelope (genrec/utils/results.py): kind,
schema_version, provenance with its commit and time, settings and figures; a file outside it is named with its key."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from genrec.errors import DataError
from genrec.utils.results import envelope, flat, load_result, validate, write_result

RESULTS = Path(__file__).resolve().parents[1] / "results"


def test_every_results_file_is_an_envelope():
    files = sorted(RESULTS.rglob("*.json"))
    assert len(files) > 100
    for path in files:
        load_result(path)  # a DataError names the file and the key


def test_a_record_round_trips_and_a_bad_file_names_its_key(tmp_path):
    record = {"commit": "abc", "created": "now", "environment": {}, "name": "x", "seed": 0, "config": {"a": 1},
              "metrics": {"test": {"ndcg@10": 0.05}}}
    path = write_result(tmp_path / "x.json", "train_run", record)
    doc = json.loads(path.read_text())
    assert doc["provenance"] == {"commit": "abc", "created": "now", "environment": {}}
    assert doc["settings"] == {"name": "x", "seed": 0, "config": {"a": 1}} and set(doc["figures"]) == {"metrics"}
    assert load_result(path) == record | {"kind": "train_run"}
    assert flat(envelope("k", record)) == record | {"kind": "k"}
    for broken, key in [({**doc, "extra": 1}, "extra"), ({**doc, "schema_version": 2}, "schema_version"),
                        ({**doc, "provenance": {"created": "now"}}, "provenance.commit"),
                        ({**doc, "figures": []}, "figures"), ({**doc, "kind": ""}, "kind")]:
        with pytest.raises(DataError, match=f"x.json \\(key '{key}'\\)"):
            validate(broken, "x.json")
