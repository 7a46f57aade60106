"""Every checkpoint of a run is bound to it (issue 47.4) and a full disk is one line (47.5).

A run folder names its run (``run.json``); every checkpoint genrec-train writes carries that ID and the digest of
its content, and every reader checks both: ``genrec-eval``/``genrec-export checkpoint=last``, ``genrec-train
resume_from=``, ``init_from=``. At b9ac798 another run's ``last.ckpt``, or a modified one, was accepted silently,
and a full disk while writing a checkpoint or the CSV log was a traceback.
"""
from __future__ import annotations

import errno
import json
import resource
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import lightning.fabric.plugins.io.torch_io as torch_io
import pandas as pd
import pytest
import torch

from genrec import train as train_entry
from genrec.cli import run_cli
from genrec.conf import compose_config
from genrec.dist.checkpoint import check_checkpoint, read_meta, seal
from genrec.errors import DataError, DiskFullError
from genrec.runs import RunFolder
from genrec.training.builders import init_checkpoint
from genrec.training.loggers import RunCSVLogger
from tests.conftest import TINY_RUN
from tests.test_cli_errors import _cli, _one_line_error
from tests.test_resume import _environment


@pytest.fixture
def run_copy(tiny_run, tmp_path) -> Path:
    """A copy of the session's trained tiny run."""
    return Path(shutil.copytree(tiny_run[0], tmp_path / "run"))


def _foreign(path: Path) -> str:
    """Replace the checkpoint ``path`` by one another run wrote (other weights, its own ID, a valid digest)."""
    checkpoint = torch.load(path, weights_only=True)
    for weight in checkpoint["state_dict"].values():
        weight.add_(0.01)
    other = uuid.uuid4().hex
    checkpoint["genrec"]["run_id"] = other
    seal(checkpoint)
    torch.save(checkpoint, path)
    return other


def _tampered(path: Path) -> None:
    """Change the weights of the checkpoint ``path`` in place (its digest left as written)."""
    checkpoint = torch.load(path, weights_only=True)
    for weight in checkpoint["state_dict"].values():
        weight.add_(0.01)
    torch.save(checkpoint, path)


def test_a_checkpoint_is_checked_against_its_run_and_content(run_copy):
    run, last = RunFolder(run_copy), run_copy / "checkpoints" / "last.ckpt"
    run_id = run.run_id()
    assert run_id and read_meta(last)["genrec"]["run_id"] == run_id
    assert run.check_checkpoint(last)["global_step"] == read_meta(last)["global_step"]
    _tampered(last)
    with pytest.raises(DataError, match=f"{last}: its content differs from the digest it was written with"):
        run.check_checkpoint(last)
    other = _foreign(last)
    with pytest.raises(DataError, match=f"{last}: written by run {other}, not by run {run_id} of this folder"):
        run.check_checkpoint(last)
    # without run.json the folder claims no run: a checkpoint of a run is refused, an unsealed (older genrec) one
    # is the only kind accepted, unchecked
    run.run_file.unlink()
    with pytest.raises(DataError, match=f"written by run {other}, not by this folder, which names no run"):
        run.check_checkpoint(last)
    checkpoint = torch.load(last, weights_only=True)
    del checkpoint["genrec_seal"]
    torch.save(checkpoint, last)
    assert check_checkpoint(last, None)["global_step"] == read_meta(last)["global_step"]
    with pytest.raises(DataError, match=f"{last}: carries no digest: not a checkpoint written by run {run_id}"):
        check_checkpoint(last, run_id)


@pytest.mark.parametrize("change", ["foreign", "tampered"])
def test_eval_export_and_resume_refuse_a_last_checkpoint_not_of_the_run(run_copy, tmp_path, change):
    """b9ac798 evaluated and resumed from it (exit 0)."""
    last = run_copy / "checkpoints" / "last.ckpt"
    if change == "foreign":
        expected = f"written by run {_foreign(last)}, not by run {RunFolder(run_copy).run_id()} of this folder"
    else:
        _tampered(last)
        expected = "its content differs from the digest it was written with"
    readers = [("genrec.evaluate", "genrec-eval", f"run_dir={run_copy}", "checkpoint=last"),
               ("genrec.train", "genrec-train", f"resume_from={run_copy}", "trainer.max_epochs=2",
                f"data.cache_dir={tmp_path / 'cache'}")]
    if change == "foreign":
        readers.append(("genrec.export", "genrec-export", f"run_dir={run_copy}", "checkpoint=last"))
    for module, prog, *args in readers:
        proc = _cli(module, *args, cwd=tmp_path)
        _one_line_error(proc, prog, str(last), expected)
    assert not (tmp_path / "cache").exists()  # the resume is refused before the data loads


def test_init_from_refuses_a_checkpoint_of_another_run(run_copy):
    last = run_copy / "checkpoints" / "last.ckpt"
    assert init_checkpoint(str(last)) == last
    _foreign(last)
    with pytest.raises(DataError, match=f"{last}: written by run"):
        init_checkpoint(str(last))


