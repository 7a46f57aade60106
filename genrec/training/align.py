"""Preference alignment of a generative recommender after next-token training (SFT): DPO and S-DPO.

A stage starts from an SFT run's weights (``init_from=<run folder>``) with ``align=dpo`` or ``align=sdpo``. Its
preference data comes from the training split only (:func:`preference_examples`): for every training user, the
prompt is the user's training part without its last item, the chosen item is that last training item (never a
validation or test item), and the ``K`` rejected items are drawn by training-split popularity or taken from the SFT
model's own beam (its most likely wrong items, "hard negatives"), never the chosen item or one of the user's
training items.

The reference model is the SFT model itself, frozen: at the start of the stage (before the first step, while the
policy still equals it) the task computes ``log pi_ref`` of every user's chosen and rejected items once and caches
them with the negatives; nothing else of the reference is kept. The cache is saved in every checkpoint, so a
resumed stage reads it back instead of recomputing it from weights that have moved on.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from genrec.data.batch import JaggedBatch, TrainSequences, collate
from genrec.data.schema import SequenceData
from genrec.errors import ConfigError, settings_from
from genrec.eval.baselines import item_popularity
from genrec.models.generative import GenerativeRecommender
from genrec.models.preference import LOSSES, preference_loss
from genrec.training.generative import GenerativeTask, global_mean

log = logging.getLogger("genrec.train")

NEGATIVE_SOURCES = ("popularity", "beam")
SFT_TARGETS = ("chosen", "sequence")
CHECKPOINT_KEY = "genrec_preferences"


@dataclass(frozen=True)
class AlignConfig:
    """``align.*`` (conf/align): ``loss`` none | dpo | sdpo and its settings.

    Attributes:
        loss: ``dpo`` (the mean over the ``K`` chosen/rejected pairs) or ``sdpo`` (one softmax over all of them).
        beta: the reward temperature β.
        num_negatives: rejected items per example ``K``.
        negatives: ``popularity`` (drawn ∝ training-split counts) or ``beam`` (the SFT model's top wrong items).
        sft_weight: weight of a next-token loss added to the preference loss (0: none).
        sft_target: what that next-token loss covers: ``chosen`` (the chosen item's codes only) or ``sequence``
            (every position of the training sequence: the loss that continued SFT, the stage's control, trains on).
        disable_dropout: train the policy without dropout, so that its log-probabilities are comparable with the
            reference's (computed in eval mode), as TRL's DPO does by default.
    """

    loss: str
    beta: float = 0.1
    num_negatives: int = 1
    negatives: str = "popularity"
    sft_weight: float = 0.0
    sft_target: str = "chosen"
    disable_dropout: bool = True

    @classmethod
    def from_config(cls, node: DictConfig | None) -> "AlignConfig | None":
        """The stage's settings, or ``None`` for ``align=none``; bad values are a :class:`ConfigError`."""
        if node is None or node.get("loss", "none") == "none":
            return None
        values = OmegaConf.to_container(node, resolve=True)
        values.pop("name", None)
        config = settings_from(cls, values, "align")
        if config.loss not in LOSSES:
            raise ConfigError("align.loss", f"got {config.loss!r}, expected none or one of {LOSSES}")
        if config.negatives not in NEGATIVE_SOURCES:
            raise ConfigError("align.negatives", f"got {config.negatives!r}, expected one of {NEGATIVE_SOURCES}")
        if not config.beta > 0:
            raise ConfigError("align.beta", f"got {config.beta}, expected a positive number")
        if config.num_negatives < 1:
            raise ConfigError("align.num_negatives", f"got {config.num_negatives}, expected at least 1")
        if config.sft_weight < 0:
            raise ConfigError("align.sft_weight", f"got {config.sft_weight}, expected a value >= 0")
        if config.sft_target not in SFT_TARGETS:
            raise ConfigError("align.sft_target", f"got {config.sft_target!r}, expected one of {SFT_TARGETS}")
        return config


@dataclass
class PreferenceExamples:
    """One preference example per training user (``U`` users), from the training split only.

    Attributes:
        dataset: the users' training sequences (:class:`TrainSequences`: the prompt is an example's input items).
        users: ``(U,)`` dense user IDs, in dataset order.
        chosen: ``(U,)`` each user's last training item (the input sequence's last target).
        popularity: ``(num_items + 1,)`` training-split counts.
    """

    dataset: TrainSequences
    users: np.ndarray
    chosen: np.ndarray
    popularity: np.ndarray

    def batches(self, batch_size: int):
        """``(indices, JaggedBatch)`` of the examples in order; ``seen_ids`` holds each user's training items (the
        whole training part, also beyond a truncated prompt), which the negatives leave out."""
        data = self.dataset.data
        for start in range(0, len(self.users), batch_size):
            examples = [self.dataset[i] for i in range(start, min(start + batch_size, len(self.users)))]
            for e in examples:
                e.seen = data.item_ids[data.offsets[e.user]:data.valid_at[e.user]]
            yield np.arange(start, start + len(examples)), collate(examples)


def preference_examples(data: SequenceData, max_len: int) -> PreferenceExamples:
    """The examples of every user with a training sequence (at least two training items), from the training parts
    (:class:`SequenceData`'s split) only."""
    dataset = TrainSequences(data, max_len)
    chosen = data.item_ids[data.valid_at[dataset.users] - 1]  # the last training item
    return PreferenceExamples(dataset, dataset.users.copy(), chosen, item_popularity(data))


def popularity_negatives(examples: PreferenceExamples, k: int, seed: int,
                         fill: np.ndarray | None = None) -> np.ndarray:
    """``(U, k)`` items drawn ∝ training popularity without replacement per user, never the chosen item nor one of
    the user's training items; ``fill (U, k)`` (0 = empty) keeps its non-zero entries and only the rest is drawn."""
    rng = np.random.default_rng([seed, 0x5D90])
    cdf = np.cumsum(examples.popularity / examples.popularity.sum())
    out = np.zeros((len(examples.users), k), dtype=np.int64) if fill is None else fill.copy()
    data = examples.dataset.data
    for row, user in enumerate(examples.users):
        have = [int(i) for i in out[row] if i > 0]
        banned = set(data.item_ids[data.offsets[user]:data.valid_at[user]].tolist()) | set(have)
        while len(have) < k:
            for item in np.searchsorted(cdf, rng.random(4 * k) * cdf[-1], side="right").tolist():
                if item not in banned:
                    have.append(item)
                    banned.add(item)
                    if len(have) == k:
                        break
        out[row] = have
    return out


@torch.no_grad()
def beam_negatives(model: GenerativeRecommender, examples: PreferenceExamples, k: int, batch_size: int,
                   device: torch.device) -> np.ndarray:
    """``(U, k)`` the model's ``k`` most likely items for each prompt other than the chosen item and the user's
    training items (0 where the beam found fewer)."""
    out = np.zeros((len(examples.users), k), dtype=np.int64)
    for rows, batch in examples.batches(batch_size):
        result = model.generate(batch.to(device), beam=max(model.beam, k), top_k=k, exclude_history=True)
        out[rows] = result.items.cpu().numpy()
    return out


def disable_dropout(model: nn.Module) -> None:
    """Every ``nn.Dropout`` of ``model`` to ``p = 0``."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


class AlignTask(GenerativeTask):
    """Trains a generative recommender with DPO or S-DPO on preference examples of the training split; evaluates
    like :class:`GenerativeTask`. Logged per step: the loss, the mean chosen and rejected rewards, their margin,
    the reward accuracy and ``train/chosen_log_ratio`` (``log pi - log pi_ref`` of the chosen item: negative when
    the chosen item's likelihood falls, DPO's known failure); after testing, the same statistics of the tested
    weights over every training user's example (:meth:`preference_stats`, in :meth:`run_info`).

    Args:
        model: the generative recommender (the stage starts from the SFT weights loaded into it).
        align: the stage's settings.
        seed: seeds the popularity negatives.
        reference_batch_size: users per batch when computing the negatives and the reference log-probabilities.
        kwargs: :class:`GenerativeTask` settings.
    """

    def __init__(self, model: GenerativeRecommender, align: AlignConfig, seed: int = 0,
                 reference_batch_size: int = 256, **kwargs):
        super().__init__(model, **kwargs)
        self.align, self.seed, self.reference_batch_size = align, seed, reference_batch_size
        if align.disable_dropout:
            disable_dropout(self.model)
        #: per dense user ID: chosen item, negatives (U, K) and the reference's log-probabilities of [chosen,
        #: negatives] (U, 1 + K); filled once at the start of the stage or read from the checkpoint
        self.preferences: dict[str, torch.Tensor] | None = None
        self.reference_passes = 0  # how often the reference log-probabilities were computed (once per stage)
        self.final_stats: dict[str, float] | None = None  # preference_stats of the tested weights

    # ---- the cache ---------------------------------------------------------------------------------------------

    @torch.no_grad()
    def build_preferences(self, data: SequenceData, max_len: int) -> dict[str, torch.Tensor]:
        """Negatives and reference log-probabilities of every training user, by the model as it is now (the
        reference), in eval mode."""
        was_training = self.model.training
        self.model.eval()
        examples = preference_examples(data, max_len)
        k = self.align.num_negatives
        negatives = None
        if self.align.negatives == "beam":
            negatives = beam_negatives(self.model, examples, k, self.reference_batch_size, self.device)
        negatives = popularity_negatives(examples, k, self.seed, fill=negatives)
        size = data.num_users + 1
        chosen = torch.zeros(size, dtype=torch.int64)
        chosen[examples.users] = torch.from_numpy(examples.chosen)
        table = torch.zeros(size, k, dtype=torch.int64)
        table[examples.users] = torch.from_numpy(negatives)
        reference = torch.zeros(size, 1 + k, dtype=torch.float32)
        for rows, batch in examples.batches(self.reference_batch_size):
            users = torch.from_numpy(examples.users[rows])
            candidates = torch.cat([chosen[users, None], table[users]], dim=1)
            log_probs = self.model.item_log_probs(batch.to(self.device), candidates.to(self.device))
            reference[users] = log_probs.float().cpu()
        self.model.train(was_training)
        self.reference_passes += 1
        return {"chosen": chosen, "negatives": table, "reference_log_probs": reference}

    def on_fit_start(self) -> None:
        if self.preferences is None:  # a fresh stage; a resumed one read its cache from the checkpoint
            datamodule = self.trainer.datamodule
            log.info("alignment: %s negatives and reference log-probabilities of every training user",
                     self.align.negatives)
            self.preferences = self.build_preferences(datamodule.data, datamodule.max_len)

    @torch.no_grad()
    def preference_stats(self, data: SequenceData, max_len: int) -> dict[str, float]:
        """The preference loss and :meth:`training_loss`'s statistics over every training user's example, by the
        model as it is now (eval mode) against the cached reference: what the stage did to the chosen and rejected
        items' likelihoods."""
        was_training = self.model.training
        self.model.eval()
        examples = preference_examples(data, max_len)
        cache, sums = self.preferences, {}
        for rows, batch in examples.batches(self.reference_batch_size):
            users = torch.from_numpy(examples.users[rows])
            candidates = torch.cat([cache["chosen"][users, None], cache["negatives"][users]], dim=1)
            policy = self.model.item_log_probs(batch.to(self.device), candidates.to(self.device)).float().cpu()
            reference = cache["reference_log_probs"][users]
            result = preference_loss(self.align.loss, policy[:, 0], policy[:, 1:], reference[:, 0], reference[:, 1:],
                                     self.align.beta)
            stats = {"loss": result.losses.mean(), **result.stats(),
                     "chosen_log_ratio": (policy[:, 0] - reference[:, 0]).mean(),
                     "rejected_log_ratio": (policy[:, 1:] - reference[:, 1:]).mean()}
            for name, value in stats.items():
                sums[name] = sums.get(name, 0.0) + float(value) * len(rows)
        self.model.train(was_training)
        return {name: total / len(examples.users) for name, total in sums.items()}

    def on_test_end(self) -> None:
        """The tested weights' (the best checkpoint's) preference statistics, for :meth:`run_info` (none when the
        weights were loaded without the stage's cache, e.g. by genrec-eval)."""
        datamodule = self.trainer.datamodule
        if self.preferences is None or datamodule is None:
            return
        self.final_stats = self.preference_stats(datamodule.data, datamodule.max_len)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.preferences is not None:
            checkpoint[CHECKPOINT_KEY] = self.preferences

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if CHECKPOINT_KEY in checkpoint:
            self.preferences = checkpoint[CHECKPOINT_KEY]

    # ---- training ----------------------------------------------------------------------------------------------

    def training_loss(self, batch: JaggedBatch) -> torch.Tensor:
        """Training batches are whole training sequences (one example per user); the prompt is the input sequence,
        the chosen item its last target. With ``sft_target=sequence`` the stage's loss is the control's loss (next
        token at every position, :meth:`GenerativeTask.training_loss`) plus the preference loss."""
        chosen = batch.target_ids[batch.offsets[1:] - 1]
        users = batch.user_ids.cpu()
        cache = self.preferences
        if not torch.equal(cache["chosen"][users].to(chosen.device), chosen):
            raise RuntimeError("the preference cache does not belong to this dataset (chosen items differ)")
        candidates = torch.cat([chosen[:, None], cache["negatives"][users].to(chosen.device)], dim=1)
        reference = cache["reference_log_probs"][users].to(self.device)
        policy = self.model.item_log_probs(batch, candidates)  # (B, 1 + K)
        result = preference_loss(self.align.loss, policy[:, 0], policy[:, 1:], reference[:, 0], reference[:, 1:],
                                 self.align.beta)
        loss = result.losses.mean()
        weight = self.align.sft_weight
        if weight and self.align.sft_target == "chosen":
            loss = loss - weight * policy[:, 0].mean() / self.model.sids.num_levels
        loss = global_mean(loss, batch.batch_size)
        if weight and self.align.sft_target == "sequence":
            loss = loss + weight * super().training_loss(batch)
        stats = {**result.stats(), "chosen_log_ratio": (policy[:, 0] - reference[:, 0]).mean(),
                 "rejected_log_ratio": (policy[:, 1:] - reference[:, 1:]).mean()}
        for name, value in stats.items():
            self.log(f"train/{name}", value.detach(), on_step=True, on_epoch=True, batch_size=batch.batch_size,
                     sync_dist=True)
        return loss

    def run_info(self) -> dict[str, Any]:
        a = self.align
        return {**super().run_info(),
                "align": {"loss": a.loss, "beta": a.beta, "num_negatives": a.num_negatives, "negatives": a.negatives,
                          "sft_weight": a.sft_weight, "sft_target": a.sft_target,
                          "disable_dropout": a.disable_dropout,
                          "examples": "one per training user: prompt = training part minus its last item, chosen = "
                                      "that item; rejected never a training item of the user",
                          "reference": "the initial (SFT) weights; log-probabilities computed once and cached",
                          "tested_weights_on_training_examples": self.final_stats}}
