"""Pipelined sparse input (``sharding.pipeline=sparse_dist``): TorchRec's ``TrainPipelineSparseDist`` over sharded
static item tables, so that the next batch's input distribution (the all-to-all sending every ID to the process
that owns its row) runs while this batch computes.

What makes a step pipelinable: the sharded collection must read a ``KeyedJaggedTensor`` the batch already carries
(TorchRec's tracer only pipelines a sharded module whose input is an attribute of the batch). So the pipelined
path's data loader (:class:`SparseCollate`) does, per batch, what the step does otherwise: it draws the loss's
candidates (the uniform negatives of a sampled softmax; every item for the full softmax) and builds the one KJT
of the step's lookup (input items + candidates, IDs checked or hashed), giving a :class:`SparseBatch`. The
negatives come from a generator seeded by the run's seed and the batch's example indices, so a batch gets the
same negatives however many batches the pipeline holds ahead, in any worker, after a resume, and at any process
count. The step (``RetrievalTask.forward`` on a SparseBatch) then looks the KJT up and calls :func:`sparse_step`.

On CPU the pipeline has no CUDA streams: the input distribution of batch ``i + 1`` is started before the forward
of batch ``i`` and finished after it, as asynchronous gloo all-to-alls (gloo's own threads); on 2 shared cores
that gave no measurable speed-up (scripts/bench/bench_pipeline.py, docs/results.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from torchrec import KeyedJaggedTensor
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
from torchrec.streamable import Pipelineable

from genrec.data.batch import JaggedBatch
from genrec.data.candidates import CandidateCollate, DrawnBatch
from genrec.embedding.item_embedding import lookup_features
from genrec.embedding.tables import TableConfig, checked_ids


@dataclass
class SparseBatch(Pipelineable):
    """A training batch whose item-table input is ready.

    Attributes:
        batch: the jagged batch (``N`` input positions, ``N`` targets).
        features: the step's one lookup: ``item`` (the ``N`` input items, jagged by sequence) and
            ``item_candidates`` (the ``C`` candidates in its first bag), IDs checked against the table.
        candidate_ids: ``(C,)`` the loss's ``item_ids`` (``None``: the whole table, ``C = num_items + 1``).
    """

    batch: JaggedBatch
    features: KeyedJaggedTensor
    candidate_ids: torch.Tensor | None

    @property
    def batch_size(self) -> int:
        return self.batch.batch_size

    def to(self, device: torch.device, non_blocking: bool = False) -> "SparseBatch":
        ids = self.candidate_ids
        return SparseBatch(self.batch.to(device), self.features.to(device, non_blocking=non_blocking),
                           None if ids is None else ids.to(device, non_blocking=non_blocking))

    def record_stream(self, stream: torch.Stream) -> None:
        self.features.record_stream(stream)
        for tensor in (*vars(self.batch).values(), self.candidate_ids):
            if isinstance(tensor, torch.Tensor):
                tensor.record_stream(stream)

    def pin_memory(self) -> "SparseBatch":
        ids = self.candidate_ids
        pinned = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in vars(self.batch).items()}
        return SparseBatch(JaggedBatch(**pinned), self.features.pin_memory(), None if ids is None else ids.pin_memory())


def sparse_batch(drawn: DrawnBatch, table: TableConfig) -> SparseBatch:
    """A batch whose candidates were drawn (:class:`~genrec.data.candidates.DrawnBatch`) with its lookup KJT built;
    ``table`` is the item table (its first feature the input items, its second the candidates)."""
    batch = drawn.batch
    lookup = drawn.lookup_ids(table.num_embeddings - 1)
    features = lookup_features(table.features[0], batch.item_ids, batch.lengths, lookup)
    return SparseBatch(batch, checked_ids(features, (table,)), drawn.candidate_ids)


class SparseCollate(CandidateCollate):
    """The pipelined path's ``collate_fn`` over :class:`genrec.data.batch.IndexedExamples`: examples ->
    :class:`SparseBatch`, the candidates drawn as every retrieval run draws them
    (:class:`~genrec.data.candidates.CandidateCollate`).

    Args:
        loss: the task's loss (its ``item_ids`` names the candidates).
        table: the item table's config.
        seed: the run's seed.
    """

    def __init__(self, loss: nn.Module, table: TableConfig, seed: int):
        super().__init__(loss, table.num_embeddings - 1, seed)
        self.table = table

    def __call__(self, indexed: tuple[list[int], list]) -> SparseBatch:
        return sparse_batch(super().__call__(indexed), self.table)


class StepOutput(NamedTuple):
    """What ``pipeline.progress`` returns for the batch it trained."""

    loss: torch.Tensor  # detached
    batch_size: int


def sparse_step(task: nn.Module, batch: SparseBatch, looked_up: dict) -> tuple[torch.Tensor, StepOutput]:
    """The rest of a RetrievalTask's step on a SparseBatch once ``looked_up`` (the sharded collection's output for
    ``batch.features``: a JaggedTensor per feature) is there -> ``(loss, StepOutput)``, the pair TorchRec's
    pipeline expects (it backpropagates the first). Opaque to TorchRec's tracer (``torch.fx.wrap``, by the caller)."""
    embedding = task.model.item_embedding
    inputs, items = looked_up[embedding.feature].values(), looked_up[embedding.candidates].values()
    loss = task.model.loss_from_embeddings(batch.batch, task.loss, batch.candidate_ids, inputs, items)
    loss = task.global_mean(loss, batch.batch)
    return loss, StepOutput(loss.detach(), batch.batch_size)


def sparse_dist_pipeline(model: DistributedModelParallel, optimizer: torch.optim.Optimizer
                         ) -> TrainPipelineSparseDist:
    """TorchRec's pipeline over ``model`` (the DMP of a RetrievalTask) stepping ``optimizer`` (the dense
    parameters; the tables' optimizer is fused into the backward). Its ``progress(iterator of SparseBatch)``
    trains one batch and returns its :class:`StepOutput`; it raises ``StopIteration`` once the iterator and the batches
    it holds ahead are used up. The first call traces the task's forward and rewires the sharded collection's
    forward to read what the pipeline distributed ahead; ``detach()`` restores it (for lookups outside the
    pipeline, e.g. evaluation) and the next ``progress`` rewires it again."""
    return TrainPipelineSparseDist(model, optimizer, model.device, execute_all_batches=True)
