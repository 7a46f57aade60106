"""Objects built from a resolved config: shared by the train and eval entry points."""
from __future__ import annotations

from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig

from genrec.data.datamodule import SequenceDataModule
from genrec.models.recommender import SequentialRecommender
from genrec.training.module import RetrievalTask

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def build_datamodule(cfg: DictConfig) -> SequenceDataModule:
    d = cfg.data
    return SequenceDataModule(reader=d.reader, preprocess=d.preprocess, max_len=d.max_len,
                              batch_size=d.batch_size, eval_batch_size=d.eval_batch_size,
                              num_workers=d.num_workers, cache_dir=d.cache_dir, seed=cfg.seed)


def build_task(cfg: DictConfig, num_items: int) -> RetrievalTask:
    m = cfg.model
    model = SequentialRecommender(instantiate(m.embedding, num_items=num_items), instantiate(m.encoder),
                                  similarity=m.similarity)
    return RetrievalTask(model, instantiate(m.loss), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay,
                         betas=tuple(cfg.optim.betas), ks=tuple(cfg.eval.ks),
                         exclude_history=cfg.eval.exclude_history)
