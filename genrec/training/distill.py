"""Distillation from a trained ID-based run (SASRec, HSTU) into a generative recommender: the next-token loss plus
``weight`` x the cross-entropy between the teacher's distribution over its top items at every training position,
summed by code prefix, and the student's per-level softmax along the true target's codes
(:mod:`genrec.models.distill`); for a student with an item head, also ``item_head_weight`` x the cross-entropy
between those top items and the item head's softmax. The student's compute per step is that of plain training: the
distillation terms read the log-probabilities the training loss computes anyway. The teacher is frozen, in eval mode
(it draws no random numbers), not part of the student's state dict or checkpoints: a resumed run reads it again from
its run folder, which ``stage.teacher`` names (``stage=distill``, genrec/conf/stage).

A retrieval student (SASRec, HSTU: :class:`RetrievalDistillTask`) is taught the same teacher's top items at every
position through its softmax over every item, the term a generator's item head learns with ``item_head_weight``,
weighted by ``weight``: the ablation of a generator distilled into an ID model of its size."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from genrec.data.batch import JaggedBatch
from genrec.data.candidates import DrawnBatch
from genrec.errors import ConfigError, settings_from
from genrec.models.distill import distillation_loss, item_distillation_loss, level_targets, teacher_top_k
from genrec.models.generative import GenerativeRecommender
from genrec.models.recommender import SequentialRecommender
from genrec.training.generative import GenerativeTask, global_mean
from genrec.training.retrieval import RetrievalTask


@dataclass(frozen=True)
class DistillConfig:
    """The settings of a distillation stage (``stage.*`` of ``stage=distill``).

    Attributes:
        teacher: a genrec-train run folder of a retrieval model trained on the same dataset.
        checkpoint: its ``best`` (the checkpoint its metrics.json names) or ``last`` checkpoint.
        weight: weight of the distillation term (0: plain next-token training); for a retrieval student, of the
            cross-entropy between the teacher's top items and its softmax over every item.
        top_k: the teacher's items per position whose probabilities are distilled.
        temperature: the teacher's softmax temperature.
        item_head_weight: weight of the cross-entropy between the teacher's top items and the student's item head
            (0: the head learns from the true targets alone; a student without a head refuses a weight > 0).
    """

    teacher: str
    checkpoint: str = "best"
    weight: float = 1.0
    top_k: int = 100
    temperature: float = 1.0
    item_head_weight: float = 0.0

    @classmethod
    def from_stage(cls, values: dict[str, Any]) -> "DistillConfig":
        """From the stage's settings (``stage.*`` without ``_target_``, ``name`` and ``train_examples``); bad values
        are a :class:`ConfigError` naming ``stage.<key>``."""
        config = settings_from(cls, values, "stage")
        if config.weight < 0:
            raise ConfigError("stage.weight", f"got {config.weight}, expected a value >= 0")
        if config.top_k < 1:
            raise ConfigError("stage.top_k", f"got {config.top_k}, expected at least 1")
        if not config.temperature > 0:
            raise ConfigError("stage.temperature", f"got {config.temperature}, expected a positive number")
        if config.item_head_weight < 0:
            raise ConfigError("stage.item_head_weight", f"got {config.item_head_weight}, expected a value >= 0")
        if config.checkpoint not in ("best", "last"):
            raise ConfigError("stage.checkpoint", f"got {config.checkpoint!r}, expected best or last")
        return config


class FrozenTeacher:
    """A trained :class:`SequentialRecommender`, frozen and in eval mode. Deliberately not an ``nn.Module``
    attribute of the task: its weights stay out of the student's state dict, checkpoints and optimizer."""

    def __init__(self, model: SequentialRecommender, info: dict[str, Any]):
        self.model, self.info = model.eval().requires_grad_(False), info

    @torch.no_grad()
    def scores(self, batch: JaggedBatch, positions: torch.Tensor) -> torch.Tensor:
        """``(P, num_items + 1)`` the teacher's scores of every item after each of ``positions (P,)`` of the batch's
        inputs (padding column ``-inf``)."""
        self.model.to(batch.item_ids.device)
        scores = self.model.encode(batch)[positions] @ self.model.all_item_vectors().T
        scores[:, 0] = float("-inf")
        return scores


def _check_students_items(teacher: FrozenTeacher, num_items: int) -> None:
    if teacher.model.num_items != num_items:
        raise ConfigError("stage.teacher", f"the teacher scores {teacher.model.num_items} items, the student "
                                             f"{num_items}")


def _teacher_record(teacher: FrozenTeacher, distill: DistillConfig) -> dict[str, Any]:
    return {"teacher": teacher.info, "weight": distill.weight, "top_k": distill.top_k,
            "temperature": distill.temperature, "item_head_weight": distill.item_head_weight}


