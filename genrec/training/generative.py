"""The LightningModule for generative models over semantic IDs: next-token loss, beam-search evaluation with
the same ranking metrics as the retrieval models (and the share of decoded tuples that are no item)."""
from __future__ import annotations

import lightning as L
import torch
from torch import nn

from genrec.data.batch import JaggedBatch
from genrec.embedding import EmbeddingTables
from genrec.eval.metrics import Evaluator
from genrec.models.generative import GenerativeRecommender


class GenerativeTask(L.LightningModule):
    """Trains a :class:`GenerativeRecommender` with its own loss; validates and tests by beam search: the beam's
    ``top_k`` items become a score matrix ranked by genrec's :class:`Evaluator` (``val/<metric>``,
    ``test/<metric>``), so Recall/NDCG at cut-offs up to ``top_k`` are exact for the beam's list and MRR counts
    only targets inside it. Also logged: ``invalid_rate``, the share of returned tuples that map to no item
    (0 with constrained decoding).

    Args:
        model: the generative recommender.
        lr / weight_decay / betas: AdamW settings (no weight decay on biases, norms and embedding tables).
        warmup_steps: linear learning-rate warm-up over that many steps (0: none).
        ks: metric cut-offs.
        exclude_history: remove the user's history items from the results (in the beam's last step).
    """

    def __init__(self, model: GenerativeRecommender, lr: float = 1e-3, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.98), warmup_steps: int = 0, ks: tuple[int, ...] = (5, 10, 20),
                 exclude_history: bool = True):
        super().__init__()
        self.model = model
        self.model.exclude_history = exclude_history
        self.lr, self.weight_decay, self.betas, self.warmup_steps = lr, weight_decay, tuple(betas), warmup_steps
        self.evaluator = Evaluator(tuple(ks), exclude_history)
        self.scorer = model.scorer()  # the beam's list as a score matrix; counts the tuples that are no item

    def training_step(self, batch: JaggedBatch, batch_idx: int) -> torch.Tensor:
        loss = self.model.loss(batch)
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=batch.batch_size)
        return loss

    def _eval_step(self, batch: JaggedBatch) -> None:
        self.evaluator.update(self.scorer(batch), batch)

    def _sum_over_processes(self, totals: torch.Tensor) -> torch.Tensor:
        return self.trainer.strategy.reduce(totals.to(self.device), reduce_op="sum").cpu()

    def _eval_epoch_end(self, prefix: str) -> None:
        # exact totals over the users of every process (one process: unchanged), as in RetrievalTask
        self.evaluator.metrics.merge(self._sum_over_processes)
        decoded, invalid = self._sum_over_processes(torch.tensor(self.scorer.pop_counts(),
                                                                 dtype=torch.float64)).tolist()
        metrics = {**self.evaluator.compute(), "invalid_rate": invalid / max(decoded, 1.0)}
        for name, value in metrics.items():
            # already the value over all processes (identical everywhere): "max" keeps it exact
            self.log(f"{prefix}/{name}", value, prog_bar=name in ("ndcg@10", "recall@10"), sync_dist=True,
                     reduce_fx="max")
        self.evaluator.reset()

    def validation_step(self, batch: JaggedBatch, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: JaggedBatch, batch_idx: int) -> None:
        self._eval_step(batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def configure_optimizers(self):
        tables = {id(p) for m in self.model.modules() if isinstance(m, (nn.Embedding, EmbeddingTables))
                  for p in m.parameters()}
        decay, no_decay = [], []
        for p in self.model.parameters():
            (no_decay if p.ndim < 2 or id(p) in tables else decay).append(p)
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": self.weight_decay},
                                       {"params": no_decay, "weight_decay": 0.0}], lr=self.lr, betas=self.betas)
        if not self.warmup_steps:
            return optimizer
        warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / self.warmup_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}
