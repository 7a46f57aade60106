"""End to end: a tiny training run writes its folder; genrec-eval on its checkpoint reproduces its test metrics."""
import json

import pandas as pd
import pytest

from genrec import evaluate as eval_entry
from genrec import train as train_entry
from genrec.conf import compose_config
from tests.cli_runner import run_entry

TINY = ["data.reader.num_users=300", "data.reader.num_items=120", "data.reader.num_clusters=6",
        "trainer.max_epochs=2", "trainer.enable_progress_bar=false", "+trainer.enable_model_summary=false",
        "model.dim=16", "data.batch_size=64"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    cfg = compose_config("train", overrides=TINY + [f"data.cache_dir={tmp / 'cache'}"])
    metrics = train_entry.run(cfg, tmp / "run")
    return tmp / "run", metrics


def test_run_folder_contents(trained):
    run_dir, metrics = trained
    for name in ("config.yaml", "metrics.json", "curves.png", "checkpoints/best.ckpt", "checkpoints/last.ckpt",
                 "logs/metrics.csv"):
        assert (run_dir / name).exists(), name
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert saved["metrics"]["test"] == pytest.approx(metrics["metrics"]["test"])
    assert set(saved["baselines"]) == {"most_popular", "transitions", "transitions_last3_skip"}
    assert 250 < saved["dataset"]["users"] <= 300 and saved["commit"]
    for split in ("valid", "test"):
        assert set(saved["metrics"][split]) >= {"recall@10", "ndcg@10", "mrr"}


def test_best_epoch_is_the_logged_best_validation_epoch(trained, tmp_path):
    run_dir, metrics = trained
    logged = pd.read_csv(run_dir / "logs" / "metrics.csv").dropna(subset=["val/ndcg@10"])
    per_epoch = logged.iloc[:metrics["epochs_run"]]  # the last row is the re-validation of the best checkpoint
    assert metrics["best_epoch"] == per_epoch.loc[per_epoch["val/ndcg@10"].idxmax(), "epoch"]
    assert metrics["metrics"]["valid"]["ndcg@10"] == pytest.approx(per_epoch["val/ndcg@10"].max(), abs=1e-6)

def _epoch_scores(run_dir) -> list[float]:
    """Validation NDCG@10 per trained epoch from the run's CSV log (its last row re-validates the best checkpoint)."""
    logged = pd.read_csv(run_dir / "logs" / "metrics.csv").dropna(subset=["val/ndcg@10"])
    return logged["val/ndcg@10"].iloc[:-1].tolist()


def test_a_finished_run_extended_by_resume_keeps_its_best_epoch_and_log(tmp_path):
    """A finished one-epoch run resumed in its own folder with trainer.max_epochs=2: at lr 1e-30 (updates below
    float32 resolution; lr must be positive) the epoch trained after the resume leaves the ranking as it was, a tie
    that the best epoch from before the resume keeps only if the resumed run remembers it (a forgotten best would take
    the new epoch); the CSV log is appended to (every epoch's validation once, then the re-validation of the best
    checkpoint)."""
    run_dir, overrides = tmp_path / "run", TINY + [f"data.cache_dir={tmp_path / 'cache'}", "optim.lr=1e-30"]
    first = train_entry.run(compose_config("train", overrides=overrides + ["trainer.max_epochs=1"]), run_dir)
    resumed = train_entry.run(compose_config("train", overrides=overrides + [
        "trainer.max_epochs=2", f"resume_from={run_dir}"]), run_dir)
    scores = _epoch_scores(run_dir)
    assert len(scores) == 2 and first["best_epoch"] == 0
    assert scores[1] == scores[0], "at lr 1e-30 the epoch after the resume should score as the one before it"
    assert resumed["epochs_run"] == 2 and resumed["best_epoch"] == 0
    assert resumed["metrics"]["valid"]["ndcg@10"] == pytest.approx(scores[0], abs=1e-6)
    assert resumed["resumes"][0]["epoch"] == 0 and resumed["checkpoints"]["best"]["epoch"] == 0


def test_eval_entry_reproduces_test_metrics(trained):
    run_dir, metrics = trained
    cfg = compose_config("eval", overrides=[f"run_dir={run_dir}", "baselines=false"])
    out = eval_entry.run(cfg)
    assert out["models"]["sasrec"]["metrics"]["test"] == pytest.approx(metrics["metrics"]["test"], abs=1e-6)
    assert out["models"]["sasrec"]["metrics"]["valid"] == pytest.approx(metrics["metrics"]["valid"], abs=1e-6)
    assert (run_dir / "eval" / "metrics.json").exists() and (run_dir / "eval" / "evaluation.png").exists()


def test_cli_reports_bad_data_in_one_line(tmp_path):
    bad = tmp_path / "events.csv"
    bad.write_text("user_id;item_id\n1;2\n")
    proc = run_entry("genrec.train", "data=events", f"data.reader.path={bad}", f"data.cache_dir={tmp_path}",
                     f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "genrec-train: error:" in proc.stderr and str(bad) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_same_seed_same_metrics(trained, tmp_path):
    _, metrics = trained
    cfg = compose_config("train", overrides=TINY + [f"data.cache_dir={tmp_path / 'cache'}"])
    again = train_entry.run(cfg, tmp_path / "run")
    assert again["metrics"]["test"] == metrics["metrics"]["test"]
    assert again["baselines"] == metrics["baselines"]


def test_time_split_run_records_its_protocol_and_eval_reproduces_it(tmp_path):
    """A time-split run: the protocol and the users evaluated are in metrics.json; genrec-eval rebuilds the same split
    from the run's config.yaml and reproduces its metrics."""
    split = ["data.split.kind=time", "data.split.valid_from=0.8", "data.split.test_from=0.9"]
    cfg = compose_config("train", TINY + split + [f"data.cache_dir={tmp_path / 'cache'}"])
    metrics = train_entry.run(cfg, tmp_path / "run")
    out = eval_entry.run(compose_config("eval", overrides=[f"run_dir={tmp_path / 'run'}", "baselines=false"]))
    details = metrics["protocol"]["split_details"]
    assert metrics["protocol"]["split"].startswith("global temporal") and details["kind"] == "time"
    assert 0 < details["users_evaluated"]["test"] < metrics["dataset"]["users"]
    assert metrics["protocol"]["users_scored"] == details["users_evaluated"]
    assert details["valid_from_time"] < details["test_from_time"]
    assert set(metrics["baselines"]) == {"most_popular", "transitions", "transitions_last3_skip"}
    assert out["models"]["sasrec"]["metrics"]["test"] == pytest.approx(metrics["metrics"]["test"], abs=1e-6)


def test_a_run_tested_on_some_batches_records_and_says_how_many_users_it_tested(tmp_path, capsys):
    cfg = compose_config("train", TINY + ["data.eval_batch_size=64", "+trainer.limit_test_batches=1",
                                          f"data.cache_dir={tmp_path / 'cache'}"])
    metrics = train_entry.run(cfg, tmp_path / "run")
    with_target, scored = metrics["protocol"]["split_details"]["users_evaluated"], metrics["protocol"]["users_scored"]
    assert scored["valid"] == with_target["valid"] and 0 < scored["test"] <= 64 < with_target["test"]
    out = capsys.readouterr().out
    assert f"sasrec was tested on {scored['test']} of the {with_target['test']} users with a test target" in out
    assert f"({scored['test']} of {metrics['dataset']['users']} users tested" in out
