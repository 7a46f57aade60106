"""Preference alignment of a generative recommender after next-token training (SFT): DPO and S-DPO, the stages
``stage=dpo`` and ``stage=sdpo`` (genrec/conf/stage).

A stage starts from an SFT run's weights (``init_from=<run folder>``). Its preference data comes from the training
split only, mined once at the start of the stage (:mod:`genrec.training.preferences`): the examples (one per
training user with ``positions=last``, one per position of every training sequence with ``positions=all``), their
``K`` rejected items (by training-split popularity, the SFT model's own beam, or samples from its distribution) and
the reference's scores of them.

The rewards compare the policy's and the reference's log-probabilities of an item's codes (``score=codes``) or the
scores the model ranks items by (``score=ranking``, e.g. the item head's log-probability plus ``code_weight`` x the
codes' for a SID generator that ranks with ``rank=guided``): alignment then acts on what the model recommends.

The reference model is the SFT model itself, frozen: its scores are computed before the first step, while the policy
still equals it, and cached with the negatives; nothing else of the reference is kept. The cache is saved in every
checkpoint, so a resumed stage reads it back instead of recomputing it from weights that have moved on.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from genrec.data.batch import JaggedBatch
from genrec.data.schema import SequenceData
from genrec.errors import ConfigError, UserError, settings_from
from genrec.models.generative import GenerativeRecommender
from genrec.models.preference import LOSSES, preference_loss
from genrec.training.generative import GenerativeTask, global_mean
from genrec.training.preferences import example_keys, example_scores, mine_preferences, preference_examples

log = logging.getLogger("genrec.train")

NEGATIVE_SOURCES = ("popularity", "beam", "sampled")
SFT_TARGETS = ("chosen", "sequence")
POSITIONS = ("last", "all")
SCORES = ("codes", "ranking")
CHECKPOINT_KEY = "genrec_preferences"


@dataclass(frozen=True)
class AlignConfig:
    """The settings of an alignment stage (``stage.*`` of ``stage=dpo|sdpo``).

    Attributes:
        loss: ``dpo`` (the mean over the ``K`` chosen/rejected pairs) or ``sdpo`` (one softmax over all of them).
        beta: the reward temperature β.
        num_negatives: rejected items per example ``K``.
        negatives: ``popularity`` (drawn ∝ training-split counts), ``beam`` (the SFT model's top wrong items: its
            code beam's, or with ``score=ranking`` the top of the list it recommends) or ``sampled`` (drawn from the
            SFT model's own distribution over items).
        beam_skip: with ``negatives=beam``, the model's first ``beam_skip`` wrong items are passed over and the
            ``K`` after them rejected (its very top guesses are often what the user takes next, false negatives).
        sft_weight: weight of a next-token loss added to the preference loss (0: none).
        sft_target: what that next-token loss covers: ``chosen`` (the chosen item's codes only) or ``sequence``
            (every position of the training sequence: the loss that continued SFT, the stage's control, trains on).
        disable_dropout: train the policy without dropout, so that its log-probabilities are comparable with the
            reference's (computed in eval mode), as TRL's DPO does by default.
        positions: the examples: ``last`` (one per training user, its last training item chosen) or ``all`` (one
            per position of every training sequence, each next item chosen).
        score: what the rewards compare: ``codes`` (an item's code log-probability, the generator's likelihood) or
            ``ranking`` (the score the model ranks items by, :meth:`GenerativeRecommender.ranking_scores`: for a SID
            generator with an item head and ``rank=guided``, ``code_weight`` x code plus item-head log-probability).
    """

    loss: str
    beta: float = 0.1
    num_negatives: int = 1
    negatives: str = "popularity"
    beam_skip: int = 0
    sft_weight: float = 0.0
    sft_target: str = "chosen"
    disable_dropout: bool = True
    positions: str = "last"
    score: str = "codes"

    @classmethod
    def from_stage(cls, values: dict[str, Any]) -> "AlignConfig":
        """From the stage's settings (``stage.*`` without ``_target_``, ``name`` and ``train_examples``); bad values
        are a :class:`ConfigError` naming ``stage.<key>``."""
        config = settings_from(cls, values, "stage")
        if config.loss not in LOSSES:
            raise ConfigError("stage.loss", f"got {config.loss!r}, expected one of {LOSSES}")
        if config.negatives not in NEGATIVE_SOURCES:
            raise ConfigError("stage.negatives", f"got {config.negatives!r}, expected one of {NEGATIVE_SOURCES}")
        if not config.beta > 0:
            raise ConfigError("stage.beta", f"got {config.beta}, expected a positive number")
        if config.num_negatives < 1:
            raise ConfigError("stage.num_negatives", f"got {config.num_negatives}, expected at least 1")
        if config.beam_skip < 0 or (config.beam_skip and config.negatives != "beam"):
            raise ConfigError("stage.beam_skip", f"got {config.beam_skip}, expected 0, or a count >= 0 with "
                                                 f"stage.negatives=beam (got {config.negatives!r})")
        if config.sft_weight < 0:
            raise ConfigError("stage.sft_weight", f"got {config.sft_weight}, expected a value >= 0")
        if config.sft_target not in SFT_TARGETS:
            raise ConfigError("stage.sft_target", f"got {config.sft_target!r}, expected one of {SFT_TARGETS}")
        if config.positions not in POSITIONS:
            raise ConfigError("stage.positions", f"got {config.positions!r}, expected one of {POSITIONS}")
        if config.score not in SCORES:
            raise ConfigError("stage.score", f"got {config.score!r}, expected one of {SCORES}")
        if config.score == "ranking" and config.sft_weight and config.sft_target == "chosen":
            raise ConfigError("stage.sft_target", "sft_target=chosen adds the chosen item's code log-probability "
                                                  "to the loss, which stage.score=ranking does not compare: use "
                                                  "sft_target=sequence (the control's loss)")
        return config


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
        seed: seeds the popularity and sampled negatives.
        reference_batch_size: users per batch when computing the negatives and the reference log-probabilities.
        kwargs: :class:`GenerativeTask` settings.
    """

    def __init__(self, model: GenerativeRecommender, align: AlignConfig, seed: int = 0,
                 reference_batch_size: int = 256, **kwargs):
        super().__init__(model, **kwargs)
        self.align, self.seed, self.reference_batch_size = align, seed, reference_batch_size
        if align.disable_dropout:
            disable_dropout(self.model)
        #: the training sequences' ends ``valid_at``; keyed by the chosen item's index in ``item_ids``: the chosen
        #: item, negatives (K per key) and the reference's log-probabilities of [chosen, negatives] (1 + K per key);
        #: filled once at the start of the stage or read from the checkpoint
        self.preferences: dict[str, torch.Tensor] | None = None
        self.reference_passes = 0  # how often the reference log-probabilities were computed (once per stage)
        self.final_stats: dict[str, float] | None = None  # preference_stats of the tested weights

    # ---- the cache ---------------------------------------------------------------------------------------------

    def on_fit_start(self) -> None:
        if self.preferences is None:  # a fresh stage; a resumed one read its cache from the checkpoint
            datamodule = self.trainer.datamodule
            log.info("alignment: %s negatives and reference log-probabilities of every preference example "
                     "(positions=%s)", self.align.negatives, self.align.positions)
            self.preferences = mine_preferences(self.model, datamodule.data, datamodule.max_len, self.align,
                                                self.seed, self.reference_batch_size, self.device)
            self.reference_passes += 1

    @torch.no_grad()
    def preference_stats(self, data: SequenceData, max_len: int) -> dict[str, float]:
        """The preference loss and :meth:`training_loss`'s statistics over every preference example, by the model
        as it is now (eval mode) against the cached reference: what the stage did to the chosen and rejected items'
        likelihoods."""
        was_training = self.model.training
        self.model.eval()
        examples = preference_examples(data, max_len, self.align.positions)
        cache, sums = self.preferences, {}
        for rows, batch in examples.batches(self.reference_batch_size):
            at = torch.from_numpy(examples.keys[rows])
            candidates = torch.cat([cache["chosen"][at, None], cache["negatives"][at]], dim=1)
            policy = example_scores(self.model, batch.to(self.device), self.align.positions,
                                    candidates.to(self.device), self.align.score).float().cpu()
            reference = cache["reference_log_probs"][at]
            result = preference_loss(self.align.loss, policy[:, 0], policy[:, 1:], reference[:, 0], reference[:, 1:],
                                     self.align.beta)
            stats = {"loss": result.losses.mean(), **result.stats(),
                     "chosen_log_ratio": (policy[:, 0] - reference[:, 0]).mean(),
                     "rejected_log_ratio": (policy[:, 1:] - reference[:, 1:]).mean()}
            for name, value in stats.items():
                sums[name] = sums.get(name, 0.0) + float(value) * len(rows)
        self.model.train(was_training)
        return {name: total / len(examples.keys) for name, total in sums.items()}

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
            if "valid_at" not in checkpoint[CHECKPOINT_KEY]:
                raise UserError("the checkpoint's preference cache is keyed by user (written before genrec keyed it "
                                "by position); re-run the stage from its SFT run instead of resuming it")
            self.preferences = checkpoint[CHECKPOINT_KEY]

    # ---- training ----------------------------------------------------------------------------------------------

    def training_loss(self, batch: JaggedBatch) -> torch.Tensor:
        """Training batches are whole training sequences; their preference examples (:func:`example_keys`) are
        each sequence's last position or every position. With ``sft_target=sequence`` the stage's loss is the
        control's loss (next token at every position, :meth:`GenerativeTask.training_loss`) plus the preference
        loss."""
        cache = self.preferences
        valid_at = cache["valid_at"].to(batch.offsets.device)
        keys, chosen = example_keys(batch, self.align.positions, valid_at)
        keys = keys.cpu()
        if not torch.equal(cache["chosen"][keys].to(chosen.device), chosen):
            raise RuntimeError("the preference cache does not belong to this dataset (chosen items differ)")
        candidates = torch.cat([chosen[:, None], cache["negatives"][keys].to(chosen.device)], dim=1)
        reference = cache["reference_log_probs"][keys].to(self.device)
        policy = example_scores(self.model, batch, self.align.positions, candidates, self.align.score)  # (E, 1 + K)
        result = preference_loss(self.align.loss, policy[:, 0], policy[:, 1:], reference[:, 0], reference[:, 1:],
                                 self.align.beta)
        loss = result.losses.mean()
        weight = self.align.sft_weight
        if weight and self.align.sft_target == "chosen":
            loss = loss - weight * policy[:, 0].mean() / self.model.sids.num_levels
        loss = global_mean(loss, len(keys))
        if weight and self.align.sft_target == "sequence":
            loss = loss + weight * super().training_loss(batch)
        stats = {**result.stats(), "chosen_log_ratio": (policy[:, 0] - reference[:, 0]).mean(),
                 "rejected_log_ratio": (policy[:, 1:] - reference[:, 1:]).mean()}
        for name, value in stats.items():
            self.log(f"train/{name}", value.detach(), on_step=True, on_epoch=True, batch_size=len(keys),
                     sync_dist=True)
        return loss

    def run_info(self) -> dict[str, Any]:
        a = self.align
        return {**super().run_info(),
                "align": {"loss": a.loss, "beta": a.beta, "num_negatives": a.num_negatives, "negatives": a.negatives,
                          "beam_skip": a.beam_skip, "sft_weight": a.sft_weight, "sft_target": a.sft_target,
                          "disable_dropout": a.disable_dropout, "positions": a.positions, "score": a.score,
                          "examples": ("one per training user: prompt = training part minus its last item, chosen = "
                                       "that item" if a.positions == "last" else
                                       "one per position of every training sequence: prompt = the sequence up to "
                                       "it, chosen = the next item") + "; rejected never a training item of the user",
                          "reference": "the initial (SFT) weights; log-probabilities computed once and cached",
                          "tested_weights_on_training_examples": self.final_stats}}
