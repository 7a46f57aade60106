"""A run folder as data: what genrec-train writes and genrec-eval / -export / -tokenize read back, with the checks
that keep runs from being mixed up and keep a folder from running code.

Layout of a run folder (``runs/<data>-<model>/<time>/`` by default)::

    config.yaml          the resolved config the run trained with
    run.json             the run's identity (a random ID), written when the run starts; every checkpoint the run
                         writes carries it (genrec.dist.checkpoint.check_checkpoint)
    metrics.json         written when training ends: metrics, and the checkpoint they came from (file + sha256)
    checkpoints/         best.ckpt (best validation score), last.ckpt (resume point); files, or distributed
                         checkpoint folders for sharded runs
    logs/metrics.csv     the CSV log (appended to by a resumed run)
    tensorboard/  curves.png  train.log (Hydra's job log)

Trust model (docs/TRUST.md): a run folder is data. Checkpoints are read with ``torch.load(weights_only=True)``,
after :meth:`RunFolder.check_checkpoint` checked that they belong to the folder's run and did not change since;
every ``_target_`` of a ``config.yaml`` read back from a folder is resolved by :func:`genrec.trust.check_targets`
against :data:`genrec.trust.TRUSTED_TARGETS` (plus what the current command line allows) before anything is built.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from genrec.dist.checkpoint import check_checkpoint
from genrec.errors import DataError, UserError
from genrec.trust import TRUSTED_TARGETS, check_targets
from genrec.utils.integrity import update_with_file

CONFIG_FILE = "config.yaml"
RUN_FILE = "run.json"
METRICS_FILE = "metrics.json"
CHECKPOINT_DIR = "checkpoints"
#: what Hydra writes into a run folder before genrec starts (its job log is named by ``hydra.job.name``): a folder
#: holding only these holds no run yet
HYDRA_FILES = frozenset({".hydra", "train.log", "tokenize.log", "stream.log"})
def load_config(path: Path, allowed: tuple[str, ...] = TRUSTED_TARGETS) -> DictConfig:
    """A run's ``config.yaml``, checked by :func:`check_targets`."""
    try:
        cfg = OmegaConf.load(path)
    except (OSError, OmegaConfBaseException, ValueError, yaml.YAMLError) as err:  # e.g. a !!python/... tag
        raise DataError(path, f"cannot be read as a genrec config: {' '.join(str(err).split())}") from None
    if not isinstance(cfg, DictConfig):
        raise DataError(path, "expected a mapping of config keys")
    check_targets(cfg, path, allowed)
    return cfg


def results_file(cfg: DictConfig) -> Path | None:
    """Where ``results_name=<name>`` writes (``<results_dir>/<name>.json``), or ``None``; an existing file is refused
    unless ``overwrite_results=true``."""
    if not cfg.get("results_name"):
        return None
    path = Path(cfg.results_dir) / f"{cfg.results_name}.json"
    if path.exists() and not cfg.overwrite_results:
        raise UserError(f"results_name={cfg.results_name}: {path} exists; choose another name or set "
                        "overwrite_results=true")
    return path


