"""The LightningModule for next-item retrieval models: loss on jagged batches, full-corpus validation/test."""
from __future__ import annotations

import lightning as L
import torch
from torch import nn

from genrec.data.batch import JaggedBatch
from genrec.eval.metrics import Evaluator
from genrec.models.recommender import SequentialRecommender


class RetrievalTask(L.LightningModule):
    """Trains a :class:`SequentialRecommender` with next-item loss at every position; validates and tests by
    full-corpus ranking (metrics logged as ``val/<metric>`` and ``test/<metric>``).

    Args:
        model: the recommender.
        loss: a loss from :mod:`genrec.models.losses`.
        lr / weight_decay / betas: AdamW settings (no weight decay on biases, norms and the item table).
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

    def training_step(self, batch: JaggedBatch, batch_idx: int) -> torch.Tensor:
        loss = self.loss(self.model.encode(batch), batch.target_ids, self.model)
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=batch.batch_size)
        return loss

    def _eval_step(self, batch: JaggedBatch) -> None:
        self.evaluator.update(self.model.score_all(batch).float(), batch)

    def _eval_epoch_end(self, prefix: str) -> None:
        for name, value in self.evaluator.compute().items():
            self.log(f"{prefix}/{name}", value, prog_bar=name in ("ndcg@10", "recall@10"), sync_dist=True)
        self.evaluator.reset()

    def validation_step(self, batch: JaggedBatch, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: JaggedBatch, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        table = {id(p) for p in self.model.item_embedding.parameters()}
        decay, no_decay = [], []
        for p in self.model.parameters():
            (no_decay if p.ndim < 2 or id(p) in table else decay).append(p)
        return torch.optim.AdamW([{"params": decay, "weight_decay": self.weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}], lr=self.lr, betas=self.betas)