class DistillTask(GenerativeTask):
    """:class:`GenerativeTask` whose loss adds ``weight`` x the distillation term; logs ``train/nll`` and
    ``train/distill`` beside the total.

    Args:
        model: the student.
        teacher: the frozen teacher.
        distill: the settings.
        kwargs: :class:`GenerativeTask` settings.
    """

    def __init__(self, model: GenerativeRecommender, teacher: FrozenTeacher, distill: DistillConfig, **kwargs):
        super().__init__(model, **kwargs)
        _check_students_items(teacher, model.num_items)
        if distill.item_head_weight > 0 and not getattr(model, "has_item_head", False):
            raise ConfigError("stage.item_head_weight", f"got {distill.item_head_weight}, but the student has no "
                                                          "item head (model.generator.item_head=true)")
        self.teacher, self.distill = teacher, distill

    def training_loss(self, batch: JaggedBatch) -> torch.Tensor:
        targets = self.model.target_log_probs(batch)
        codes = self.model.sids.codes[targets.items]
        nll = targets.nll(codes)
        taught = targets.positions >= 0
        positions = targets.positions[taught]
        items, probs = teacher_top_k(self.teacher.scores(batch, positions), self.distill.top_k,
                                     self.distill.temperature)
        teacher_levels = level_targets(self.model.sids.codes, items, probs, codes[taught],
                                       self.model.sids.codebook_sizes)
        distill = distillation_loss([level[taught] for level in targets.levels], teacher_levels)
        terms = {"nll": nll, "distill": distill}
        loss = targets.loss(codes) + self.distill.weight * distill  # nll (+ the item head's loss) + distillation
        if self.distill.item_head_weight > 0:
            terms["distill_items"] = item_distillation_loss(targets.item_head[taught], items, probs)
            loss = loss + self.distill.item_head_weight * terms["distill_items"]
        for name, value in terms.items():
            self.log(f"train/{name}", value.detach(), on_step=True, on_epoch=True, batch_size=batch.batch_size,
                     sync_dist=True)
        return global_mean(loss, len(targets.items))

    def run_info(self) -> dict[str, Any]:
        return {**super().run_info(), "distill": _teacher_record(self.teacher, self.distill)}


class RetrievalDistillTask(RetrievalTask):
    """:class:`RetrievalTask` whose loss adds ``weight`` x the cross-entropy between the teacher's top items after
    every training position and the student's softmax over every item (:func:`item_distillation_loss`; the softmax
    of the full-softmax loss: scores divided by the loss's temperature); logs ``train/nll`` and
    ``train/distill_items``. One pass of the student per step, as in plain training.

    Args:
        model: the student.
        loss: its next-item loss (the ``train/nll`` term).
        teacher: the frozen teacher.
        distill: the settings (``item_head_weight`` must be 0: the student's item distribution is its output).
        kwargs: :class:`RetrievalTask` settings.
    """

    def __init__(self, model: SequentialRecommender, loss: torch.nn.Module, teacher: FrozenTeacher,
                 distill: DistillConfig, **kwargs):
        super().__init__(model, loss, **kwargs)
        _check_students_items(teacher, model.num_items)
        if distill.item_head_weight > 0:
            raise ConfigError("stage.item_head_weight", f"got {distill.item_head_weight}, but a retrieval student "
                                                          "has no item head: its softmax over the items is taught with "
                                                          "stage.weight")
        self.teacher, self.distill = teacher, distill

    def training_loss(self, batch: JaggedBatch | DrawnBatch) -> torch.Tensor:
        if isinstance(batch, DrawnBatch):  # the candidates the loader drew
            batch, item_ids = batch.batch, batch.candidate_ids
        else:
            item_ids = self.loss.item_ids(batch.target_ids, self.model.num_items)  # None: the whole table
        states = self.model.encode(batch)  # (N, D)
        vectors = self.model.all_item_vectors()  # (num_items + 1, D)
        nll = self.loss(states, batch.target_ids, item_ids, vectors if item_ids is None else vectors[item_ids])
        logits = (states / getattr(self.loss, "temperature", 1.0)) @ vectors.T
        logits[:, 0] = float("-inf")
        positions = torch.arange(len(batch.target_ids), device=states.device)
        items, probs = teacher_top_k(self.teacher.scores(batch, positions), self.distill.top_k,
                                     self.distill.temperature)
        distill = item_distillation_loss(logits.float().log_softmax(1), items, probs)
        for name, value in (("nll", nll), ("distill_items", distill)):
            self.log(f"train/{name}", value.detach(), on_step=True, on_epoch=True, batch_size=batch.batch_size,
                     sync_dist=True)
        return self.global_mean(nll + self.distill.weight * distill, batch)

    def run_info(self) -> dict[str, Any]:
        """The student's parameter count (to set beside a generator's: the distilled-SASRec ablation) and the
        distillation settings."""
        parameters = sum(p.numel() for p in self.model.parameters())
        return {**super().run_info(), "parameters": {"total": parameters, "trainable": parameters},
                "distill": _teacher_record(self.teacher, self.distill)}
