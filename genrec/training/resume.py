"""Exact resume: what a checkpoint must hold besides weights and optimizer state so that a run killed at any point
and resumed from its last checkpoint ends bit-identical to the uninterrupted run.

* :class:`ResumeState` stores every random state (torch, CUDA, numpy, python; one per process) and the position in
  the epoch's training order; on resume it restores them right before the first training step, so nothing that
  runs in between (model building, the sanity check) can disturb them, and it drops the CSV log's rows of the
  steps that will be trained again.
* :class:`RunCheckpoint` is Lightning's ModelCheckpoint that overwrites its file (no ``best-v1.ckpt``) and keeps
  its best score when the run folder was moved or copied.
* :class:`LastCheckpoint` writes ``last.ckpt`` after every epoch and, if asked, every N training steps (for
  resuming mid-epoch).
* :class:`SealedCheckpointIO` writes every checkpoint file with the digest of its content
  (:func:`genrec.dist.checkpoint.seal`), and a full disk as one line naming the file.

Every checkpoint holds the run's ID (``run.json`` of the run folder, :meth:`genrec.runs.RunFolder.start_run`): a
reader refuses a checkpoint of another run (:func:`genrec.dist.checkpoint.check_checkpoint`).

The training order comes from :class:`~genrec.data.samplers.TrainBatchSampler` (a function of the seed and the
epoch), so the sampler's position is all the data loader needs.
"""
from __future__ import annotations

import logging
import random
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.distributed as dist
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, Checkpoint, ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from genrec.data.samplers import TrainBatchSampler
from genrec.dist.checkpoint import RUN_STATE_KEY, seal
from genrec.errors import writing
from genrec.training.loggers import RunCSVLogger

log = logging.getLogger("genrec.train")

STATE_KEY = RUN_STATE_KEY


def random_state() -> dict[str, Any]:
    """This process's random states, as tensors and plain values (loadable with ``weights_only=True``)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
            "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next}}


def set_random_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))


def _all_processes(value: Any) -> list[Any]:
    """``value`` of every process, in rank order (collective under a process group)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [value]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def _train_sampler(trainer: L.Trainer) -> TrainBatchSampler:
    sampler = getattr(trainer.train_dataloader, "batch_sampler", None)
    if not isinstance(sampler, TrainBatchSampler):
        raise TypeError(f"exact resume needs genrec's TrainBatchSampler as the training batch sampler, got "
                        f"{type(sampler).__name__}")
    return sampler


class ResumeState(Callback):
    """Saves and restores what exact resume needs beyond Lightning's own checkpoint (see the module doc).

    Args:
        run_id: the run's ID (its folder's ``run.json``; ``None`` for a folder written before genrec recorded one),
            stored in every checkpoint the run writes; rank 0's is used on every process.
    """

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id
        self._pending: dict[str, Any] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.run_id = trainer.strategy.broadcast(self.run_id)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
                           ) -> None:
        checkpoint[STATE_KEY] = {
            "run_id": self.run_id,
            "random": _all_processes(random_state()),
            "epoch": trainer.current_epoch,
            # batches of this epoch already trained on (all of them once the epoch's validation ran)
            "batches_done": trainer.fit_loop.epoch_loop.batch_progress.current.processed,
        }

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
                           ) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return  # validate/test load a checkpoint's weights only: nothing of the run's state changes
        state = checkpoint.get(STATE_KEY)
        if state is None:
            log.warning("the checkpoint holds no genrec resume state (written by an older genrec): random states "
                        "and the position in the epoch are not restored, the resumed run will differ")
            return
        self._pending = state  # the checkpoint's run is this one (checked before training: genrec.train._check)
        for logger in trainer.loggers:
            if isinstance(logger, RunCSVLogger) and trainer.is_global_zero:
                logger.truncate(checkpoint["global_step"])  # the steps from there on are trained (and logged) again

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        state, self._pending = self._pending, None
        if state is None:
            return
        _train_sampler(trainer).resume(state["epoch"], state["batches_done"])
        states = state["random"]
        if len(states) != trainer.world_size:
            log.warning("resuming with %d processes from a checkpoint written by %d: random states are not "
                        "restored, the resumed run will differ from an uninterrupted one", trainer.world_size,
                        len(states))
            return
        set_random_state(states[trainer.global_rank])


class SealedCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer (``torch.save`` to a temporary file moved into place) that first seals the
    checkpoint (:func:`genrec.dist.checkpoint.seal`: the sha256 of its whole content, run ID included, inside the
    file: a kill between two writes cannot leave a digest that disagrees with its file). A write that finds the
    disk or the file-size limit full is a one-line :class:`~genrec.errors.DiskFullError` naming the file; the
    previous checkpoint stays in place."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        seal(checkpoint)
        with writing(path):
            super().save_checkpoint(checkpoint, path, storage_options)


class RunCheckpoint(ModelCheckpoint):
    """ModelCheckpoint that overwrites its file instead of writing ``best-v1.ckpt`` and, on resume, keeps the best
    score and paths of a checkpoint written in another folder (a moved or copied run) by rebasing them onto this
    one's ``checkpoints/`` (Lightning drops them when the folder differs)."""

    def __init__(self, **kwargs: Any):
        super().__init__(enable_version_counter=False, **kwargs)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        with warnings.catch_warnings():  # a resumed run's checkpoints/ is not empty, as it should be
            warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
            super().setup(trainer, pl_module, stage)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        def rebase(path: str) -> str:
            return str(Path(self.dirpath) / Path(path).name) if path else path

        state = dict(state_dict, dirpath=self.dirpath)
        for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
            if key in state:
                state[key] = rebase(state[key])
        if "best_k_models" in state:
            state["best_k_models"] = {rebase(k): v for k, v in state["best_k_models"].items()}
        super().load_state_dict(state)


class LastCheckpoint(Checkpoint):
    """Writes ``<dirpath>/last.ckpt``, the resume point: at the end of every training epoch (after validation, early
    stopping and the best checkpoint were updated: Lightning runs checkpoint callbacks last, this one after
    :class:`RunCheckpoint` when listed after it) and, with ``every_n_steps``, every that many training steps.

    (Lightning's own ``save_last`` writes ``last.ckpt`` only when a top-k checkpoint was saved in the same step, so
    an epoch that does not improve the best score would leave it behind.)"""

    def __init__(self, dirpath: str | Path, every_n_steps: int = 0):
        if every_n_steps < 0:
            raise ValueError(f"every_n_steps must be >= 0, got {every_n_steps}")
        self.path, self.every_n_steps = Path(dirpath) / "last.ckpt", every_n_steps

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # the epoch's last batch is left to on_train_epoch_end (its validation comes first)
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0 \
                and not trainer.fit_loop.epoch_loop.done:
            trainer.save_checkpoint(self.path, weights_only=False)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.save_checkpoint(self.path, weights_only=False)  # the whole training state, not the weights only
