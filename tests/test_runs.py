"""A run folder read as data (genrec.runs): its config checked, the checkpoint metrics.json names, fresh folders."""
import json
import re

import pytest
import torch

from genrec.dist.checkpoint import seal
from genrec.errors import DataError, UserError
from genrec.runs import RunFolder, file_digest, load_config


def _write_checkpoint(path, run_id, weight: float) -> None:
    """A sealed checkpoint of the run ``run_id`` (what genrec-train writes, minus the training state)."""
    checkpoint = {"state_dict": {"w": torch.tensor([weight])}, "genrec": {"run_id": run_id}}
    seal(checkpoint)
    torch.save(checkpoint, path)


def test_a_config_with_an_untrusted_target_or_a_python_tag_is_refused_in_one_line(tmp_path):
    """What genrec.trust checks is tested in tests/test_trust.py; here: load_config applies it, and a YAML tag that
    would build a Python object is a DataError naming the file (a traceback at b9ac798)."""
    path = tmp_path / "config.yaml"
    path.write_text("model:\n  encoder:\n    _target_: os.system\n")
    with pytest.raises(DataError, match=re.escape(f"{path} (key 'model.encoder._target_')")):
        load_config(path)
    path.write_text("seed: !!python/object/apply:os.system [true]\n")
    with pytest.raises(DataError, match=re.escape(f"{path}: cannot be read as a genrec config")):
        load_config(path)


def test_best_is_the_checkpoint_metrics_json_names(tmp_path):
    run = RunFolder(tmp_path)
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "checkpoints").mkdir()
    run_id = run.start_run()
    best = tmp_path / "checkpoints" / "best.ckpt"
    _write_checkpoint(best, run_id, 1.0)
    with pytest.raises(UserError, match="metrics.json: not found: the run has not finished"):
        run.checkpoint("best")
    (tmp_path / "metrics.json").write_text(json.dumps({"checkpoints": {"best": {"file": "checkpoints/best.ckpt",
                                                                               "sha256": file_digest(best)}}}))
    assert run.checkpoint("best") == best
    _write_checkpoint(best, run_id, 2.0)
    with pytest.raises(UserError, match="best.ckpt is not the checkpoint .*metrics.json was computed from"):
        run.checkpoint("best")
    with pytest.raises(UserError, match="last.ckpt: not found"):
        run.checkpoint("last")
    with pytest.raises(UserError, match="checkpoint=newest: expected best"):
        run.checkpoint("newest")


def test_a_folder_holds_a_run_once_it_holds_more_than_hydra_files(tmp_path):
    run = RunFolder(tmp_path / "run")
    run.require_new()  # absent
    run.path.mkdir()
    (run.path / "train.log").write_text("")
    (run.path / ".hydra").mkdir()
    run.require_new()  # Hydra's own files only
    (run.path / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(UserError, match=r"already holds a run .*resume_from=.*new folder"):
        run.require_new()
    with pytest.raises(UserError, match="run_dir=.*nothing: does not exist"):
        RunFolder.existing(tmp_path / "nothing")


def test_a_distributed_checkpoint_folder_digest_covers_names_and_contents(tmp_path):
    folder = tmp_path / "best.ckpt"
    folder.mkdir()
    (folder / "a").write_bytes(b"1")
    (folder / "b").write_bytes(b"2")
    digest = file_digest(folder)
    (folder / "b").write_bytes(b"3")
    assert file_digest(folder) != digest
    (folder / "b").write_bytes(b"2")
    assert file_digest(folder) == digest
    (folder / "b").rename(folder / "c")
    assert file_digest(folder) != digest
