"""Preference alignment of a generative recommender after next-token training (SFT): DPO and S-DPO.

A stage starts from an SFT run's weights (``init_from=<run folder>``) with ``align=dpo`` or ``align=sdpo``. Its
preference data comes from the training split only (:func:`preference_examples`). With ``positions=last`` (the
default) there is one example per training user: the prompt is the user's training part without its last item, the
chosen item is that last training item (never a validation or test item). With ``positions=all`` every position of
every training sequence is an example (the positions continued SFT trains on): the prompt is the sequence up to
that position, the chosen item the next one. The ``K`` rejected items are drawn by training-split popularity or
taken from the SFT model's own beam (its most likely wrong items, "hard negatives") or sampled from its
distribution over items, never the chosen item or one of the user's training items.

The rewards compare the policy's and the reference's log-probabilities of an item's codes (``score=codes``) or the
scores the model ranks items by (``score=ranking``, e.g. the item head's log-probability plus ``code_weight`` x the
codes' for a SID generator that ranks with ``rank=guided``): alignment then acts on what the model recommends.

The reference model is the SFT model itself, frozen: at the start of the stage (before the first step, while the
policy still equals it) the task computes ``log pi_ref`` of every example's chosen and rejected items once and
caches them with the negatives, keyed by the chosen item's index in ``SequenceData.item_ids``; nothing else of the
reference is kept. The cache is saved in every checkpoint, so a resumed stage reads it back instead of recomputing
it from weights that have moved on.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from genrec.data.batch import JaggedBatch, TrainSequences, collate, prefixes
from genrec.data.schema import SequenceData
from genrec.errors import ConfigError, UserError, settings_from
from genrec.eval.baselines import item_popularity
from genrec.models.generative import GenerativeRecommender
from genrec.models.preference import LOSSES, preference_loss
from genrec.ops.jagged import jagged_index
from genrec.training.generative import GenerativeTask, global_mean

log = logging.getLogger("genrec.train")

NEGATIVE_SOURCES = ("popularity", "beam", "sampled")
SFT_TARGETS = ("chosen", "sequence")
POSITIONS = ("last", "all")
SCORES = ("codes", "ranking")
CHECKPOINT_KEY = "genrec_preferences"


@dataclass(frozen=True)
class AlignConfig:
    """``align.*`` (conf/align): ``loss`` none | dpo | sdpo and its settings.

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
        if config.beam_skip < 0 or (config.beam_skip and config.negatives != "beam"):
            raise ConfigError("align.beam_skip", f"got {config.beam_skip}, expected 0, or a count >= 0 with "
                                                 f"align.negatives=beam (got {config.negatives!r})")
        if config.sft_weight < 0:
            raise ConfigError("align.sft_weight", f"got {config.sft_weight}, expected a value >= 0")
        if config.sft_target not in SFT_TARGETS:
            raise ConfigError("align.sft_target", f"got {config.sft_target!r}, expected one of {SFT_TARGETS}")
        if config.positions not in POSITIONS:
            raise ConfigError("align.positions", f"got {config.positions!r}, expected one of {POSITIONS}")
        if config.score not in SCORES:
            raise ConfigError("align.score", f"got {config.score!r}, expected one of {SCORES}")
        if config.score == "ranking" and config.sft_weight and config.sft_target == "chosen":
            raise ConfigError("align.sft_target", "sft_target=chosen adds the chosen item's code log-probability "
                                                  "to the loss, which align.score=ranking does not compare: use "
                                                  "sft_target=sequence (the control's loss)")
        return config


