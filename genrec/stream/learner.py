"""The model side of the stream trainer: a :class:`~genrec.models.recommender.SequentialRecommender` (SASRec, HSTU)
on a dynamic item table keyed by raw item IDs, its dense optimizer, and the three things the trainer asks of it —
query vectors for prequential prediction, item vectors of candidates, and a training step on a micro-batch.

The step is offline training's: the recommender's own ``training_loss`` over the micro-batch's target positions,
and AdamW over offline training's parameter groups (:func:`genrec.training.task.parameter_groups`). One thing
differs: the sampled softmax (:class:`~genrec.models.losses.SampledSoftmaxLoss`) draws its uniform negatives from
``1..num_items`` offline; here items are raw IDs, so the learner hands the loss a ``draw`` from the items the table
holds in memory (tier 0) plus the batch's own items, with the same global random state (which the checkpoints
save). In-batch negatives need nothing else.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from genrec.embedding.dynamic import DynamicItemEmbedding, DynamicTable
from genrec.errors import ConfigError
from genrec.models.losses import Draw, SampledSoftmaxLoss
from genrec.models.recommender import SequentialRecommender
from genrec.stream.examples import Examples, Step
from genrec.training.task import parameter_groups


def resident_ids(table: DynamicTable) -> np.ndarray:
    """``(R,)`` the raw IDs of the rows in tier 0, in slot order."""
    return table.slot_ids[table.eviction.last_step >= 0]


class Learner:
    """Args:
        model: a recommender whose ``item_embedding`` is a :class:`DynamicItemEmbedding` (one process).
        loss: a :class:`SampledSoftmaxLoss`.
        lr / weight_decay / betas: AdamW over the dense parameters (no decay on biases and norms).
        grad_clip: clip the dense gradients' norm to this (0: no clipping).
    """

    def __init__(self, model: SequentialRecommender, loss: nn.Module, lr: float = 1e-3, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.98), grad_clip: float = 0.0):
        if not isinstance(model.item_embedding, DynamicItemEmbedding):
            raise ConfigError("model.embedding", "the stream trainer keys items by raw ID: it needs the dynamic table "
                                                 "(embedding@model.embedding=dynamic)")
        if not isinstance(loss, SampledSoftmaxLoss):
            raise ConfigError("model.loss", "the full softmax scores every item ID, which a stream does not know: use "
                                            "a sampled softmax (loss@model.loss=sampled)")
        self.model, self.loss, self.grad_clip = model, loss, grad_clip
        model.item_embedding.external_checkpoint = True  # the trainer checkpoints the table itself
        self.optimizer = torch.optim.AdamW(parameter_groups(model, weight_decay), lr=lr, betas=tuple(betas))

    @property
    def embedding(self) -> DynamicItemEmbedding:
        return self.model.item_embedding

    @property
    def table(self) -> DynamicTable:
        return self.embedding.local_table

    @torch.no_grad()
    def queries(self, examples: Examples, max_targets: int) -> torch.Tensor:
        """``(M, D)`` the query vector of every target (eval mode: no dropout, the table only read), normalised for
        cosine; encoded in the groups of sequences of the training steps (at most ``max_targets`` targets each)."""
        self.model.eval()
        out = torch.empty(examples.num_targets, self.model.encoder.dim)
        for step in examples.steps(max_targets):
            out[step.targets] = self.model.encode(step.batch)[step.mask]
        return out

    @torch.no_grad()
    def item_vectors(self, ids: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        """``(C,)`` raw item IDs -> (``(C, D)`` scoring-side vectors, ``(C,)`` bool: the model holds a row for the
        item in memory). Items without one read the table's default row."""
        has_row = self.table.index.find(np.asarray(ids, dtype=np.int64)) >= 0
        return self.model.similarity.prepare(self.table.read(ids)), has_row

    def draw(self, examples: Examples | Step) -> Draw:
        """Uniform negatives for ``examples``: from the rows in tier 0 and the batch's own items."""
        batch = examples.batch
        pool = torch.from_numpy(np.concatenate([resident_ids(self.table), np.unique(batch.item_ids.numpy()),
                                                np.unique(batch.target_ids[examples.mask].numpy())]))
        return lambda count: pool[torch.randint(0, len(pool), (count,))]

    def loss_of(self, examples: Examples | Step) -> torch.Tensor:
        """The training loss at the masked positions of ``examples`` (the recommender's own ``training_loss``)."""
        return self.model.training_loss(examples.batch, self.loss, examples.mask, self.draw(examples))

    def candidates(self, examples: Examples | Step) -> torch.Tensor:
        """``(C,)`` the raw item IDs the loss of ``examples`` scores: its positives and negatives drawn now
        (:meth:`draw`)."""
        return self.loss.item_ids(examples.batch.target_ids[examples.mask], self.model.num_items,
                                  draw=self.draw(examples))

    def train_steps(self, steps: list[Step], event_time: int) -> list[float]:
        """Train on ``steps`` in order (each with targets) and return their losses. Every step's candidates are
        drawn before the first step trains, from the rows tier 0 holds then, so every step's lookup is known ahead:
        with ``embedding.prefetch_depth = d > 0`` the table maps the rows of the next ``d`` steps in a background
        thread while a step trains (the same mappings, in the same order: the same result as ``d = 0``). Nothing is
        left mapped ahead when this returns (a checkpoint may follow)."""
        candidates = [self.candidates(step) for step in steps]
        depth, submitted = self.embedding.config.prefetch_depth, 0
        losses = []
        for k, step in enumerate(steps):
            while depth and submitted < min(len(steps), k + 1 + depth):
                self.embedding.prefetch(steps[submitted].batch.to_kjt(), candidates[submitted], event_time)
                submitted += 1
            losses.append(self.train(step, event_time, candidates[k]))
        return losses

    def train(self, examples: Examples | Step, event_time: int | None = None,
              candidates: torch.Tensor | None = None) -> float:
        """One step on the targets of ``examples``: the loss over ``candidates`` (default: drawn now, as
        :meth:`loss_of`), the table's fused update and AdamW on the dense parameters. Returns the loss."""
        if examples.num_targets == 0:
            return float("nan")
        self.model.train()
        if event_time is not None:
            self.embedding.set_event_time(event_time)
        if candidates is None:
            candidates = self.candidates(examples)
        loss = self.model.candidates_loss(examples.batch, self.loss, candidates, examples.mask)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        return float(loss.detach())