def file_digest(path: Path) -> str:
    """sha256 of a checkpoint: of the file, or of a distributed checkpoint folder's files (names and contents, in
    sorted order)."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        update_with_file(digest, file)
    return digest.hexdigest()


class RunFolder:
    """One run folder (see the module doc). Creating the object touches nothing on disk."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT_DIR

    @classmethod
    def existing(cls, path: str | Path, key: str = "run_dir") -> "RunFolder":
        """The run folder at ``path``, which must hold a ``config.yaml``; else a :class:`UserError` naming ``key``
        (nothing is created)."""
        run = cls(path)
        if not run.config_path.is_file():
            what = "does not exist" if not run.path.exists() else f"holds no {CONFIG_FILE}"
            raise UserError(f"{key}={path}: {what}; expected a run folder written by genrec-train")
        return run

    def holds_run(self) -> bool:
        """Whether the folder holds anything besides Hydra's own files (:data:`HYDRA_FILES`)."""
        return self.path.is_dir() and any(p.name not in HYDRA_FILES for p in self.path.iterdir())

    def require_new(self) -> None:
        """Refuse to train into a folder that already holds a run."""
        if self.holds_run():
            raise UserError(f"{self.path} already holds a run ({', '.join(sorted(p.name for p in self.path.iterdir()))})"
                            f": continue it with resume_from={self.path}, or train into a new folder "
                            "(leave hydra.run.dir at its default, or set it to a folder that does not exist)")

    def config(self, allowed: tuple[str, ...] = TRUSTED_TARGETS) -> DictConfig:
        return load_config(self.config_path, allowed)

    def run_id(self) -> str | None:
        """The ID ``run.json`` gives the folder's run; ``None`` for a folder without one (written by a genrec older
        than run identities)."""
        if not self.run_file.exists():
            return None
        try:
            run_id = json.loads(self.run_file.read_text())["run_id"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise DataError(self.run_file, f"cannot be read as the run's identity: {err}") from None
        if not isinstance(run_id, str) or not run_id:
            raise DataError(self.run_file, f"expected a run ID (a string), got {run_id!r}", key="run_id")
        return run_id

    def start_run(self) -> str:
        """Give the run starting in this folder its identity: ``run.json`` with a new random ID (written atomically;
        kept when the folder has one already, a run that stopped before its first checkpoint). Returns the ID."""
        existing = self.run_id()
        if existing is not None:
            return existing
        run_id = uuid.uuid4().hex
        self.path.mkdir(parents=True, exist_ok=True)
        partial = self.run_file.with_name(RUN_FILE + ".partial")
        with open(partial, "w") as f:
            json.dump({"run_id": run_id}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, self.run_file)
        return run_id

    def check_checkpoint(self, path: str | Path) -> dict[str, Any]:
        """:func:`~genrec.dist.checkpoint.check_checkpoint` against this folder's run -> the checkpoint's meta."""
        return check_checkpoint(path, self.run_id())

    def metrics(self) -> dict[str, Any] | None:
        """``metrics.json``, or ``None`` while the run has not finished."""
        if not self.metrics_path.is_file():
            return None
        try:
            return json.loads(self.metrics_path.read_text())
        except (OSError, ValueError) as err:
            raise DataError(self.metrics_path, f"cannot be read as JSON: {err}") from None

    def checkpoint(self, name: str) -> Path:
        """The checkpoint ``name`` (``best`` or ``last``), checked before anything is built from it.

        ``best`` is the checkpoint ``metrics.json`` names, and its sha256 must be the one recorded when the
        metrics were written (a folder trained into twice, or a checkpoint replaced since, is refused). ``last`` is
        the resume point, also of an unfinished run. Either must belong to the folder's run and be unchanged since
        it was written (:meth:`check_checkpoint`)."""
        if name == "last":
            path = self.checkpoint_dir / "last.ckpt"
            if not path.exists():
                raise UserError(f"{path}: not found; the run has not saved a checkpoint yet")
            self.check_checkpoint(path)
            return path
        if name != "best":
            raise UserError(f"checkpoint={name}: expected best (the checkpoint metrics.json names) or last")
        metrics = self.metrics()
        if metrics is None:
            raise UserError(f"{self.metrics_path}: not found: the run has not finished (evaluate its resume point "
                            "with checkpoint=last, or resume it with genrec-train resume_from=<run folder>)")
        record = (metrics.get("checkpoints") or {}).get("best")
        if not record:
            raise DataError(self.metrics_path, "names no best checkpoint (written by an older genrec?): "
                                               "use checkpoint=last", key="checkpoints.best")
        path = self.path / record["file"]
        if not path.exists():
            raise UserError(f"{path}: not found, but {self.metrics_path} was computed from it")
        if file_digest(path) != record["sha256"]:
            raise UserError(f"{path} is not the checkpoint {self.metrics_path} was computed from (its sha256 "
                            "differs: the folder changed after training); retrain, or use checkpoint=last")
        self.check_checkpoint(path)
        return path