def example_keys(batch: JaggedBatch, positions: str, valid_at: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A training batch (:class:`TrainSequences`) -> its preference examples' ``(keys (E,), chosen (E,))``: with
    ``positions="last"`` one per sequence (``E = B``: the sequence is the prompt, its last target the chosen item),
    with ``"all"`` one per position (``E = N``: the sequence up to that position, the next item). ``keys`` are the
    chosen items' indices in ``SequenceData.item_ids`` (the training sequence of user ``u`` ends at
    ``valid_at[u]``), which key the preference cache."""
    row, col = jagged_index(batch.offsets)
    keys = valid_at[batch.user_ids][row] - batch.lengths[row] + col
    if positions == "last":
        last = batch.offsets[1:] - 1
        return keys[last], batch.target_ids[last]
    return keys, batch.target_ids


def example_scores(model: GenerativeRecommender, batch: JaggedBatch, positions: str, candidates: torch.Tensor,
                   score: str = "codes") -> torch.Tensor:
    """``(E, M)`` the model's scores of each example's ``candidates (E, M)`` after its prompt: their
    log-probabilities (``score=codes``) or the scores the model ranks them by (``ranking``)."""
    if score == "ranking":
        return (model.ranking_scores if positions == "last" else model.prefix_ranking_scores)(batch, candidates)
    if positions == "last":
        return model.item_log_probs(batch, candidates)
    return model.prefix_item_log_probs(batch, candidates)


@dataclass
class PreferenceExamples:
    """The preference examples of the training split (``E`` examples, see :func:`example_keys`).

    Attributes:
        dataset: the users' training sequences (:class:`TrainSequences`: the prompts are their input prefixes).
        positions: ``last`` or ``all`` (:class:`AlignConfig`).
        keys: ``(E,)`` each example's chosen item as an index into ``SequenceData.item_ids``, in order.
        users: ``(E,)`` each example's dense user ID.
        chosen: ``(E,)`` each example's chosen item (a training item: ``item_ids[keys]``).
        popularity: ``(num_items + 1,)`` training-split counts.
    """

    dataset: TrainSequences
    positions: str
    keys: np.ndarray
    users: np.ndarray
    chosen: np.ndarray
    popularity: np.ndarray

    def batches(self, batch_size: int):
        """``(rows, batch)`` of the examples in order, the training sequences of ``batch_size`` users at a time:
        ``rows`` index their examples; the batch's ``seen_ids`` hold each user's training items (the whole training
        part, also beyond a truncated sequence), which the negatives leave out."""
        data = self.dataset.data
        first = 0
        for start in range(0, len(self.dataset), batch_size):
            sequences = [self.dataset[i] for i in range(start, min(start + batch_size, len(self.dataset)))]
            for e in sequences:
                e.seen = data.item_ids[data.offsets[e.user]:data.valid_at[e.user]]
            batch = collate(sequences)
            count = batch.batch_size if self.positions == "last" else len(batch.item_ids)  # examples in the batch
            first += count
            yield np.arange(first - count, first), batch

    def prompts(self, batch: JaggedBatch) -> JaggedBatch:
        """The prompts of a batch from :meth:`batches`, one row per example."""
        return batch if self.positions == "last" else prefixes(batch)


def preference_examples(data: SequenceData, max_len: int, positions: str = "last") -> PreferenceExamples:
    """The examples of every user with a training sequence (at least two training items), from the training parts
    (:class:`SequenceData`'s split) only: the last position of each (``positions="last"``) or every one."""
    dataset = TrainSequences(data, max_len)
    ends = data.valid_at[dataset.users]  # each training sequence's end; its last target is at ends - 1
    if positions == "last":
        users, keys = dataset.users.copy(), ends - 1
    else:
        users = np.repeat(dataset.users, dataset.lengths)
        before = np.repeat(np.cumsum(dataset.lengths) - dataset.lengths, dataset.lengths)
        keys = np.repeat(ends - dataset.lengths, dataset.lengths) + np.arange(len(users)) - before
    return PreferenceExamples(dataset, positions, keys, users, data.item_ids[keys], item_popularity(data))


def popularity_negatives(examples: PreferenceExamples, k: int, seed: int,
                         fill: np.ndarray | None = None) -> np.ndarray:
    """``(E, k)`` items drawn ∝ training popularity without replacement per example, never the chosen item nor
    one of the user's training items; ``fill (E, k)`` (0 = empty) keeps its non-zero entries and only the rest is
    drawn."""
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
                   device: torch.device, ranked: bool = False, skip: int = 0) -> np.ndarray:
    """``(E, k)`` the model's most likely items for each prompt other than the chosen item and the user's training
    items, its first ``skip`` passed over (0 where the beam found fewer): by its code beam, or with ``ranked`` from
    :meth:`~GenerativeRecommender.ranked` (the items it recommends, by the scores ``score=ranking`` compares,
    ``model.top_k`` of them, which must reach ``skip + k``)."""
    if ranked and skip + k > model.top_k:
        raise ConfigError("align.beam_skip", f"beam_skip + num_negatives = {skip + k} is past the "
                                             f"{model.top_k} items the model ranks (model.decoding.top_k)")
    out = np.zeros((len(examples.users), k), dtype=np.int64)
    for rows, batch in examples.batches(batch_size):
        prompts = examples.prompts(batch).to(device)
        if ranked:
            items = model.ranked(prompts).items[:, skip:skip + k]
        else:
            items = model.generate(prompts, beam=max(model.beam, skip + k), top_k=skip + k,
                                   exclude_history=True).items[:, skip:]
        out[rows, :items.shape[1]] = items.cpu().numpy()
    return out


