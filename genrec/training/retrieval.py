"""The task of next-item retrieval models: next-item loss at every position, full-corpus validation and test."""
from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.distributed as dist
from lightning.pytorch.loops.utilities import _is_max_limit_reached
from torch import nn
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist

from genrec.data.batch import JaggedBatch, event_time
from genrec.data.candidates import CandidateCollate, DrawnBatch
from genrec.dist.pipeline import SparseBatch, SparseCollate, StepOutput, sparse_dist_pipeline, sparse_step
from genrec.models.recommender import SequentialRecommender
from genrec.training.task import RecommenderTask, Scorer

torch.fx.wrap("sparse_step")  # TorchRec's tracer records the dense rest of a pipelined step as one opaque call


class RetrievalTask(RecommenderTask):
    """Trains a :class:`SequentialRecommender` with next-item loss at every position; ranks every item by its
    similarity to the user state.

    Runs unchanged in one process and under genrec.dist's TorchRecStrategy, which shards the embedding tables
    inside ``model`` and fuses their optimizer into the backward pass. With several processes the training loss is
    normalised by the global number of positions.

    The loss's candidates are drawn in the data loader (:class:`~genrec.data.candidates.CandidateCollate`, seeded by
    ``seed`` and the batch's example indices), so a step's lookup is known before the step runs (a dynamic table can
    prefetch it: :mod:`genrec.training.prefetch`); a plain :class:`JaggedBatch` draws them in the step.

    Args:
        model: the recommender.
        loss: a loss from :mod:`genrec.models.losses`.
        seed: the run's seed (the data loader's negatives derive from it).
        kwargs: :class:`RecommenderTask` settings (optimizer, cut-offs, history removal).
    """

    def __init__(self, model: SequentialRecommender, loss: nn.Module, seed: int = 0, **kwargs):
        super().__init__(model, **kwargs)
        self.loss, self.seed = loss, seed

    def train_collate(self) -> CandidateCollate:
        """The data loader's collation: batches with their candidates drawn."""
        return CandidateCollate(self.loss, self.model.num_items, self.seed)

    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None)
        if stage == "fit" and datamodule is not None and hasattr(datamodule, "train_collate"):
            datamodule.train_collate = self.train_collate()

    def forward(self, batch: JaggedBatch | DrawnBatch | SparseBatch) -> torch.Tensor | tuple[torch.Tensor, StepOutput]:
        """The training step's loss of a JaggedBatch or DrawnBatch; for a :class:`~genrec.dist.pipeline.SparseBatch`
        (and for the stand-in TorchRec's pipeline traces), ``(loss, StepOutput)`` with the sharded collection reading
        the batch's ready KeyedJaggedTensor, so that the pipeline can distribute it ahead."""
        if isinstance(batch, (JaggedBatch, DrawnBatch)):
            return self.training_loss(batch)
        return sparse_step(self, batch, self.model.item_embedding.tables.collection(batch.features))

    def training_loss(self, batch: JaggedBatch | DrawnBatch) -> torch.Tensor:
        """The batch's mean loss (see :meth:`global_mean`), with the candidates the loader drew, or drawn now."""
        if isinstance(batch, DrawnBatch):
            return self.global_mean(self.model.candidates_loss(batch.batch, self.loss, batch.candidate_ids),
                                    batch.batch)
        return self.global_mean(self.model.training_loss(batch, self.loss), batch)

    def global_mean(self, loss: torch.Tensor, batch: JaggedBatch) -> torch.Tensor:
        """``loss`` (the batch's mean), rescaled when several processes train so that the gradient averaged over
        processes (DDP, and TorchRec's gradient division for sharded tables) is the gradient of the mean over
        all positions of the global batch: ``loss * N_local * world / N_global``."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return loss
        positions = torch.tensor(float(batch.target_ids.numel()), dtype=torch.float64, device=loss.device)
        total = positions.clone()
        dist.all_reduce(total)
        return loss * (positions * dist.get_world_size() / total).to(loss.dtype)

    def on_train_batch_start(self, batch: JaggedBatch | DrawnBatch, batch_idx: int) -> None:
        """A dynamic item table (genrec.embedding.dynamic) expires rows by event time: the batch's latest event."""
        time = event_time(batch.batch if isinstance(batch, DrawnBatch) else batch)
        if time is not None:
            self.model.item_embedding.set_event_time(time)

    def on_train_epoch_end(self) -> None:
        """A dynamic item table's counters into the run's logs, once per epoch."""
        counters = self.model.item_embedding.counters()
        if counters:
            self.log_dict({f"item_table/{k}": float(v) for k, v in counters.items()})

    def run_info(self) -> dict[str, Any]:
        """A dynamic item table's counters (admitted, evicted, live rows, hits per tier, ...), this process's."""
        counters = self.model.item_embedding.counters()
        return {"item_table": counters} if counters else {}

    def make_scorer(self) -> Scorer:
        # every item's vector once per pass (for a sharded table: one gather of all rows, a collective call)
        item_vectors = self.model.all_item_vectors()
        return lambda batch: self.model.score_all(batch, item_vectors)


