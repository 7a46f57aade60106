"""Training stages as one config group, ``stage=sft|dpo|sdpo|distill`` (genrec/conf/stage): each names by ``_target_``
the function here that builds its task from the run's model, its own settings and the run's context.

* :func:`next_token` (``sft``): next-item training of a retrieval model (``RetrievalTask``; TorchRec's pipelined
  variant with ``sharding.pipeline=sparse_dist``) or next-token training of a generative one (``GenerativeTask``);
  with ``init_from`` it is continued training, the control of the post-training stages.
* :func:`preference` (``dpo``, ``sdpo``): preference alignment of a generative model (``AlignTask``; the examples are
  mined by :mod:`genrec.training.preferences`).
* :func:`distillation` (``distill``): a trained retrieval run teaches the model (``DistillTask`` for a generator,
  ``RetrievalDistillTask`` for a retrieval model).

A stage's settings are its config node without ``_target_``, ``name`` and ``train_examples`` (which tells the data
module what a training example is for the stage: ``sequences`` for alignment, whatever the model trains on). Run
folders written before the group existed (``align:`` / ``distill:`` nodes) are read as the stage they describe
(:func:`stage_config`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn

from genrec.dist import ShardingConfig
from genrec.embedding import ItemEmbedding
from genrec.errors import ConfigError
from genrec.models.recommender import SequentialRecommender
from genrec.training.align import AlignConfig, AlignTask
from genrec.training.distill import DistillConfig, DistillTask, RetrievalDistillTask
from genrec.training.generative import GenerativeTask
from genrec.training.retrieval import PipelinedRetrievalTask, RetrievalTask
from genrec.training.task import RecommenderTask
from genrec.trust import resolve_target

#: a stage's keys that are not the settings of its task
STAGE_KEYS = ("_target_", "name", "train_examples")
#: the stage of a run folder that predates the group, by its ``align.loss``; ``distill.teacher`` means distill
LEGACY = {"dpo": "dpo", "sdpo": "sdpo"}


@dataclass(frozen=True)
class StageContext:
    """What a stage's task is built from besides the model and the stage's own settings.

    Attributes:
        cfg: the run's config.
        item_raw_ids: the dataset's raw item IDs (``(num_items + 1,)``; a teacher's items are checked against them).
        settings: :class:`~genrec.training.task.RecommenderTask` settings (optimizer, schedule, cut-offs...).
        loader: loads a distillation teacher: ``(DistillConfig, item_raw_ids, max_len, split) -> FrozenTeacher``.
    """

    cfg: DictConfig
    item_raw_ids: np.ndarray | None
    settings: dict[str, Any]
    loader: Callable[..., Any] | None = None


def stage_config(cfg: DictConfig) -> DictConfig:
    """The run's ``stage`` node; for a run folder written before the group existed, the stage its ``align`` /
    ``distill`` nodes describe."""
    if cfg.get("stage") is not None:
        return cfg.stage
    align, distill = cfg.get("align") or {}, cfg.get("distill") or {}
    if align.get("loss", "none") in LEGACY:
        node = {**OmegaConf.to_container(align, resolve=True), "name": LEGACY[align.loss],
                "_target_": "genrec.training.stages.preference", "train_examples": "sequences"}
    elif distill.get("teacher"):
        node = {**OmegaConf.to_container(distill, resolve=True), "name": "distill",
                "_target_": "genrec.training.stages.distillation"}
    else:
        node = {"name": "sft", "_target_": "genrec.training.stages.next_token"}
    return OmegaConf.create(node)


def stage_settings(stage: DictConfig) -> dict[str, Any]:
    """The stage's own settings: its node without :data:`STAGE_KEYS`."""
    values = OmegaConf.to_container(stage, resolve=True, throw_on_missing=True)
    return {k: v for k, v in values.items() if k not in STAGE_KEYS}


def _builder(stage: DictConfig) -> Callable[..., RecommenderTask]:
    return resolve_target(stage.get("_target_"), None, "config", "stage._target_")


def build_stage(model: nn.Module, cfg: DictConfig, context: StageContext) -> RecommenderTask:
    """The task of the run's stage for ``model`` (the function its ``_target_`` names)."""
    stage = stage_config(cfg)
    return _builder(stage)(model, stage, context)


def check_stage(cfg: DictConfig) -> None:
    """The run's stage checked before the data loads: its builder resolves and its settings parse (a
    :class:`ConfigError` naming ``stage.<key>``)."""
    stage = stage_config(cfg)
    parse = STAGE_SETTINGS.get(_builder(stage))
    if parse is not None:
        parse(stage_settings(stage))


def next_token(model: nn.Module, stage: DictConfig, context: StageContext) -> RecommenderTask:
    """``stage=sft``: the model's own training task."""
    cfg = context.cfg
    if not isinstance(model, SequentialRecommender):
        return GenerativeTask(model, **context.settings)
    loss = instantiate(cfg.model.loss)
    if cfg.get("sharding") and ShardingConfig.from_config(cfg.sharding).pipelined:
        if not isinstance(model.item_embedding, ItemEmbedding):
            raise ConfigError("sharding.pipeline", f"sparse_dist pipelines sharded static tables; model="
                                                   f"{cfg.model.name} has a {type(model.item_embedding).__name__}: "
                                                   "use embedding@model.embedding=static or sharding.pipeline=none")
        return PipelinedRetrievalTask(model, loss, seed=cfg.seed, gradient_clip_val=cfg.trainer.get("gradient_clip_val"),
                                      **context.settings)
    return RetrievalTask(model, loss, seed=cfg.seed, **context.settings)


def preference(model: nn.Module, stage: DictConfig, context: StageContext) -> AlignTask:
    """``stage=dpo|sdpo``: preference alignment of a generative model."""
    if isinstance(model, SequentialRecommender):
        raise ConfigError("stage", f"stage={stage.name} aligns a generative model's likelihood of items; "
                                   f"model={context.cfg.model.name} is a retrieval model")
    return AlignTask(model, AlignConfig.from_stage(stage_settings(stage)), seed=context.cfg.seed, **context.settings)


def distillation(model: nn.Module, stage: DictConfig, context: StageContext) -> RecommenderTask:
    """``stage=distill``: the run folder ``stage.teacher`` teaches the model."""
    cfg, distill = context.cfg, DistillConfig.from_stage(stage_settings(stage))
    if cfg.get("sharding") and cfg.sharding.get("type"):
        raise ConfigError("stage", f"sharding={cfg.sharding.type}: distillation trains unsharded models only "
                                   "(sharding=none)")
    teacher = context.loader(distill, context.item_raw_ids, cfg.data.max_len, cfg.data.get("split"))
    if isinstance(model, SequentialRecommender):
        return RetrievalDistillTask(model, instantiate(cfg.model.loss), teacher, distill, seed=cfg.seed,
                                    **context.settings)
    return DistillTask(model, teacher, distill, **context.settings)


#: a stage builder -> the parser of its settings (:func:`check_stage`)
STAGE_SETTINGS: dict[Callable[..., RecommenderTask], Callable[[dict[str, Any]], Any]] = {
    preference: AlignConfig.from_stage, distillation: DistillConfig.from_stage}
