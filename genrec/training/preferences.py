"""Preference mining for the alignment stages (``stage=dpo|sdpo``, :mod:`genrec.training.align`): the examples of the
training split, their rejected items (by popularity, the model's own beam or its samples) and the reference
model's scores of them, computed once at the start of a stage and cached (:func:`mine_preferences`).

Everything here reads the training parts only (:class:`~genrec.data.schema.SequenceData`'s split): with
``positions=last`` one example per training user (the prompt is the training part without its last item, the chosen
item that last training item), with ``positions=all`` one per position of every training sequence. Rejected items are
never the chosen item nor one of the user's training items.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from genrec.data.batch import JaggedBatch, TrainSequences, collate, prefixes
from genrec.data.schema import SequenceData
from genrec.errors import ConfigError
from genrec.models.counts import item_popularity
from genrec.models.generative import GenerativeRecommender
from genrec.ops.jagged import jagged_index

if TYPE_CHECKING:
    from genrec.training.align import AlignConfig


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
        raise ConfigError("stage.beam_skip", f"beam_skip + num_negatives = {skip + k} is past the "
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


@torch.no_grad()
def mine_preferences(model: GenerativeRecommender, data: SequenceData, max_len: int, align: "AlignConfig", seed: int,
                     batch_size: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Negatives and reference scores of every preference example, by ``model`` as it is now (the reference), in
    eval mode -> the stage's cache: ``valid_at`` (the training sequences' ends) and, keyed by the chosen item's index
    in ``SequenceData.item_ids``, ``chosen``, ``negatives`` (K per key) and ``reference_log_probs`` of
    [chosen, negatives] (1 + K per key)."""
    was_training = model.training
    model.eval()
    examples = preference_examples(data, max_len, align.positions)
    k = align.num_negatives
    negatives = None
    if align.negatives == "beam":
        negatives = beam_negatives(model, examples, k, batch_size, device, ranked=align.score == "ranking",
                                   skip=align.beam_skip)
    elif align.negatives == "sampled":
        negatives = sampled_negatives(model, examples, k, batch_size, device, seed)
    negatives = popularity_negatives(examples, k, seed, fill=negatives)
    keys = torch.from_numpy(examples.keys)
    size = len(data.item_ids)
    chosen = torch.zeros(size, dtype=torch.int64)
    chosen[keys] = torch.from_numpy(examples.chosen)
    table = torch.zeros(size, k, dtype=torch.int64)
    table[keys] = torch.from_numpy(negatives)
    reference = torch.zeros(size, 1 + k, dtype=torch.float32)
    for rows, batch in examples.batches(batch_size):
        at = keys[rows]
        candidates = torch.cat([chosen[at, None], table[at]], dim=1)
        scores = example_scores(model, batch.to(device), align.positions, candidates.to(device), align.score)
        reference[at] = scores.float().cpu()
    model.train(was_training)
    return {"valid_at": torch.from_numpy(data.valid_at.copy()), "chosen": chosen, "negatives": table,
            "reference_log_probs": reference}
