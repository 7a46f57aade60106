"""The task of next-item retrieval models: next-item loss at every position, full-corpus validation and test."""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from genrec.data.batch import JaggedBatch
from genrec.models.recommender import SequentialRecommender
from genrec.training.task import RecommenderTask, Scorer


class RetrievalTask(RecommenderTask):
    """Trains a :class:`SequentialRecommender` with next-item loss at every position; ranks every item by its
    similarity to the user state.

    Runs unchanged in one process and under genrec.dist's TorchRecStrategy, which shards the embedding tables
    inside ``model`` and fuses their optimizer into the backward pass. With several processes the training loss is
    normalised by the global number of positions.

    Args:
        model: the recommender.
        loss: a loss from :mod:`genrec.models.losses`.
        kwargs: :class:`RecommenderTask` settings (optimizer, cut-offs, history removal).
    """

    def __init__(self, model: SequentialRecommender, loss: nn.Module, **kwargs):
        super().__init__(model, **kwargs)
        self.loss = loss

    def training_loss(self, batch: JaggedBatch) -> torch.Tensor:
        """The batch's mean loss, rescaled when several processes train so that the gradient averaged over
        processes (DDP, and TorchRec's gradient division for sharded tables) is the gradient of the mean over
        all positions of the global batch: ``loss * N_local * world / N_global``."""
        loss = self.model.training_loss(batch, self.loss)
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return loss
        positions = torch.tensor(float(batch.target_ids.numel()), dtype=torch.float64, device=loss.device)
        total = positions.clone()
        dist.all_reduce(total)
        return loss * (positions * dist.get_world_size() / total).to(loss.dtype)

    def on_train_batch_start(self, batch: JaggedBatch, batch_idx: int) -> None:
        """A dynamic item table (genrec.embedding.dynamic) expires rows by event time: the batch's latest event."""
        times = batch.query_timestamps if batch.query_timestamps is not None else batch.timestamps
        if times is not None and times.numel() and hasattr(self.model.item_embedding, "set_event_time"):
            self.model.item_embedding.set_event_time(int(times.max()))

    def on_train_epoch_end(self) -> None:
        """A dynamic item table's counters into the run's logs, once per epoch."""
        embedding = self.model.item_embedding
        if hasattr(embedding, "counters"):
            self.log_dict({f"item_table/{k}": float(v) for k, v in embedding.counters().items()})

    def run_info(self) -> dict[str, Any]:
        """A dynamic item table's counters (admitted, evicted, live rows, hits per tier, ...), this process's."""
        embedding = self.model.item_embedding
        return {"item_table": embedding.counters()} if hasattr(embedding, "counters") else {}

    def make_scorer(self) -> Scorer:
        # every item's vector once per pass (for a sharded table: one gather of all rows, a collective call)
        item_vectors = self.model.all_item_vectors()
        return lambda batch: self.model.score_all(batch, item_vectors)