@torch.no_grad()
def sampled_negatives(model: GenerativeRecommender, examples: PreferenceExamples, k: int, batch_size: int,
                      device: torch.device, seed: int, draws_per_negative: int = 4) -> np.ndarray:
    """``(E, k)`` items drawn from the model's distribution for each prompt (:meth:`GenerativeRecommender.sample`,
    ``draws_per_negative * k`` draws), the first ``k`` distinct ones that are neither the chosen item nor one of
    the user's training items (0 where fewer were drawn)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    out = np.zeros((len(examples.keys), k), dtype=np.int64)
    for rows, batch in examples.batches(batch_size):
        prompts = examples.prompts(batch)
        draws = model.sample(prompts.to(device), draws_per_negative * k, generator).cpu().numpy()
        seen = prompts.seen_offsets.numpy()
        for i, row in enumerate(rows):
            banned = set(prompts.seen_ids[seen[i]:seen[i + 1]].tolist())  # the training part: the chosen item too
            kept = [item for item in dict.fromkeys(draws[i].tolist()) if item not in banned][:k]
            out[row, :len(kept)] = kept
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

    @torch.no_grad()
    def build_preferences(self, data: SequenceData, max_len: int) -> dict[str, torch.Tensor]:
        """Negatives and reference log-probabilities of every preference example, by the model as it is now (the
        reference), in eval mode."""
        was_training = self.model.training
        self.model.eval()
        examples = preference_examples(data, max_len, self.align.positions)
        k = self.align.num_negatives
        negatives = None
        if self.align.negatives == "beam":
            negatives = beam_negatives(self.model, examples, k, self.reference_batch_size, self.device,
                                       ranked=self.align.score == "ranking", skip=self.align.beam_skip)
        elif self.align.negatives == "sampled":
            negatives = sampled_negatives(self.model, examples, k, self.reference_batch_size, self.device, self.seed)
        negatives = popularity_negatives(examples, k, self.seed, fill=negatives)
        keys = torch.from_numpy(examples.keys)
        size = len(data.item_ids)
        chosen = torch.zeros(size, dtype=torch.int64)
        chosen[keys] = torch.from_numpy(examples.chosen)
        table = torch.zeros(size, k, dtype=torch.int64)
        table[keys] = torch.from_numpy(negatives)
        reference = torch.zeros(size, 1 + k, dtype=torch.float32)
        for rows, batch in examples.batches(self.reference_batch_size):
            at = keys[rows]
            candidates = torch.cat([chosen[at, None], table[at]], dim=1)
            log_probs = example_scores(self.model, batch.to(self.device), self.align.positions,
                                       candidates.to(self.device), self.align.score)
            reference[at] = log_probs.float().cpu()
        self.model.train(was_training)
        self.reference_passes += 1
        return {"valid_at": torch.from_numpy(data.valid_at.copy()), "chosen": chosen, "negatives": table,
                "reference_log_probs": reference}

    def on_fit_start(self) -> None:
        if self.preferences is None:  # a fresh stage; a resumed one read its cache from the checkpoint
            datamodule = self.trainer.datamodule
            log.info("alignment: %s negatives and reference log-probabilities of every preference example "
                     "(positions=%s)", self.align.negatives, self.align.positions)
            self.preferences = self.build_preferences(datamodule.data, datamodule.max_len)

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
