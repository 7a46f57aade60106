"""Objects built from a resolved config, shared by the CLIs: the data module, the task of ``cfg.model`` (retrieval
or generative, chosen by ``model.kind``) and a trained run loaded back from its folder."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig

from genrec.data.datamodule import SequenceDataModule
from genrec.dist.checkpoint import load_weights
from genrec.errors import ConfigError
from genrec.models.recommender import SequentialRecommender
from genrec.runs import TRUSTED_TARGETS, RunFolder
from genrec.tokenize.sid_table import SIDTable
from genrec.training.generative import GenerativeTask
from genrec.training.module import RetrievalTask
from genrec.training.tables import load_tables, private_stores
from genrec.training.task import RecommenderTask


def build_datamodule(cfg: DictConfig) -> SequenceDataModule:
    d = cfg.data
    return SequenceDataModule(reader=d.reader, preprocess=d.preprocess, max_len=d.max_len,
                              batch_size=d.batch_size, eval_batch_size=d.eval_batch_size,
                              num_workers=d.num_workers, cache_dir=d.cache_dir, seed=cfg.seed,
                              train_examples=cfg.model.get("train_examples", "sequences"),
                              bucket_by_length=cfg.model.get("bucket_by_length", False))


def load_sid_table(cfg: DictConfig, item_raw_ids: np.ndarray) -> SIDTable:
    """The table at ``cfg.sid_table``, checked to hold exactly the dataset's items in its dense order."""
    if not cfg.get("sid_table"):
        raise ConfigError("sid_table", f"model={cfg.model.name} generates semantic IDs; set sid_table=<a folder "
                                       "written by genrec-tokenize for this dataset>")
    table = SIDTable.load(cfg.sid_table)
    table.require_items(item_raw_ids, source=f"sid_table={cfg.sid_table}")
    return table


def _task_settings(cfg: DictConfig) -> dict:
    return {"lr": cfg.optim.lr, "weight_decay": cfg.optim.weight_decay, "betas": tuple(cfg.optim.betas),
            "warmup_steps": cfg.optim.get("warmup_steps", 0), "ks": tuple(cfg.eval.ks),
            "exclude_history": cfg.eval.exclude_history}


def _retrieval_task(cfg: DictConfig, num_items: int, item_raw_ids: np.ndarray | None) -> RetrievalTask:
    m = cfg.model
    model = SequentialRecommender(instantiate(m.embedding, num_items=num_items), instantiate(m.encoder),
                                  similarity=m.similarity)
    return RetrievalTask(model, instantiate(m.loss), **_task_settings(cfg))


def _generative_task(cfg: DictConfig, num_items: int, item_raw_ids: np.ndarray | None) -> GenerativeTask:
    m = cfg.model
    if item_raw_ids is None or len(item_raw_ids) != num_items + 1:
        raise ValueError(f"model={m.name}: build_task needs the dataset's {num_items + 1} item_raw_ids")
    if cfg.get("sharding") and cfg.sharding.get("type"):
        raise ConfigError("sharding", f"sharding={cfg.sharding.type}: model={m.name} has no sharded tables (its "
                                      "token tables are small); train it with sharding=none (trainer.devices > 1: "
                                      "Lightning DDP)")
    table = load_sid_table(cfg, item_raw_ids)
    parts = {"sid_table": table, **m.decoding}
    if "backbone" in m:  # decoder-only: sequences of (history + next item) tokens after a start token
        parts["backbone"] = instantiate(m.backbone, max_len=(cfg.data.max_len + 1) * table.num_levels)
    # built by a partial: Hydra would turn the SIDTable dataclass into a config node
    model = instantiate(m.generator, _partial_=True)(**parts)
    return GenerativeTask(model, sid_table_folder=str(cfg.sid_table), **_task_settings(cfg))


#: ``model.kind`` -> the builder of its task
TASK_BUILDERS: dict[str, Callable[..., RecommenderTask]] = {"retrieval": _retrieval_task,
                                                              "generative": _generative_task}


def build_task(cfg: DictConfig, num_items: int, item_raw_ids: np.ndarray | None = None) -> RecommenderTask:
    """The LightningModule of ``cfg.model``; generative models need the dataset's ``item_raw_ids`` to check their
    SID table."""
    kind = cfg.model.get("kind", "retrieval")
    if kind not in TASK_BUILDERS:
        raise ConfigError("model.kind", f"got {kind!r}, expected one of {sorted(TASK_BUILDERS)}")
    return TASK_BUILDERS[kind](cfg, num_items, item_raw_ids)


def load_run(run_dir: str | Path, checkpoint: str | Path = "best", allowed: tuple[str, ...] = TRUSTED_TARGETS):
    """A trained run read back from its folder -> (its config, the data module set up, its task with the
    checkpoint's weights, in eval mode). ``checkpoint``: ``best``, ``last`` (checked by :meth:`RunFolder.checkpoint`
    before the data loads) or a path :meth:`RunFolder.checkpoint` already returned; ``allowed``: the ``_target_``
    prefixes the run's config may name."""
    run = RunFolder.existing(run_dir)
    cfg = run.config(allowed)
    path = checkpoint if isinstance(checkpoint, Path) else run.checkpoint(checkpoint)
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    task = build_task(private_stores(cfg), datamodule.data.num_items, datamodule.data.item_raw_ids)
    load_weights(path, task)  # a Lightning file, or a distributed checkpoint folder of any world size
    load_tables(task, path)  # dynamic embedding tables, from the snapshot beside the checkpoint
    return cfg, datamodule, task.eval()
