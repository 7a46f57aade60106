"""Objects built from a resolved config: shared by the train and eval entry points."""
from __future__ import annotations

import lightning as L
import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig

from genrec.data.datamodule import SequenceDataModule
from genrec.models.recommender import SequentialRecommender
from genrec.tokenize.sid_table import SIDTable
from genrec.training.generative import GenerativeTask
from genrec.training.module import RetrievalTask


def is_generative(cfg: DictConfig) -> bool:
    """Whether ``cfg.model`` generates semantic IDs (``model.kind: generative``) rather than scoring item IDs."""
    return cfg.model.get("kind", "retrieval") == "generative"


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
        raise ValueError(f"sid_table: model={cfg.model.name} generates semantic IDs; set sid_table=<a folder written "
                         "by genrec-tokenize for this dataset>")
    table = SIDTable.load(cfg.sid_table)
    table.require_items(item_raw_ids, source=f"sid_table={cfg.sid_table}")
    return table


def build_task(cfg: DictConfig, num_items: int, item_raw_ids: np.ndarray | None = None) -> L.LightningModule:
    """The LightningModule of ``cfg.model``; generative models need the dataset's ``item_raw_ids`` to check their
    SID table."""
    m = cfg.model
    if is_generative(cfg):
        if item_raw_ids is None or len(item_raw_ids) != num_items + 1:
            raise ValueError(f"model={m.name}: build_task needs the dataset's {num_items + 1} item_raw_ids")
        if cfg.get("sharding") and cfg.sharding.get("type"):
            raise ValueError(f"sharding={cfg.sharding.type}: model={m.name} has no sharded tables (its token "
                             "tables are small); train it with sharding=none (trainer.devices > 1: Lightning DDP)")
        table = load_sid_table(cfg, item_raw_ids)
        parts = {"sid_table": table, **m.decoding}
        if "backbone" in m:  # decoder-only: sequences of (history + next item) tokens after a start token
            parts["backbone"] = instantiate(m.backbone, max_len=(cfg.data.max_len + 1) * table.num_levels)
        # built by a partial: Hydra would turn the SIDTable dataclass into a config node
        return GenerativeTask(instantiate(m.generator, _partial_=True)(**parts), lr=cfg.optim.lr,
                              weight_decay=cfg.optim.weight_decay, betas=tuple(cfg.optim.betas),
                              warmup_steps=cfg.optim.get("warmup_steps", 0), ks=tuple(cfg.eval.ks),
                              exclude_history=cfg.eval.exclude_history)
    model = SequentialRecommender(instantiate(m.embedding, num_items=num_items), instantiate(m.encoder),
                                  similarity=m.similarity)
    return RetrievalTask(model, instantiate(m.loss), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay,
                         betas=tuple(cfg.optim.betas), ks=tuple(cfg.eval.ks),
                         exclude_history=cfg.eval.exclude_history)
