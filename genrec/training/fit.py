"""The Lightning Trainer of a run, and the checks of the training config that run before anything expensive.

:func:`check_train_config` checks the value types of the keys genrec reads and every ``trainer.*`` key against
``lightning.Trainer``'s signature, so ``trainer.max_epochs=abc`` is a one-line error naming the key, not a
traceback after the data was loaded. :func:`build_trainer` builds the Trainer with the run's callbacks and loggers
(config groups ``callbacks`` and ``logger``) plus what genrec always adds: telemetry (unless
``telemetry.enabled=false``), the best and last checkpoints and the exact-resume state.
"""
from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.loggers import Logger, TensorBoardLogger
from omegaconf import DictConfig, OmegaConf

from genrec.dist import ShardingConfig, TorchRecStrategy
from genrec.errors import ConfigError
from genrec.runs import CHECKPOINT_DIR, RunFolder
from genrec.training.fsdp import FSDPConfig, FSDPStrategy
from genrec.training.loggers import TrackerRuns, read_continuations
from genrec.training.prefetch import Prefetch
from genrec.training.resume import LastCheckpoint, ResumeState, RunCheckpoint, SealedCheckpointIO
from genrec.training.tables import DynamicTablesCheckpoint
from genrec.training.task import SCHEDULES
from genrec.training.telemetry import Telemetry

#: value types of the training keys genrec reads (``None`` allowed where listed), checked before the data loads
TRAIN_KEYS: dict[str, tuple[type, ...]] = {
    "seed": (int,), "threads": (int, type(None)), "optim.lr": (float,), "optim.weight_decay": (float,),
    "optim.betas": (list,), "optim.warmup_steps": (int,), "optim.schedule": (str,), "eval.ks": (list,),
    "eval.exclude_history": (bool,), "eval.monitor": (str,),
    "data.max_len": (int,), "data.batch_size": (int,), "data.eval_batch_size": (int,), "data.num_workers": (int,),
    "checkpoint_every_n_steps": (int,), "results_name": (str, type(None)), "overwrite_results": (bool,),
    "resume_from": (str, type(None)), "init_from": (str, type(None)), "model.dim": (int,),
    "telemetry.enabled": (bool,), "telemetry.every_n_steps": (int,), "telemetry.nvml": (bool,),
    **{f"model.{part}{size}": (int,) for part in ("encoder.", "backbone.", "generator.")
       for size in ("num_layers", "num_heads")},
}
#: of those, the ones that must be positive, and the ones that must not be negative
POSITIVE = {"optim.lr", "data.max_len", "data.batch_size", "data.eval_batch_size", "model.dim",
            "telemetry.every_n_steps", *(key for key in TRAIN_KEYS if key.endswith(("num_layers", "num_heads")))}
NON_NEGATIVE = {"optim.weight_decay", "optim.warmup_steps", "data.num_workers", "checkpoint_every_n_steps"}
TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list",
              dict: "a mapping", type(None): "null"}


