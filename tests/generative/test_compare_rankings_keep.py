"""scripts/analysis/compare_rankings.py --keep: seeds ranked at different times join one comparison, each row with
the commit it was ranked at, no run twice, and a file of other splits or other modes refused by name."""
import json

import pytest

from genrec.utils.results import write_result
from tests.conftest import load_script

DATASET = {"dataset": "beauty", "users": 3}
PROTOCOL = {"split": "leave-one-out", "users_scored": {"valid": 3, "test": 3}}
MODES = ["codes", "head"]


def comparison(commit: str, seeds: list[int], *, modes=MODES, protocol=PROTOCOL) -> dict:
    """A flat ranking comparison of one checkpoint per seed (sha256 ``ckpt<seed>``), ranked ``modes`` at ``commit``."""
    rows = [{"run": f"runs/gen-{seed}", "results_name": f"beauty_gr_generator_seed{seed}", "seed": seed, "mode": mode,
             "checkpoint": {"sha256": f"ckpt{seed}"}, "metrics": {"test": {"ndcg@10": seed / 10}}}
            for seed in seeds for mode in modes]
    return {"kind": "ranking_comparison", "name": "part", "dataset": DATASET, "protocol": protocol, "modes": modes,
            "variants": [], "runs": rows, "baselines": {"most_popular": {"test": {"ndcg@10": 0.05}}},
            "commit": commit, "created": "2026-12-05T00:00:00Z"}


def merge(tmp_path, *records, envelope_first=True) -> dict:
    paths = []
    for i, record in enumerate(records):
        path = tmp_path / f"part{i}.json"
        if i == 0 and envelope_first:  # main's files are in the results envelope, fresh ones are flat
            write_result(path, "ranking_comparison", {k: v for k, v in record.items() if k != "kind"})
        else:
            path.write_text(json.dumps(record))
        paths.append(path)
    out = tmp_path / "beauty_gr_rankings.json"
    load_script("scripts/analysis/compare_rankings.py").main(
        [a for p in paths for a in ("--keep", str(p))] + [a for m in MODES for a in ("--mode", m)] + ["--out", str(out)])
    return json.loads(out.read_text())


def test_kept_comparisons_merge_by_seed_with_each_rows_commit(tmp_path):
    merged = merge(tmp_path, comparison("aaa", [0]), comparison("bbb", [2, 1]))
    assert [(r["seed"], r["mode"], r["commit"]) for r in merged["runs"]] == [
        (0, "codes", "aaa"), (0, "head", "aaa"), (1, "codes", "bbb"), (1, "head", "bbb"), (2, "codes", "bbb"),
        (2, "head", "bbb")]
    assert merged["baselines"] == comparison("aaa", [0])["baselines"] and merged["name"] == "beauty_gr_rankings"
    assert merged["commit"] != "aaa" and merged["dataset"] == DATASET and merged["protocol"] == PROTOCOL


def test_a_run_in_two_kept_files_is_taken_from_the_first(tmp_path):
    later = comparison("bbb", [0, 1])
    merged = merge(tmp_path, comparison("aaa", [0]), later, envelope_first=False)
    assert [(r["seed"], r["commit"]) for r in merged["runs"]] == [(0, "aaa"), (0, "aaa"), (1, "bbb"), (1, "bbb")]


@pytest.mark.parametrize("other, expected", [
    (dict(modes=["codes"]), "ranked modes ['codes'] and variants []; expected ['codes', 'head']"),
    (dict(protocol={**PROTOCOL, "users_scored": {"valid": 3, "test": 2}}), "expected the dataset and protocol"),
])
def test_a_kept_file_of_other_modes_or_splits_is_refused_by_name(tmp_path, capsys, other, expected):
    with pytest.raises(SystemExit):
        merge(tmp_path, comparison("aaa", [0]), comparison("bbb", [1], **other))
    err = capsys.readouterr().err
    assert "part1.json" in err and expected in err
