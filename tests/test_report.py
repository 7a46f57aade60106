"""genrec-report: one self-contained HTML page per run or comparison, opened in a real headless Chromium (the OS
package): the page loads with no console message, its charts are drawn, and a screenshot is saved. Also the CLI's
error policy (one line, exit status 2, nothing written for a wrong run folder)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from genrec import evaluate as eval_entry
from genrec import train as train_entry
from genrec.conf import compose_config
from genrec.errors import DataError, UserError
from genrec.report.cli import write_report
from genrec.report.collect import config_diff, read_run
from tests.conftest import TINY_RUN
from tests.cli_runner import run_entry

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium;"
                                                             " .ci/run installs it)")
#: flags that work on a machine with no display, no D-Bus and no network (docs: /work/.library machines notes)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def open_in_chromium(page: Path, workdir: Path, screenshot: Path | None = None) -> str:
    """The page's DOM after its scripts ran; fails on any console message (an error, a warning, a log line).
    With ``screenshot``, also saves a PNG of the page there."""
    def chromium(*args: str) -> subprocess.CompletedProcess:
        profile = workdir / f"profile-{len(list(workdir.glob('profile-*')))}"  # a fresh profile per start
        proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
        assert not console, "\n".join(console)
        return proc

    dom = chromium("--dump-dom").stdout
    if screenshot is not None:
        chromium(f"--screenshot={screenshot}", "--window-size=1400,3200", "--hide-scrollbars")
        assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000
    return dom


@pytest.fixture(scope="module")
def runs(tiny_run, tmp_path_factory):
    """Two finished runs: a copy of the session's tiny run, evaluated by genrec-eval (breakdowns), and a second
    run with another seed and model size, 2 epochs, logged every step."""
    tmp = tmp_path_factory.mktemp("report")
    first = tmp / "first"
    shutil.copytree(tiny_run[0], first)
    eval_entry.run(compose_config("eval", [f"run_dir={first}"]))
    second = tmp / "second"
    cfg = compose_config("train", TINY_RUN + [f"data.cache_dir={tiny_run[1]['config']['data']['cache_dir']}", "seed=1",
                                              "model.dim=8", "trainer.max_epochs=2", "trainer.log_every_n_steps=1",
                                              "baselines=[]", "threads=1"])
    train_entry.run(cfg, second)
    return first, second


def _self_contained(page: str) -> None:
    assert not re.search(r"<(script|img|iframe)[^>]+src=|<link |@import|url\(", page), "loads something"


@needs_chromium
def test_report_of_one_run_in_a_browser(runs, tmp_path):
    first, _ = runs
    out = write_report([str(first)])
    assert out == first / "report.html"
    page = out.read_text()
    _self_contained(page)
    dom = open_in_chromium(out, tmp_path, tmp_path / "report.png")
    charts = int(re.search(r'data-rendered="(\d+)"', dom).group(1))
    # training loss per epoch, validation, the step split, 3 breakdowns (5 steps, fewer than log_every_n_steps:
    # no per-step rows, so no per-step charts)
    assert charts == 6, charts
    assert dom.count('class="bar"') > 20 and "<polyline" in dom
    for section in ("Test metrics", "Throughput and memory", "Evaluation breakdowns", "history length", "cold items"):
        assert section in dom, section
    metrics = json.loads((first / "metrics.json").read_text())
    assert f"{metrics['metrics']['test']['ndcg@10']:.4f}" in dom  # the table shows the run's own numbers
    assert "does not beat" in dom or "beats" in dom


@needs_chromium
def test_comparison_report_diffs_the_configs(runs, tmp_path):
    first, second = runs
    out = write_report([str(first), str(second)], str(tmp_path / "compare" / "report.html"))
    diff = config_diff([read_run(first), read_run(second)])
    assert diff["seed"] == [0, 1] and diff["model.dim"] == [16, 8] and "model.name" not in diff
    dom = open_in_chromium(out, tmp_path)
    assert "Keys that differ" in dom and "model.dim" in dom
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', dom,
                                re.S).group(1))
    assert [r["label"] for r in data["runs"]] == [str(first), str(second)]
    # the second run logged every step of its 2 epochs: the curve the page draws has them all
    metrics = json.loads((second / "metrics.json").read_text())
    assert [p[0] for p in data["runs"][1]["curves"]["train/loss_step"]] == list(range(metrics["steps_run"]))
    # one validation point per epoch (not the best checkpoint's re-validation after training)
    assert [p[0] for p in data["runs"][1]["curves"]["val/ndcg@10"]] == list(range(metrics["epochs_run"]))


def test_a_wrong_run_folder_is_one_line_and_writes_nothing(runs, tmp_path):
    first, _ = runs
    out = tmp_path / "out" / "report.html"
    proc = run_entry("genrec.report", str(first), str(tmp_path / "missing"), "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"genrec-report: error: run={tmp_path / 'missing'}: does not exist; "
                                                "expected a run folder written by genrec-train"]
    assert not (tmp_path / "out").exists()


def test_bad_run_folders_are_user_errors(runs, tmp_path):
    first, _ = runs
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="holds no config.yaml"):
        write_report([str(tmp_path / "empty")])
    broken = tmp_path / "broken"
    shutil.copytree(first, broken)
    (broken / "report.html").unlink(missing_ok=True)  # written by another test
    (broken / "metrics.json").write_text("{not json")
    with pytest.raises(DataError, match="metrics.json: cannot be read as JSON"):
        write_report([str(broken)])
    (broken / "metrics.json").write_text('{"kind": "tokenize"}')
    with pytest.raises(UserError, match="genrec-tokenize folder"):
        write_report([str(broken)])
    (broken / "metrics.json").write_text((first / "metrics.json").read_text())
    (broken / "logs" / "metrics.csv").write_text("epoch,step,train/loss_step\n0,1,abc\n")
    with pytest.raises(DataError, match=r"metrics.csv:2: column 'train/loss_step': expected numbers, got 'abc'"):
        write_report([str(broken)])
    with pytest.raises(UserError, match="named twice"):
        write_report([str(first), str(first)])
    assert not (broken / "report.html").exists() and not (first / "report.html.partial").exists()


@needs_chromium
def test_report_of_a_run_over_semantic_ids_shows_tokenizer_health(tiny_run, tmp_path):
    """genrec-tokenize (residual k-means over categorical features) then the decoder-only generator over its
    semantic IDs: the report carries the SID table's health."""
    from genrec.tokenize.cli import run as tokenize

    cache = tiny_run[1]["config"]["data"]["cache_dir"]
    data = TINY_RUN[:3] + [f"data.cache_dir={cache}"]
    sid = tmp_path / "sid"
    health = tokenize(compose_config("tokenize", data + ["encoder=categorical", "tokenizer=rkmeans", "threads=1",
                                                         "tokenizer.num_levels=2", "tokenizer.codebook_size=8"]), sid)
    run = tmp_path / "sid_gpt"
    train_entry.run(compose_config("train", TINY_RUN + [f"data.cache_dir={cache}", "model=sid_gpt", f"sid_table={sid}",
                                                        "model.backbone.num_layers=1", "model.backbone.ffn_dim=32",
                                                        "data.max_len=8", "baselines=[]", "threads=1"]), run)
    dom = open_in_chromium(write_report([str(run)]), tmp_path)
    assert "Tokenizer health" in dom and "share of each codebook used" in dom
    used = health["health"]["levels"][0]["used"]
    assert f"<td>{used}</td>" in dom
