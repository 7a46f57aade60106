"""The model side of the stream trainer: a :class:`~genrec.models.recommender.SequentialRecommender` (SASRec, HSTU)
on a dynamic item table keyed by raw item IDs, its dense optimizer, and the three things the trainer asks of it —
query vectors for prequential prediction, item vectors of candidates, and a training step on a micro-batch.

Negatives: the sampled softmax (:class:`~genrec.models.losses.SampledSoftmaxLoss`) draws its uniform negatives
from ``1..num_items`` in offline training; here items are raw IDs, so they are drawn uniformly from the items the
table holds in memory (tier 0) plus the batch's own items, with the same layout and the same global random
state (which the checkpoints save). In-batch negatives need nothing else.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from genrec.embedding.dynamic import DynamicItemEmbedding, DynamicTable
from genrec.errors import ConfigError
from genrec.models.losses import SampledSoftmaxLoss
from genrec.models.recommender import SequentialRecommender
from genrec.stream.examples import Examples


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
        decay, no_decay = [], []
        for p in model.parameters():
            (no_decay if p.ndim < 2 or _is_embedding(model, p) else decay).append(p)
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                            {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=tuple(betas))

    @property
    def embedding(self) -> DynamicItemEmbedding:
        return self.model.item_embedding

    @property
    def table(self) -> DynamicTable:
        return self.embedding.local_table

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1) if self.model.similarity == "cosine" else x

    @torch.no_grad()
    def queries(self, examples: Examples) -> torch.Tensor:
        """``(M, D)`` the query vector of every target (eval mode: no dropout, the table only read)."""
        self.model.eval()
        states = self.model.encode(examples.batch)  # (N, D), normalised for cosine
        return states[examples.mask]

    @torch.no_grad()
    def item_vectors(self, ids: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        """``(C,)`` raw item IDs -> (``(C, D)`` scoring-side vectors, ``(C,)`` bool: the model holds a row for the
        item in memory). Items without one read the table's default row."""
        has_row = self.table.index.find(np.asarray(ids, dtype=np.int64)) >= 0
        return self._norm(self.table.read(ids)), has_row

    def _item_ids(self, positives: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
        """The loss's ``item_ids`` layout (positives, uniform negatives, in-batch positives) with the uniform
        negatives drawn from ``pool``."""
        parts = [positives]
        loss = self.loss
        if loss.negatives in ("uniform", "mixed"):
            draws = torch.randint(0, len(pool), (loss._num_uniform(len(positives)),))
            parts.append(pool[draws])
        if loss.negatives in ("in_batch", "mixed"):
            parts.append(torch.unique(positives))
        return torch.cat(parts)

    def train(self, examples: Examples, event_time: int | None = None) -> float:
        """One step on the targets of ``examples``: the loss at the masked positions, the table's fused update
        and AdamW on the dense parameters. Returns the loss."""
        if examples.num_targets == 0:
            return float("nan")
        self.model.train()
        if event_time is not None:
            self.embedding.set_event_time(event_time)
        batch = examples.batch
        positives = batch.target_ids[examples.mask]
        pool = torch.from_numpy(np.concatenate([resident_ids(self.table), np.unique(batch.item_ids.numpy()),
                                                np.unique(positives.numpy())]))
        item_ids = self._item_ids(positives, pool)
        inputs, items = self.embedding.forward_with_items(batch.to_kjt(), item_ids)
        states = self._norm(self.model.encoder(inputs, batch.offsets, batch.timestamps, batch.query_timestamps))
        loss = self.loss(states[examples.mask], positives, item_ids, self._norm(items))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        return float(loss.detach())


def _is_embedding(model: nn.Module, parameter: nn.Parameter) -> bool:
    return any(parameter is p for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters())
