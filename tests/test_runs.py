"""A run folder read as data (genrec.runs): trusted callables only, the checkpoint metrics.json names, fresh folders."""
import json
import re

import pytest
from omegaconf import OmegaConf

from genrec.errors import DataError, UserError
from genrec.runs import TRUSTED_TARGETS, RunFolder, check_targets, file_digest


@pytest.mark.parametrize("config, key", [
    ({"model": {"encoder": {"_target_": "os.system", "command": "true"}}}, "model.encoder._target_"),
    ({"callbacks": [{"_target_": "genrec.x"}, {"_target_": "subprocess.run"}]}, "callbacks[1]._target_"),
    ({"a": {"_target_": "${b}"}, "b": "genrec.train.main"}, "a._target_"),  # refused as written, never resolved
    ({"_target_": "genrec_evil.module"}, "_target_"),  # a prefix, not a name: "genrec." needs the dot
])
def test_untrusted_targets_are_refused_with_their_key(config, key):
    with pytest.raises(DataError, match=re.escape(f"run/config.yaml (key '{key}'): _target_ ")
                       + ".* is not a trusted callable"):
        check_targets(OmegaConf.create(config), "run/config.yaml")


def test_trusted_and_allowed_targets_pass():
    check_targets(OmegaConf.create({"m": {"_target_": "genrec.models.sasrec.SASRec"},
                                    "o": [{"_target_": "torch.optim.AdamW"}]}), "x")
    cfg = OmegaConf.create({"reader": {"_target_": "mycompany.readers.read"}})
    with pytest.raises(DataError):
        check_targets(cfg, "x")
    check_targets(cfg, "x", TRUSTED_TARGETS + ("mycompany.",))


def test_best_is_the_checkpoint_metrics_json_names(tmp_path):
    run = RunFolder(tmp_path)
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "checkpoints").mkdir()
    best = tmp_path / "checkpoints" / "best.ckpt"
    best.write_bytes(b"weights")
    with pytest.raises(UserError, match="metrics.json: not found: the run has not finished"):
        run.checkpoint("best")
    (tmp_path / "metrics.json").write_text(json.dumps({"checkpoints": {"best": {"file": "checkpoints/best.ckpt",
                                                                               "sha256": file_digest(best)}}}))
    assert run.checkpoint("best") == best
    best.write_bytes(b"other weights")
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
