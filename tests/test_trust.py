"""A ``_target_`` is trusted by what it resolves to (genrec.trust), on every path that reads a run folder's config:
genrec-eval, genrec-export, genrec-train resume_from=, genrec-stream resume_from=, the collaborative encoder and the
distillation teacher. Each bypass below passed b9ac798's string-prefix check."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from genrec.errors import DataError
from genrec.runs import RunFolder
from genrec.trust import TRUSTED_TARGETS, check_targets, config_tree_targets, resolve_target

#: each family of names that spells a trusted prefix but reaches something else
BYPASSES = {
    "module globals": "genrec.data.cache.os.system",
    "module globals, two hops": "genrec.data.datamodule.np.lib.format.open_memmap",
    "re-export of another package's function": "genrec.data.datamodule.get_method",
    "re-export of a standard-library class": "genrec.errors.Path",
    "re-export inside a trusted package": "torch.optim.adamw.Tensor",
    "attribute chain through a class": "genrec.models.sasrec.SASRec.mro",
    "attribute chain through a function": "genrec.data.movielens.read_movielens.__globals__",
    "builtins through a genrec module": "genrec.data.cache.__builtins__",
    "a genrec function the config tree never names (writes files)": "genrec.utils.provenance.write_json",
    "a genrec entry point": "genrec.train.main",
    "an interpolation": "${oops}",
    "a prefix, not a package": "genrec_evil.module",
    "plain": "subprocess.run",
}


@pytest.mark.parametrize("target", BYPASSES.values(), ids=BYPASSES.keys())
def test_every_bypass_is_refused_with_its_key(target):
    cfg = OmegaConf.create({"data": {"reader": {"_target_": target, "command": "true"}}})
    with pytest.raises(DataError, match=re.escape("run/config.yaml (key 'data.reader._target_'): _target_ ")
                       + ".* is not a trusted callable"):
        check_targets(cfg, "run/config.yaml")


def test_the_command_line_keeps_the_safe_walk():
    """``allowed=None`` (a config the user composed on the command line) trusts any module, but still never walks
    through a module's globals or returns a builtin."""
    with pytest.raises(DataError, match="genrec.data.cache.os is not a trusted module"):
        resolve_target("genrec.data.cache.os.system", None)
    with pytest.raises(DataError, match="no class or Python function 'system'"):
        resolve_target("os.system", None)
    assert resolve_target("genrec.data.cache.load_or_build", None).__name__ == "load_or_build"


def test_every_target_of_the_config_tree_resolves_and_nothing_else_of_genrec():
    tree = config_tree_targets()
    assert "genrec.models.sasrec.SASRec" in tree and "genrec.data.movielens.read_movielens" in tree
    for target in tree:
        if target.startswith(("genrec.", "lightning.")):
            resolve_target(target)  # the optional trackers and Optuna are only named, not imported, here
    assert all(t.startswith(("genrec.", "hydra_plugins.", "lightning.", "optuna.")) for t in tree)
    check_targets(OmegaConf.create({"o": [{"_target_": "torch.optim.AdamW"}],
                                    "e": {"_target_": "genrec.embedding.ItemEmbedding"}}), "x")  # a re-export


def test_a_users_own_package_is_trusted_by_the_reading_command_line(tmp_path, monkeypatch):
    (tmp_path / "mycompany_readers.py").write_text("import os\ndef read(path):\n    return path\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = OmegaConf.create({"reader": {"_target_": "mycompany_readers.read"}})
    with pytest.raises(DataError, match="no trusted module"):
        check_targets(cfg, "x")
    check_targets(cfg, "x", TRUSTED_TARGETS + ("mycompany_readers.",))
    check_targets(cfg, "x", TRUSTED_TARGETS + ("mycompany_readers.read",))
    with pytest.raises(DataError, match="mycompany_readers.os is not a trusted module"):  # even their own package
        check_targets(OmegaConf.create({"r": {"_target_": "mycompany_readers.os.system"}}), "x",
                      TRUSTED_TARGETS + ("mycompany_readers.",))


def _tampered(run: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of ``run`` whose data reader is ``genrec.data.cache.os.system`` creating a file -> (copy, that file)."""
    copy = Path(shutil.copytree(run, tmp_path / "tampered"))
    marker = tmp_path / "the_config_ran_a_command"
    cfg = OmegaConf.load(copy / "config.yaml")
    cfg.data.reader = {"_target_": BYPASSES["module globals"], "command": f"touch {marker}"}
    (copy / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    return copy, marker


def test_the_collaborative_encoder_and_the_teacher_refuse_a_tampered_run(tiny_run, tmp_path):
    from genrec.training.builders import load_teacher
    from genrec.training.distill import DistillConfig
    from genrec.tokenize.encoders import CollaborativeEncoder

    run, marker = _tampered(tiny_run[0], tmp_path)
    with pytest.raises(DataError, match="data.reader._target_.*not a trusted callable"):
        CollaborativeEncoder(str(run)).encode(None)
    with pytest.raises(DataError, match="data.reader._target_.*not a trusted callable"):
        load_teacher(DistillConfig(teacher=str(run)), np.arange(5), 20)
    with pytest.raises(DataError, match="data.reader._target_.*not a trusted callable"):
        RunFolder(run).config()  # what genrec-stream resume_from= and genrec-train resume_from= read
    assert not marker.exists()