class PipelinedRetrievalTask(RetrievalTask):
    """A RetrievalTask trained through TorchRec's TrainPipelineSparseDist (``sharding.pipeline=sparse_dist``):
    the batch ``i + 1``'s IDs are sent to the processes owning their rows while batch ``i`` computes.

    The pipeline runs forward, backward and the optimizer step itself, so this task optimises manually: each
    :meth:`training_step` gets Lightning's batch iterator (its ``dataloader_iter`` form) and trains exactly one
    batch, except the epoch's last call, which also trains the batches the pipeline holds ahead (Lightning ends
    the epoch once its loader is used up); validation and the end of training detach the pipeline from the
    model. Batches are :class:`~genrec.dist.pipeline.SparseBatch` from the data
    module's pipelined collation (:meth:`train_collate`). Gradients of the dense part are clipped here, by norm,
    at ``gradient_clip_val`` (Lightning clips only automatic optimization).

    Args:
        model / loss / seed / kwargs: as for :class:`RetrievalTask`.
        gradient_clip_val: clip the dense gradients' norm to this (``None``: no clipping).
    """

    #: TorchRecStrategy calls training_step directly: the pipeline runs the DistributedModelParallel itself
    drives_model = True

    def __init__(self, model: SequentialRecommender, loss: nn.Module, seed: int = 0,
                 gradient_clip_val: float | None = None, **kwargs):
        super().__init__(model, loss, seed, **kwargs)
        self.automatic_optimization = False
        self.gradient_clip_val = gradient_clip_val
        self._pipeline: TrainPipelineSparseDist | None = None
        self._source: Iterator | None = None  # Lightning's iterator of this epoch
        self._batches: Iterator[SparseBatch] | None = None

    def train_collate(self) -> SparseCollate:
        """The data loader's collation into SparseBatches."""
        return SparseCollate(self.loss, self.model.item_embedding.tables.configs[0], self.seed)

    def setup(self, stage: str) -> None:
        if stage == "fit" and not hasattr(self.trainer.datamodule, "train_collate"):
            raise TypeError("the pipelined task trains from genrec's SequenceDataModule (its loader builds the "
                            f"SparseBatches), got {type(self.trainer.datamodule).__name__}")
        super().setup(stage)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Nothing: the pipelined path serves static tables only (no event time to pass on)."""

    def training_step(self, dataloader_iter: Iterator) -> None:
        dmp = self.trainer.strategy.dmp
        if self._pipeline is None:
            self._pipeline = sparse_dist_pipeline(dmp, self.optimizers())
        # the pipeline steps only a model in training mode; Lightning sets the mode of the task, not of its wrapper
        dmp.training = self.training
        if dataloader_iter is not self._source:  # a new epoch (TorchRec restarts on a new iterator)
            self._source, self._batches = dataloader_iter, (batch for batch, _, _ in dataloader_iter)
        self._train(self._pipeline.progress(self._batches))
        if dataloader_iter.done:  # Lightning's last call of the epoch: train what the pipeline holds
            while not _is_max_limit_reached(self.trainer.global_step, self.trainer.max_steps):
                try:
                    self._train(self._pipeline.progress(self._batches))
                except StopIteration:
                    break
                # Lightning counts one logged step per call; the loggers' step stays the optimizer step count
                self.trainer.fit_loop.epoch_loop._batches_that_stepped += 1

    def _train(self, output: StepOutput) -> None:
        """After one optimizer step: the learning-rate schedule's step, the loss logged."""
        scheduler = self.lr_schedulers()
        if scheduler is not None:
            scheduler.step()
        self.log("train/loss", output.loss, prog_bar=True, on_step=True, on_epoch=True,
                 batch_size=output.batch_size, sync_dist=True)

    def _detach(self) -> None:
        """The sharded collection's own forward back (evaluation looks the table up outside the pipeline); the next
        ``progress`` rewires it (TorchRec keeps batches in flight across a detach)."""
        if self._pipeline is not None:
            self._pipeline.detach()

    def on_validation_start(self) -> None:
        self._detach()

    def on_train_end(self) -> None:
        self._detach()

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.gradient_clip_val is not None:
            self.clip_gradients(optimizer, gradient_clip_val=self.gradient_clip_val, gradient_clip_algorithm="norm")
