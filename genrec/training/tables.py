"""Dynamic embedding tables (:mod:`genrec.embedding.dynamic`) in a run's checkpoints.

A dynamic table can be larger than memory (its tier 2 is an embedded store on disk) and sharded over processes by
itself, so it does not travel inside Lightning's checkpoint file. Every checkpoint of a run that has dynamic tables
also writes a snapshot of them — every shard's tier 0, counters and admission state, and a consistent copy of its
store taken by the store's own mechanism — to ``<run>/checkpoints/tables/step-<global step>-<token>/`` (atomically,
before the checkpoint file that names it), and records that folder in the checkpoint (:data:`STATE_KEY`). The
token is new for every training process, so a resumed run never overwrites a snapshot an older checkpoint names;
checkpoints written at the same step by one process (``best.ckpt`` and ``last.ckpt`` after an epoch) share one
snapshot, and snapshots no checkpoint names are deleted after every epoch.

A resumed run (``fit``) and the evaluation of a checkpoint (``validate``/``test``: the best checkpoint's tables,
not the last step's) load the snapshot the checkpoint names; :func:`load_tables` does the same for genrec-eval and
genrec-export (one process: a sharded snapshot is re-partitioned on load). A snapshot carries the run ID of the
checkpoint that names it and its files' digests (:mod:`genrec.embedding.dynamic.checkpoint`), checked before it is
loaded: a damaged or foreign snapshot is one line naming its file in the run folder.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import lightning as L
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf
from torch import nn

from genrec.dist.checkpoint import read_meta, run_id_of
from genrec.embedding.dynamic import DynamicItemEmbedding
from genrec.embedding.dynamic.checkpoint import load_checkpoint, save_checkpoint
from genrec.embedding.dynamic.config import DynamicTableConfig
from genrec.errors import ConfigError, DataError

#: the checkpoint key naming the snapshot folder, relative to the checkpoint's folder
STATE_KEY = "genrec_dynamic_tables"
SNAPSHOTS_DIR = "tables"


def dynamic_tables(module: nn.Module) -> dict[str, DynamicItemEmbedding]:
    """Every dynamic table inside ``module``, by module name."""
    return {name: m for name, m in module.named_modules() if isinstance(m, DynamicItemEmbedding)}


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def close_tables(module: nn.Module) -> None:
    """Stop the tables' background threads and close their stores (a run that finished training)."""
    for table in dynamic_tables(module).values():
        table.close()


def check_table_config(cfg: DictConfig) -> None:
    """A dynamic item table's settings (``model.embedding``), checked before the data loads: a bad value is a
    :class:`ConfigError` naming its key (``model.embedding.capacity``)."""
    node = OmegaConf.select(cfg, "model.embedding")
    if node is None or node.get("_target_") not in ("genrec.embedding.dynamic.DynamicItemEmbedding",
                                                    f"{DynamicItemEmbedding.__module__}.DynamicItemEmbedding"):
        return
    settings = OmegaConf.to_container(node, resolve=True)
    for key in ("_target_", "feature"):
        settings.pop(key, None)
    try:
        config = DynamicTableConfig.build(settings.pop("dim", None), settings.pop("capacity", None), **settings)
    except ConfigError as err:
        raise ConfigError(f"model.{err.key}", str(err).split(": ", 1)[1]) from None


def private_stores(cfg: DictConfig) -> DictConfig:
    """``cfg`` with every dynamic table's store in a new temporary folder (removed at exit): a run read back for
    evaluation or export must not open, let alone empty, the store of the run it reads, which may still be
    training; its tables are loaded from the checkpoint's snapshot."""
    cfg = cfg.copy()
    store = OmegaConf.select(cfg, "model.embedding.store")
    if store is not None and store.get("path"):
        folder = tempfile.mkdtemp(prefix="genrec-store-")
        atexit.register(shutil.rmtree, folder, True)
        store.path = folder
    return cfg


def load_tables(module: nn.Module, checkpoint: str | Path) -> None:
    """Load the dynamic tables of ``module`` from the snapshot the checkpoint names (nothing to do without one)."""
    tables = dynamic_tables(module)
    meta = read_meta(checkpoint) if tables else {}
    if tables and STATE_KEY in meta:
        _load(tables, Path(checkpoint).parent / meta[STATE_KEY], checkpoint, run_id_of(meta))


def _load(tables: dict[str, DynamicItemEmbedding], folder: Path, checkpoint: str | Path, run_id: str | None) -> None:
    """Load the snapshot ``folder`` (of the run ``run_id``, which wrote ``checkpoint``) into ``tables``."""
    for module in tables.values():
        module.reset()  # a snapshot loads into fresh tables
    try:
        load_checkpoint({name: m.local_table for name, m in tables.items()}, folder, run_id)
    except DataError:
        raise  # names the snapshot's file already
    except (FileNotFoundError, ValueError) as err:
        raise DataError(folder, f"the dynamic tables of {checkpoint} cannot be loaded: {err}") from None


class DynamicTablesCheckpoint(Callback):
    """Writes and reads the snapshot of a run's dynamic tables beside each checkpoint (see the module doc).

    Args:
        checkpoint_dir: the run's ``checkpoints/`` folder.
    """

    def __init__(self, checkpoint_dir: str | Path):
        self.dir = Path(checkpoint_dir)
        self._token: str | None = None
        self._written: Path | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for module in dynamic_tables(pl_module).values():
            module.external_checkpoint = True  # its state dict holds a marker; the rows are saved here
        if self._token is None:
            self._token = trainer.strategy.broadcast(uuid.uuid4().hex[:8])  # the same on every process

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
                           ) -> None:
        tables = dynamic_tables(pl_module)
        if not tables:
            return
        folder = self.dir / SNAPSHOTS_DIR / f"step-{trainer.global_step}-{self._token}"
        if folder != self._written:  # the same decision on every process (the save is collective)
            # bound to the run ID genrec.training.resume.ResumeState (an earlier callback) put in the checkpoint
            save_checkpoint({name: m.local_table for name, m in tables.items()}, folder, _barrier,
                            trainer.is_global_zero, run_id_of(checkpoint))
            self._written = folder
        checkpoint[STATE_KEY] = str(folder.relative_to(self.dir))

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
                           ) -> None:
        """Resume (``fit``), or evaluate a checkpoint (``validate``/``test``): its tables with its weights."""
        if STATE_KEY in checkpoint:
            _load(dynamic_tables(pl_module), self.dir / checkpoint[STATE_KEY], self.dir / checkpoint[STATE_KEY],
                  run_id_of(checkpoint))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._delete_unnamed(trainer)  # before this epoch's checkpoints: those of the previous steps are written

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._delete_unnamed(trainer)

    def _delete_unnamed(self, trainer: L.Trainer) -> None:
        """Delete the snapshots no checkpoint in ``checkpoints/`` names."""
        root = self.dir / SNAPSHOTS_DIR
        if not trainer.is_global_zero or not root.exists():
            return
        named = set()
        for path in self.dir.glob("*.ckpt"):
            try:
                named.add(read_meta(path).get(STATE_KEY))
            except DataError:
                return  # a checkpoint being replaced right now: keep everything this time
        for folder in root.glob("step-*"):
            if "." not in folder.name and str(folder.relative_to(self.dir)) not in named:  # not .tmp/.old
                shutil.rmtree(folder)
