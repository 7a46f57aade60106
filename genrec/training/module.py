"""The LightningModule for next-item retrieval models: loss on jagged batches, full-corpus validation/test."""
from __future__ import annotations

import lightning as L
import torch
import torch.distributed as dist
from torch import nn
from torchrec.optim.optimizers import in_backward_optimizer_filter

from genrec.data.batch import JaggedBatch
from genrec.embedding import EmbeddingTables
from genrec.eval.metrics import Evaluator
from genrec.models.recommender import SequentialRecommender


class RetrievalTask(L.LightningModule):
    """Trains a :class:`SequentialRecommender` with next-item loss at every position; validates and tests by
    full-corpus ranking (metrics logged as ``val/<metric>`` and ``test/<metric>``).

    Runs unchanged in one process and under genrec.dist's TorchRecStrategy, which shards the embedding tables
    inside ``model`` and fuses their optimizer into the backward pass (those parameters are then left out of
    :meth:`configure_optimizers`). With several processes the training loss is normalised by the global number of
    positions and evaluation metrics are exact sums over all users of all processes.

    Args:
        model: the recommender.
        loss: a loss from :mod:`genrec.models.losses`.
        lr / weight_decay / betas: AdamW settings (no weight decay on biases, norms and embedding tables).
        ks: metric cut-offs.
        exclude_history: remove the user's history items from the ranking.
    """

    def __init__(self, model: SequentialRecommender, loss: nn.Module, lr: float = 1e-3, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.98), ks: tuple[int, ...] = (5, 10, 20),
                 exclude_history: bool = True):
        super().__init__()
        self.model, self.loss = model, loss
        self.lr, self.weight_decay, self.betas = lr, weight_decay, tuple(betas)
        self.evaluator = Evaluator(tuple(ks), exclude_history)
        self._item_vectors: torch.Tensor | None = None

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

    def forward(self, batch: JaggedBatch) -> torch.Tensor:
        """The training loss (so a data-parallel wrapper's ``forward`` runs the whole step)."""
        return self.training_loss(batch)

    def training_step(self, batch: JaggedBatch, batch_idx: int) -> torch.Tensor:
        loss = self.training_loss(batch)
        # the mean over processes of the rescaled losses is the global batch's mean loss
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=batch.batch_size,
                 sync_dist=True)
        return loss

    def _eval_epoch_start(self) -> None:
        # every item's vector once per epoch (for a sharded table: one gather of all rows, a collective call)
        self._item_vectors = self.model.all_item_vectors()

    def _eval_step(self, batch: JaggedBatch) -> None:
        self.evaluator.update(self.model.score_all(batch, self._item_vectors).float(), batch)

    def _eval_epoch_end(self, prefix: str) -> None:
        self.evaluator.metrics.merge(
            lambda totals: self.trainer.strategy.reduce(totals.to(self.device), reduce_op="sum").cpu())
        for name, value in self.evaluator.compute().items():
            # already the value over all users of all processes (identical everywhere): "max" keeps it exact
            self.log(f"{prefix}/{name}", value, prog_bar=name in ("ndcg@10", "recall@10"), sync_dist=True,
                     reduce_fx="max")
        self.evaluator.reset()
        self._item_vectors = None

    def on_validation_epoch_start(self) -> None:
        self._eval_epoch_start()

    def validation_step(self, batch: JaggedBatch, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def on_test_epoch_start(self) -> None:
        self._eval_epoch_start()

    def test_step(self, batch: JaggedBatch, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """AdamW over the parameters not updated by a fused (in-backward) optimizer."""
        tables = {id(p) for m in self.model.modules() if isinstance(m, EmbeddingTables) for p in m.parameters()}
        decay, no_decay = [], []
        for _, p in in_backward_optimizer_filter(self.model.named_parameters()):
            (no_decay if p.ndim < 2 or id(p) in tables else decay).append(p)
        return torch.optim.AdamW([{"params": decay, "weight_decay": self.weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}], lr=self.lr, betas=self.betas)
