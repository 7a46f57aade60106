"""One error policy for every CLI: a user error prints ONE line naming the file or key and what was expected, exits
with status 2, and happens before any expensive work (the data cache is never created) — and a CLI given a wrong
folder creates nothing. Each case runs the real CLI's entry point (tests/cli_runner.py: in this process, as
``python -m`` would from its folder)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.cli_runner import run_entry
from tests.conftest import TINY_RUN


def _cli(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` run from ``cwd`` (its entry point, in this process)."""
    return run_entry(module, *args, cwd=cwd)


def _one_line_error(proc: subprocess.CompletedProcess, prog: str, *expected: str) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(f"{prog}: error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def run_copy(tiny_run, tmp_path) -> Path:
    """A copy of the session's trained tiny run."""
    return Path(shutil.copytree(tiny_run[0], tmp_path / "run"))


def test_bad_trainer_value_before_the_data_loads(tmp_path):
    proc = _cli("genrec.train", *TINY_RUN, "trainer.max_epochs=abc", f"data.cache_dir={tmp_path / 'cache'}",
                f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", "trainer.max_epochs: got 'abc', expected an integer")
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("split, expected", [
    ("data.split.kind=weekly", "data.split.kind: got 'weekly', expected one of"),
    ("data.split={kind:time,valid_from:0.9,test_from:0.8}", "data.split.test_from: got 0.8; expected a cut after"),
])
def test_bad_split_before_the_data_loads(tmp_path, split, expected):
    proc = _cli("genrec.train", *TINY_RUN, split, f"data.cache_dir={tmp_path / 'cache'}",
                f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", expected)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("overrides, expected", [
    (["optim.schedule=linear"], "optim.schedule: got 'linear', expected one of constant, cosine"),
    (["optim.schedule=cosine", "trainer.max_epochs=-1"], "optim.schedule: cosine decays to 0 at the run's last step"),
])
def test_bad_schedule_before_the_data_loads(tmp_path, overrides, expected):
    proc = _cli("genrec.train", *TINY_RUN, *overrides, f"data.cache_dir={tmp_path / 'cache'}",
                f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", expected)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("overrides, expected", [
    (["trainer.max_epochs=0"], "trainer.max_epochs: got 0: a run needs at least one epoch"),
    (["trainer.max_epochs=2", "trainer.check_val_every_n_epoch=3"],
     "trainer.check_val_every_n_epoch: got 3, more than trainer.max_epochs=2: no validation would run"),
])
def test_epochs_without_a_validation_pass_before_the_data_loads(tmp_path, overrides, expected):
    """A run tests its best validation checkpoint: settings under which no validation runs are refused up front."""
    proc = _cli("genrec.train", *TINY_RUN, *overrides, f"data.cache_dir={tmp_path / 'cache'}",
                f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", expected)
    assert not (tmp_path / "cache").exists()


def test_a_cap_reached_before_any_validation_is_one_line(tmp_path):
    """A step (or time) cap that ends training before the first validation leaves no checkpoint to test: one line
    naming the setting, not a traceback from loading the checkpoint path ''."""
    proc = _cli("genrec.train", *TINY_RUN, "+trainer.max_steps=1", f"data.cache_dir={tmp_path / 'cache'}",
                f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", "trainer.check_val_every_n_epoch: training stopped after 1 steps, before any "
                                          "validation pass")


def test_a_stream_prefetch_depth_the_table_cannot_pin_is_refused_before_the_data_loads(tmp_path):
    """A prefetched step's rows stay pinned until it trains: a depth of pinned_batches or more is one line naming
    the key (the events folder does not even exist)."""
    proc = _cli("genrec.stream", f"source.path={tmp_path / 'events'}", "model.embedding.prefetch_depth=2",
                f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    _one_line_error(proc, "genrec-stream", "model.embedding.prefetch_depth: must be in [0, pinned_batches=2)")


def test_missing_and_truncated_resume_checkpoints(run_copy, tmp_path):
    proc = _cli("genrec.train", f"resume_from={tmp_path / 'nothing'}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", f"resume_from={tmp_path / 'nothing'}", "expected a run folder")
    (run_copy / "checkpoints" / "last.ckpt").unlink()
    proc = _cli("genrec.train", f"resume_from={run_copy}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", str(run_copy / "checkpoints" / "last.ckpt"), "not found")
    best = run_copy / "checkpoints" / "best.ckpt"
    best.write_bytes(best.read_bytes()[:5000])
    proc = _cli("genrec.train", f"resume_from={best}", f"data.cache_dir={tmp_path / 'cache'}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", str(best), "not a readable checkpoint (truncated")
    assert not (tmp_path / "cache").exists()


def test_a_resumed_run_keeps_its_model(run_copy, tmp_path):
    proc = _cli("genrec.train", f"resume_from={run_copy}", "model.dim=32", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", "model.dim: a resumed run keeps its config.yaml")


def test_training_refuses_a_folder_that_holds_a_run(run_copy, tmp_path):
    """Nothing of the run changes (Hydra opens its job log, train.log, before genrec starts)."""
    before = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
    proc = _cli("genrec.train", *TINY_RUN, f"hydra.run.dir={run_copy}", f"data.cache_dir={tmp_path / 'cache'}",
                cwd=tmp_path)
    _one_line_error(proc, "genrec-train", f"{run_copy} already holds a run", f"resume_from={run_copy}",
                    "train into a new folder")
    after = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file() and p.name != "train.log"}
    assert after == before and not (tmp_path / "cache").exists()


def test_an_existing_results_file_is_not_overwritten(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "mine.json").write_text("{}")
    proc = _cli("genrec.train", *TINY_RUN, "results_name=mine", f"hydra.run.dir={tmp_path / 'run'}",
                f"data.cache_dir={tmp_path / 'cache'}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", "results_name=mine", "results/mine.json exists", "overwrite_results=true")
    assert (tmp_path / "results" / "mine.json").read_text() == "{}" and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("module, prog", [("genrec.evaluate", "genrec-eval"), ("genrec.export", "genrec-export")])
def test_a_wrong_run_dir_creates_nothing(module, prog, tmp_path):
    typo = tmp_path / "runs" / "typo"
    proc = _cli(module, f"run_dir={typo}", cwd=tmp_path)
    _one_line_error(proc, prog, f"run_dir={typo}: does not exist")
    assert list(tmp_path.iterdir()) == []


def test_eval_refuses_a_checkpoint_other_than_the_one_behind_the_metrics(run_copy, tmp_path):
    best = run_copy / "checkpoints" / "best.ckpt"
    checkpoint = torch.load(best, weights_only=True)
    for weight in checkpoint["state_dict"].values():
        weight.add_(0.01)  # another model in its place, e.g. from a second training into the folder
    torch.save(checkpoint, best)
    for module, prog in (("genrec.evaluate", "genrec-eval"), ("genrec.export", "genrec-export")):
        proc = _cli(module, f"run_dir={run_copy}", cwd=tmp_path)
        _one_line_error(proc, prog, str(best), "is not the checkpoint", "metrics.json")


@pytest.mark.parametrize("target", ["os.makedirs", "genrec.data.cache.os.system"])
def test_a_run_folder_config_cannot_run_code(run_copy, tmp_path, target):
    """A config.yaml naming a command as the data reader, plainly or through a genrec module's globals (which passed
    b9ac798's prefix check and ran the command): refused before it is called, by eval, export and resume."""
    cfg = OmegaConf.load(run_copy / "config.yaml")
    made = tmp_path / "made_by_the_config"
    cfg.data.reader = ({"_target_": target, "name": str(made)} if target == "os.makedirs"
                       else {"_target_": target, "command": f"mkdir {made}"})
    (run_copy / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    for module, prog in (("genrec.evaluate", "genrec-eval"), ("genrec.export", "genrec-export")):
        proc = _cli(module, f"run_dir={run_copy}", cwd=tmp_path)
        _one_line_error(proc, prog, str(run_copy / "config.yaml"), "data.reader._target_", f"'{target}'",
                        "not a trusted callable")
    proc = _cli("genrec.train", f"resume_from={run_copy}", cwd=tmp_path)
    _one_line_error(proc, "genrec-train", f"'{target}'", "not a trusted callable")
    assert not made.exists()


@pytest.mark.parametrize("cli, args, expected", [
    ("eval", [], "run_dir: missing mandatory value: set it on the command line (run_dir=...)"),
    ("export", [], "run_dir: missing mandatory value"),
    ("stream", [], "source.path: missing mandatory value"),
    ("stream", ["source.path=a_file"], "source.path: a_file is not a folder"),  # raised inside Hydra's instantiate
    ("train", ["trainer.max_epochz=3"], "Could not override 'trainer.max_epochz'"),
    ("eval", ["run_dir=x", "checkpont=last"], "Could not override 'checkpont'"),
    ("train", ["model=sasrecc"], "Could not find 'model/sasrecc' Available options in 'model': hstu"),
    ("train", ["optim.betas=[1.5,0.9]"], "optim.betas: got [1.5, 0.9], expected two numbers in [0, 1)"),
    ("train", ["eval.ks=[0]"], "eval.ks: got [0], expected a non-empty list of positive cut-offs"),
    ("train", ["model.encoder.num_layers=0"], "model.encoder.num_layers: got 0, expected a positive value"),
    ("train", ["data.preprocess.min_user_interactions=-1"],
     "data.preprocess.min_user_interactions: got -1, expected an integer >= 1"),
    ("train", ["align=sdpo"], "align=sdpo: the post-training stages are one config group now"),  # issue 44's rename
    ("train", ["distill=teacher", "distill.teacher=runs/t"], "use stage=distill"),
    ("train", ["stage=distill"], "stage.teacher: missing mandatory value"),
])
def test_config_mistakes_are_one_line_before_anything_loads(cli, args, expected, tmp_path):
    """Each case was a multi-line Hydra report (exit 1) or a traceback at b9ac798, or was accepted silently."""
    (tmp_path / "a_file").write_text("")
    module, prog = {"eval": ("genrec.evaluate", "genrec-eval"), "export": ("genrec.export", "genrec-export"),
                    "stream": ("genrec.stream", "genrec-stream"), "train": ("genrec.train", "genrec-train")}[cli]
    _one_line_error(_cli(module, *args, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path), prog, expected)
    assert not (tmp_path / "run" / "config.yaml").exists() and not list(tmp_path.glob("**/cache"))