def _is(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _fits(value: Any, hint: Any) -> bool:
    """Whether a config value (plain YAML types) fits a type annotation of ``lightning.Trainer``; annotations of
    other classes (an Accelerator object, a timedelta) cannot come from YAML and do not match."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return True
    if origin is typing.Union:
        return any(_fits(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if origin in (list, tuple, typing.Sequence, typing.Iterable) or hint in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin in (dict, typing.Mapping) or hint is dict:
        return isinstance(value, dict)
    if hint is type(None):
        return value is None
    if isinstance(hint, type):
        return _is(value, hint)
    return True  # a forward reference or an unusual construct: Lightning checks it


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        names = [_describe(a) for a in args if _describe(a)]
        return " or ".join(dict.fromkeys(names))
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if hint in TYPE_NAMES:
        return TYPE_NAMES[hint]
    return ""


def check_trainer_arguments(kwargs: dict[str, Any]) -> None:
    """Every ``trainer.*`` key is an argument of ``lightning.Trainer`` and its value fits the annotation."""
    parameters = inspect.signature(L.Trainer.__init__).parameters
    hints = typing.get_type_hints(L.Trainer.__init__)
    for key, value in kwargs.items():
        if key not in parameters or key == "self":
            raise ConfigError(f"trainer.{key}", "not an argument of lightning.Trainer")
        if key in hints and not _fits(value, hints[key]):
            raise ConfigError(f"trainer.{key}", f"got {value!r}, expected {_describe(hints[key]) or hints[key]}")


def check_train_config(cfg: DictConfig) -> None:
    """The checks that need no data: value types and the trainer's arguments."""
    for key, kinds in TRAIN_KEYS.items():
        value = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        if value is None and OmegaConf.select(cfg, key, default="<absent>") == "<absent>":
            continue  # not in this config (e.g. a model without model.dim)
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        if not any(_is(value, kind) for kind in kinds):
            raise ConfigError(key, f"got {value!r}, expected " + " or ".join(TYPE_NAMES[k] for k in kinds))
        if key in POSITIVE and value <= 0:
            raise ConfigError(key, f"got {value!r}, expected a positive value")
        if key in NON_NEGATIVE and value < 0:
            raise ConfigError(key, f"got {value!r}, expected a value >= 0")
    check_trainer_arguments(OmegaConf.to_container(cfg.trainer, resolve=True))
    _check_lists(cfg)
    _check_schedule(cfg)
    _check_validation(cfg)


def _check_lists(cfg: DictConfig) -> None:
    """``optim.betas``: two numbers in [0, 1); ``eval.ks``: positive cut-offs."""
    betas = OmegaConf.select(cfg, "optim.betas", default=None)
    if betas is not None and (len(betas) != 2 or not all(_is(b, float) and 0 <= b < 1 for b in betas)):
        raise ConfigError("optim.betas", f"got {list(betas)!r}, expected two numbers in [0, 1) (Adam's decay rates)")
    ks = OmegaConf.select(cfg, "eval.ks", default=None)
    if ks is not None and (not ks or not all(_is(k, int) and k > 0 for k in ks)):
        raise ConfigError("eval.ks", f"got {list(ks)!r}, expected a non-empty list of positive cut-offs, e.g. [5, 10]")


def _check_validation(cfg: DictConfig) -> None:
    """The epochs allow a validation pass: the best checkpoint it picks is what the run tests."""
    epochs, every = cfg.trainer.get("max_epochs", -1), cfg.trainer.get("check_val_every_n_epoch", 1)
    if epochs == 0:
        raise ConfigError("trainer.max_epochs", "got 0: a run needs at least one epoch and a validation pass to "
                                                "have a best checkpoint to test (-1: no epoch limit)")
    if epochs not in (None, -1) and isinstance(every, int) and every > epochs:
        raise ConfigError("trainer.check_val_every_n_epoch", f"got {every}, more than trainer.max_epochs={epochs}: "
                                                             "no validation would run, so no best checkpoint to test")


def _check_schedule(cfg: DictConfig) -> None:
    """``optim.schedule`` is known, and a decaying one has a last step to decay to."""
    schedule = cfg.optim.get("schedule", "constant")
    if schedule not in SCHEDULES:
        raise ConfigError("optim.schedule", f"got {schedule!r}, expected one of {', '.join(SCHEDULES)}")
    unbounded = all(cfg.trainer.get(key, -1) in (None, -1) for key in ("max_epochs", "max_steps"))
    if schedule != "constant" and unbounded:
        raise ConfigError("optim.schedule", f"{schedule} decays to 0 at the run's last step: set trainer.max_epochs "
                                            "or trainer.max_steps")


def trainer_arguments(cfg: DictConfig) -> dict[str, Any]:
    """``cfg.trainer`` as keyword arguments; with ``sharding.type`` set, the strategy is genrec's
    :class:`TorchRecStrategy` (tables sharded, dense part data-parallel), even in one process; with
    ``fsdp.enabled``, Lightning's ModelParallelStrategy (FSDP2, genrec/training/fsdp.py)."""
    kwargs = OmegaConf.to_container(cfg.trainer, resolve=True)
    fsdp = FSDPConfig.from_config(cfg.get("fsdp"))
    if fsdp.enabled:
        if kwargs.get("strategy", "auto") != "auto":
            raise ConfigError("trainer.strategy", f"fsdp=full trains with Lightning's ModelParallelStrategy: leave "
                                                  f"trainer.strategy at auto (got {kwargs['strategy']!r})")
        if cfg.get("sharding") and cfg.sharding.get("type"):
            raise ConfigError("fsdp", "fsdp=full shards a generative model's dense backbone; sharding= shards "
                                      "TorchRec tables: choose one")
        kwargs["strategy"] = FSDPStrategy(fsdp, kwargs.get("devices", 1))
        return kwargs
    sharding = ShardingConfig.from_config(cfg.sharding)
    if sharding.enabled:
        if kwargs.get("strategy", "auto") != "auto":
            raise ConfigError("trainer.strategy", f"sharding={sharding.type} trains with genrec's TorchRecStrategy: "
                                                  f"leave trainer.strategy at auto (got {kwargs['strategy']!r})")
        kwargs["strategy"] = TorchRecStrategy(sharding)
        if sharding.pipelined:  # the pipelined task clips its own gradients (it optimises manually)
            kwargs.pop("gradient_clip_val", None)
    return kwargs


def build_loggers(cfg: DictConfig, run_dir: Path, resume_step: int | None) -> dict[str, tuple[Logger, DictConfig]]:
    """The loggers of ``cfg.logger`` by name, with their config nodes, each built with ``save_dir=run_dir``. A
    resumed run's loggers continue what the first process started: its TensorBoard log hides the events written
    after the checkpoint (``purge_step``), its trackers continue their runs (``<run>/trackers.json``, see
    :class:`~genrec.training.loggers.TrackerRuns`)."""
    continuations = read_continuations(run_dir) if resume_step is not None else {}
    loggers = {}
    for name, node in (cfg.get("logger") or {}).items():
        extra = dict(continuations.get(name, {}))
        if resume_step is not None and node.get("_target_") == f"{TensorBoardLogger.__module__}.TensorBoardLogger":
            extra["purge_step"] = resume_step
        loggers[name] = (instantiate(node, save_dir=str(run_dir), **extra), node)
    return loggers


def build_trainer(cfg: DictConfig, run_dir: Path, resume_step: int | None = None
                  ) -> tuple[L.Trainer, RunCheckpoint]:
    """The Trainer of a run in ``run_dir`` (no data needed) and its best-checkpoint callback.

    Checkpoints: ``best.ckpt`` (best ``val/<eval.monitor>``) and ``last.ckpt`` (every validation, and every
    ``checkpoint_every_n_steps`` training steps when set), both overwritten in place; dynamic embedding tables are
    snapshotted beside them (:mod:`genrec.training.tables`). Telemetry is added here, not through the ``callbacks``
    group, so that every run has it (``callbacks=none`` keeps it) and ``metrics.json`` always has its summary."""
    monitor = f"val/{cfg.eval.monitor}"
    checkpoints = run_dir / CHECKPOINT_DIR
    best = RunCheckpoint(dirpath=checkpoints, filename="best", monitor=monitor, mode="max", save_top_k=1)
    callbacks = [instantiate(node) for node in (cfg.get("callbacks") or {}).values()]
    telemetry = cfg.get("telemetry")
    if telemetry is not None and telemetry.enabled:
        callbacks.append(Telemetry(telemetry.every_n_steps, telemetry.nvml))
    loggers = build_loggers(cfg, run_dir, resume_step)
    callbacks.append(TrackerRuns(run_dir, loggers, OmegaConf.to_container(cfg, resolve=True),
                                 resumed=resume_step is not None))
    # ResumeState before DynamicTablesCheckpoint: the tables' snapshot is bound to the run ID it puts in the checkpoint
    callbacks += [ResumeState(RunFolder(run_dir).run_id()), DynamicTablesCheckpoint(checkpoints), best,
                  LastCheckpoint(checkpoints, cfg.checkpoint_every_n_steps)]
    if OmegaConf.select(cfg, "model.embedding.prefetch_depth", default=0):
        callbacks.append(Prefetch(cfg.checkpoint_every_n_steps))
    try:
        trainer = L.Trainer(**trainer_arguments(cfg), callbacks=callbacks, default_root_dir=run_dir,
                            logger=[logger for logger, _ in loggers.values()], plugins=[SealedCheckpointIO()])
    except (MisconfigurationException, ValueError, TypeError) as err:
        raise ConfigError("trainer", " ".join(str(err).split())) from None
    return trainer, best
