"""scripts/bench/bench_budget.py and its callback (genrec.training.budget) on the tiny synthetic data: the curve, the
summary taken from it, the CPU budget's stop, and a run that trains the same with the callback as without it."""
import json

import pytest

from genrec import train as train_entry
from genrec.conf import compose_config
from genrec.training.budget import CURVE_FILE

from scripts.bench import bench_budget_tables
from tests.conftest import TINY_RUN, load_script

bench_budget = load_script("scripts/bench/bench_budget.py")


def _overrides(tmp_path, epochs: int) -> list[str]:
    return TINY_RUN + [f"data.cache_dir={tmp_path / 'cache'}", f"trainer.max_epochs={epochs}",
                       "model.prior.enabled=true"]


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("budget")
    result = bench_budget.run_budget(_overrides(tmp, 2), "test", seed=0, cpu_seconds=None, runs_dir=tmp / "runs",
                                     results_dir=tmp / "results")
    return tmp, result


def test_curve_and_summary(budget_run):
    tmp, result = budget_run
    assert json.loads((tmp / "results" / "budget_synthetic_sasrec_test_seed0.json").read_text()) == \
        json.loads(json.dumps(result))
    metrics = json.loads((tmp / "runs" / result["name"] / "metrics.json").read_text())
    per_epoch = metrics["steps_run"] // 2
    curve = result["curve"]
    assert [p["step"] for p in curve] == [0, per_epoch, 2 * per_epoch]
    assert all(a["cpu_seconds"] < b["cpu_seconds"] for a, b in zip(curve, curve[1:]))
    assert result["cpu_seconds_run"] == curve[-1]["cpu_seconds"] and not result["stopped_by_budget"]
    # the callback's test pass at the best validation is genrec-train's test of the best checkpoint
    best = next(p for p in curve if p["step"] == result["final"]["step"])
    assert best["valid"]["ndcg@10"] == max(p["valid"]["ndcg@10"] for p in curve[1:])
    for split in ("valid", "test"):  # genrec-train's figures went through Lightning's logging, in float32
        assert best[split] == pytest.approx(result["final"][split], rel=1e-6, abs=1e-9)
    # the summary follows from the curve and the baselines, which are the run's own (timed here)
    heuristic = result["baselines"]["transitions_last3_skip"]
    for split in ("valid", "test"):
        above = [p["cpu_seconds"] for p in curve if p[split]["ndcg@10"] > heuristic[split]["ndcg@10"]]
        assert result["cpu_seconds_to_pass"][split] == (above[0] if above else None)
    assert result["final"]["margin_over_heuristic"]["ndcg@10"] == pytest.approx(
        result["final"]["test"]["ndcg@10"] / heuristic["test"]["ndcg@10"] - 1)
    for name, baseline in result["baselines"].items():
        assert baseline["valid"] == pytest.approx(metrics["baselines"][name]["valid"])
        assert baseline["test"] == pytest.approx(metrics["baselines"][name]["test"])
        assert baseline["cpu_seconds"]["total"] >= baseline["cpu_seconds"]["build"] >= 0
    assert result["commit"] and result["config"]["callbacks"]["budget"]["cpu_seconds"] is None
    assert result["config"]["threads"] == 1


def test_the_callback_leaves_training_unchanged(budget_run, tmp_path):
    tmp, result = budget_run
    cfg = compose_config("train", _overrides(tmp, 2) + ["seed=0", "threads=1", "trainer.enable_progress_bar=false"])
    plain = train_entry.run(cfg, tmp_path / "plain")
    assert plain["metrics"]["valid"] == result["final"]["valid"]
    assert plain["metrics"]["test"] == result["final"]["test"]
    assert plain["checkpoints"]["best"]["global_step"] == result["final"]["step"]


def test_the_budget_stops_training(tmp_path):
    result = bench_budget.run_budget(_overrides(tmp_path, 3), "stop", cpu_seconds=0.01, runs_dir=tmp_path / "runs",
                                     results_dir=tmp_path / "results")
    assert result["stopped_by_budget"] and result["steps_run"] == 1
    assert [p["step"] for p in result["curve"]] == [0, 1]  # a run told to stop is validated once more
    assert json.loads((tmp_path / "runs" / result["name"] / CURVE_FILE).read_text())["stopped_by_budget"]


def test_the_results_doc_shows_the_time_to_pass_and_the_margin(budget_run):
    _, result = budget_run
    second = json.loads(json.dumps(result)) | {"seed": 1, "name": "budget_synthetic_sasrec_test_seed1"}
    second["cpu_seconds_to_pass"] = {"valid": None, "test": 7.0}
    lines = bench_budget_tables.tables([result, second])
    assert lines[0] == "## Time to pass `transitions_last3_skip` at a CPU budget: synthetic"
    row = next(line for line in lines if line.startswith("| sasrec | test |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[5] == f"{result['final']['margin_over_heuristic']['ndcg@10']:+.1%}"
    valid_pass = result["cpu_seconds_to_pass"]["valid"]
    valid_cell = "never" if valid_pass is None else f"{valid_pass:.0f} (passed 1/2)"
    test_pass = result["cpu_seconds_to_pass"]["test"]
    test_cell = f"{(test_pass + 7.0) / 2:.0f}" if test_pass is not None else "7 (passed 1/2)"
    assert cells[6] == f"{valid_cell} / {test_cell}"
    assert cells[9] == "0, 1"
    heuristic = result["baselines"]["transitions_last3_skip"]
    baseline = next(line for line in lines if line.startswith("| transitions_last3_skip (baseline) |"))
    assert f"| {heuristic['test']['ndcg@10']:.4f} |" in baseline
    assert f"{heuristic['cpu_seconds']['total']:.1f} (build {heuristic['cpu_seconds']['build']:.1f})" in baseline
