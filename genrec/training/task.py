"""The one base of genrec's LightningModules: optimizer set-up, the training-loss logging, and evaluation by
full-corpus ranking (exact over all users of all processes). A task says only how it computes its loss and how it
scores every item for a batch of users; the retrieval and the generative tasks override those two (and the
generative task adds the share of invalid decoded IDs to its metrics).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import lightning as L
import torch
from torch import nn
from torchrec.optim.optimizers import in_backward_optimizer_filter

from genrec.data.batch import JaggedBatch
from genrec.embedding import EmbeddingTables
from genrec.eval.metrics import Evaluator

#: ``(batch) -> (B, num_items + 1)`` scores of every item (column 0: padding) for the batch's users
Scorer = Callable[[JaggedBatch], torch.Tensor]
#: sums a tensor over the processes (identity in one process)
Reduce = Callable[[torch.Tensor], torch.Tensor]
#: ``optim.schedule`` values: the learning rate after the warm-up
SCHEDULES = ("constant", "cosine")


def lr_factor(step: int, warmup_steps: int, schedule: str, total_steps: float) -> float:
    """The learning rate's multiplier at optimizer step ``step`` (from 0): linear warm-up over ``warmup_steps``,
    then ``constant`` 1, or ``cosine`` from 1 down to 0 at step ``total_steps`` (the run's last)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1.0, total_steps - warmup_steps))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW's parameter groups over the parameters of ``model`` not updated by a fused (in-backward) optimizer:
    ``weight_decay`` on matrices, none on biases, norms and embedding tables. Offline tasks and the stream's learner
    build their optimizer from these."""
    tables = {id(p) for m in model.modules() if isinstance(m, (nn.Embedding, EmbeddingTables)) for p in m.parameters()}
    decay, no_decay = [], []
    for _, p in in_backward_optimizer_filter(model.named_parameters()):
        (no_decay if p.ndim < 2 or id(p) in tables else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class RecommenderTask(L.LightningModule):
    """Trains ``model`` with :meth:`training_loss`; validates and tests by ranking every item with the scorer of
    :meth:`make_scorer` (metrics logged as ``val/<metric>`` and ``test/<metric>``).

    Args:
        model: the recommender (its embedding tables may be sharded by genrec.dist's strategy: their fused
            optimizer then updates them in the backward pass and they are left out of :meth:`configure_optimizers`).
        lr / weight_decay / betas: AdamW settings (no weight decay on biases, norms and embedding tables).
        warmup_steps: linear learning-rate warm-up over that many steps (0: none).
        schedule: the learning rate after the warm-up, one of :data:`SCHEDULES` (``cosine`` decays to 0 at the
            trainer's last step, ``trainer.estimated_stepping_batches``: a run cut short by ``max_time`` or early
            stopping ends before the decay does).
        ks: metric cut-offs.
        exclude_history: remove the user's history items from the ranking.
    """

    def __init__(self, model: nn.Module, lr: float = 1e-3, weight_decay: float = 0.0,
                 betas: tuple[float, float] = (0.9, 0.98), warmup_steps: int = 0, schedule: str = "constant",
                 ks: tuple[int, ...] = (5, 10, 20), exclude_history: bool = True):
        super().__init__()
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule: got {schedule!r}, expected one of {SCHEDULES}")
        self.model = model
        self.lr, self.weight_decay, self.betas, self.warmup_steps = lr, weight_decay, tuple(betas), warmup_steps
        self.schedule = schedule
        self.evaluator = Evaluator(tuple(ks), exclude_history)
        self._scorer: Scorer | None = None
        #: users scored by the last pass of each split ("val", "test"), summed over processes: fewer than the split
        #: has when the trainer limits its batches (``trainer.limit_test_batches``)
        self.users_scored: dict[str, int] = {}

    # ---- what a task provides ------------------------------------------------------------------------------------

    def training_loss(self, batch: JaggedBatch) -> torch.Tensor:
        """The batch's mean training loss (a scalar)."""
        raise NotImplementedError

    def make_scorer(self) -> Scorer:
        """A scorer for one evaluation pass (built once per pass: it may precompute every item's vector)."""
        raise NotImplementedError

    def eval_extras(self, reduce: Reduce) -> dict[str, float]:
        """Metrics beyond the ranking metrics for the pass that just ended, summed over processes by ``reduce``."""
        return {}

    def run_info(self) -> dict[str, Any]:
        """What the run's numbers depend on beyond its config, for ``metrics.json``."""
        return {}

    def notes(self, metrics: dict[str, float]) -> list[str]:
        """Lines printed above the test table about this task's own ``metrics`` (one split's)."""
        return []

    @property
    def exclude_history(self) -> bool:
        return self.evaluator.exclude_history

    @exclude_history.setter
    def exclude_history(self, value: bool) -> None:
        self.evaluator.exclude_history = value

    # ---- training --------------------------------------------------------------------------------------------------

    def forward(self, batch: JaggedBatch) -> torch.Tensor:
        """The training loss (so a data-parallel wrapper's ``forward`` runs the whole step)."""
        return self.training_loss(batch)

    def training_step(self, batch: JaggedBatch, batch_idx: int) -> torch.Tensor:
        loss = self.training_loss(batch)
        # with several processes, the mean of the processes' losses is the global batch's mean loss
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=batch.batch_size,
                 sync_dist=True)
        return loss

    def configure_optimizers(self):
        """AdamW over the parameters not updated by a fused (in-backward) optimizer, with the optional warm-up and
        decay (:func:`lr_factor`)."""
        optimizer = torch.optim.AdamW(parameter_groups(self.model, self.weight_decay), lr=self.lr, betas=self.betas)
        if not self.warmup_steps and self.schedule == "constant":
            return optimizer
        total_steps = self.trainer.estimated_stepping_batches
        if self.schedule != "constant" and math.isinf(total_steps):
            raise ValueError(f"schedule={self.schedule} decays over the run's steps: set trainer.max_epochs or "
                             "trainer.max_steps")
        factor = functools.partial(lr_factor, warmup_steps=self.warmup_steps, schedule=self.schedule,
                                   total_steps=total_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ---- evaluation ------------------------------------------------------------------------------------------------

    def _sum_over_processes(self, totals: torch.Tensor) -> torch.Tensor:
        return self.trainer.strategy.reduce(totals.to(self.device), reduce_op="sum").cpu()

    def _eval_epoch_start(self) -> None:
        self._scorer = self.make_scorer()

    def _eval_step(self, batch: JaggedBatch) -> None:
        # scored in fp32 whatever trainer.precision trains in: the metrics measure the trained weights, not the
        # ties and rounding of bf16 scores over the whole catalogue
        with torch.autocast(self.device.type, enabled=False):
            self.evaluator.update(self._scorer(batch).float(), batch)

    def _eval_epoch_end(self, prefix: str) -> None:
        self.evaluator.metrics.merge(self._sum_over_processes)  # exact totals over every user of every process
        self.users_scored[prefix] = self.evaluator.metrics.count
        metrics = {**self.evaluator.compute(), **self.eval_extras(self._sum_over_processes)}
        for name, value in metrics.items():
            # already the value over all processes (identical everywhere): "max" keeps it exact
            self.log(f"{prefix}/{name}", value, prog_bar=name in ("ndcg@10", "recall@10"), sync_dist=True,
                     reduce_fx="max")
        self.evaluator.reset()
        self._scorer = None

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