# ---------------------------------------------------------------------------------------------------- a full disk
FULL_DISK_RUN = TINY_RUN + ["threads=1", "checkpoint_every_n_steps=2", "baselines=[]", "trainer.log_every_n_steps=1"]


def _losses(run_dir: Path) -> pd.DataFrame:
    log = pd.read_csv(run_dir / "logs" / "metrics.csv")
    return log.dropna(subset=["train/loss_step"])[["step", "train/loss_step"]].reset_index(drop=True)


def test_a_full_disk_while_checkpointing_is_one_line_and_the_run_resumes_exactly(tmp_path, monkeypatch, capsys):
    """The second checkpoint write (last.ckpt at step 4) finds the disk full: one line naming it, exit 2, the step-2
    checkpoint intact, and the resumed run ends bit-identical to an uninterrupted one (b9ac798: a traceback)."""
    cfg = compose_config("train", overrides=FULL_DISK_RUN + [f"data.cache_dir={tmp_path / 'cache'}"])
    reference = train_entry.run(cfg, tmp_path / "reference")
    writes, save = [], torch_io._atomic_save

    def full_at_second(checkpoint, path):
        writes.append(Path(path).name)
        if len(writes) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        save(checkpoint, path)

    monkeypatch.setattr(torch_io, "_atomic_save", full_at_second)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        run_cli("genrec-train", train_entry.run, cfg, run_dir)
    monkeypatch.undo()
    last = run_dir / "checkpoints" / "last.ckpt"
    assert stop.value.code == 2 and writes == ["last.ckpt", "last.ckpt"]
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("genrec-train: error:")]
    assert lines == [f"genrec-train: error: {last}: cannot be written: No space left on device (the disk, a quota or "
                     "the file-size limit is full); what was written before is intact: free space, then run again (a "
                     "training run continues with resume_from=<run folder>)"]
    assert RunFolder(run_dir).check_checkpoint(last)["global_step"] == 2
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]  # no partial file left

    resumed = train_entry.run(train_entry.resumed_config(RunFolder(run_dir).config(), [f"resume_from={run_dir}"]),
                              run_dir)
    assert resumed["resumes"][0]["global_step"] == 2
    assert resumed["metrics"] == reference["metrics"] and resumed["steps_run"] == reference["steps_run"]
    pd.testing.assert_frame_equal(_losses(run_dir), _losses(tmp_path / "reference"), check_exact=True)


def _limit_file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_a_file_size_limit_while_checkpointing_is_one_line(tmp_path):
    """A limit below a checkpoint's size (the tiny run's is ~120 kB; its data cache ~50 kB): the OS refuses the
    write (EFBIG); the run ends in one line naming the checkpoint and leaves no partial file."""
    env = dict(_environment(), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-m", "genrec.train", *TINY_RUN, "threads=1", "baselines=[]",
                           f"data.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
                          preexec_fn=_limit_file_size(100_000))
    best = tmp_path / "run" / "checkpoints" / "best.ckpt"
    _one_line_error(proc, "genrec-train", f"{best}: cannot be written: File too large", "resume_from=")
    assert not best.parent.exists() or list(best.parent.iterdir()) == []


def test_a_full_disk_while_logging_is_one_line_and_leaves_whole_rows(tmp_path):
    """metrics.csv under a file-size limit a few bytes past its header: the row that does not fit is cut off whole
    (a partial row would break the resumed run's truncation); and on a full device (ENOSPC), one line too."""
    logger = RunCSVLogger(tmp_path)
    logger.log_metrics({"train/loss": 1.0}, step=0)
    logger.save()
    path = tmp_path / "logs" / "metrics.csv"
    before = path.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 5, hard))
    try:
        with pytest.raises(DiskFullError, match=f"{path}: cannot be written: File too large"):
            logger.log_metrics({"train/loss": 0.123456789}, step=1)  # written at once (flushed every step)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert path.read_bytes() == before
    logger.save()  # room again: the row is written
    assert pd.read_csv(path)["step"].tolist() == [0, 1]

    full = RunCSVLogger(tmp_path / "full")
    (tmp_path / "full" / "logs").mkdir(parents=True)
    (tmp_path / "full" / "logs" / "metrics.csv").symlink_to("/dev/full")  # every write: ENOSPC
    with pytest.raises(DiskFullError, match="metrics.csv: cannot be written: No space left on device"):
        full.log_metrics({"train/loss": 1.0}, step=0)


def test_a_run_folder_names_its_run_once(tmp_path):
    run = RunFolder(tmp_path / "run")
    assert run.run_id() is None
    run_id = run.start_run()
    assert run.start_run() == run_id == json.loads(run.run_file.read_text())["run_id"]  # kept, not replaced
    run.run_file.write_text("[]")
    with pytest.raises(DataError, match=f"{run.run_file}: cannot be read as the run's identity"):
        run.run_id()
