"""Prefetching a dynamic item table's rows inside genrec-train (``model.embedding.prefetch_depth > 0``).

A step's lookup is known before the step runs: its input items and the loss's candidates, drawn in the data loader
(:mod:`genrec.data.candidates`). :class:`PrefetchLoader` keeps the training batches the loader handed out (and
reads up to ``prefetch_depth`` more ahead); :class:`Prefetch` submits them to the table's background mapping
(:meth:`~genrec.embedding.dynamic.DynamicItemEmbedding.prefetch`: admission, fetch from tier 2, eviction) while the
steps before them train, each with its own batch's event time. The table maps the same batches in the same order
with and without prefetching, so training gives the same result.

Exact resume: a checkpoint (the step checkpoint every ``checkpoint_every_n_steps``) must not hold a batch mapped
ahead of it, or the resumed run would map it again. So no batch is submitted past the next checkpoint (nor past
``trainer.max_steps``) until that checkpoint is written: the step right after a checkpoint maps its own batch when it
starts, without overlap, exactly as the resumed run does.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Iterator

import lightning as L
from lightning.pytorch.callbacks import Callback

from genrec.data.batch import event_time
from genrec.data.candidates import DrawnBatch
from genrec.embedding.dynamic import DynamicItemEmbedding


class PrefetchLoader:
    """The training loader, remembering the batches it handed out that have not trained yet (the Trainer asks for
    one ahead of the step) and reading ahead when asked for more (:meth:`upcoming`)."""

    def __init__(self, loader: Any):
        self.loader = loader
        self._iterator: Iterator | None = None
        self.pending: deque[DrawnBatch] = deque()  # the batch training now, those handed out, those read ahead
        self._handed = 0  # of ``pending``, how many the Trainer has

    @property
    def batch_sampler(self) -> Any:
        return self.loader.batch_sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> "PrefetchLoader":
        self._iterator, self._handed = iter(self.loader), 0
        self.pending.clear()
        return self

    def __next__(self) -> DrawnBatch:
        if self._handed == len(self.pending):
            self.pending.append(next(self._iterator))
        self._handed += 1
        return self.pending[self._handed - 1]

    def upcoming(self, count: int) -> list[DrawnBatch]:
        """The next ``count`` batches from the one training now, read ahead as needed (fewer at the epoch's end)."""
        while len(self.pending) < count:
            try:
                self.pending.append(next(self._iterator))
            except StopIteration:
                break
        return list(self.pending)[:count]

    def trained(self) -> None:
        """The oldest batch has trained."""
        self.pending.popleft()
        self._handed -= 1


class Prefetch(Callback):
    """Submits upcoming batches to a dynamic item table's background mapping (see the module doc).

    Args:
        every_n_steps: the step checkpoints' interval (``checkpoint_every_n_steps``; 0: none mid-epoch).
    """

    def __init__(self, every_n_steps: int = 0):
        self.every_n_steps = every_n_steps
        self.embedding: DynamicItemEmbedding | None = None
        self.depth = 0
        self.loader: PrefetchLoader | None = None
        self._submitted = 0  # of the loader's pending batches, how many were submitted (from the front)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Finds the task's dynamic item table and wraps the training loader (training only)."""
        if stage != "fit":
            return
        embedding = getattr(getattr(pl_module, "model", None), "item_embedding", None)
        if not isinstance(embedding, DynamicItemEmbedding) or not hasattr(pl_module, "train_collate"):
            raise TypeError("prefetching serves a retrieval model's dynamic item table (embedding@model.embedding="
                            f"dynamic), got {type(pl_module).__name__}")
        self.embedding, self.depth = embedding, embedding.config.prefetch_depth
        trainer.datamodule.train_wrap = self._wrap

    def _wrap(self, loader: Any) -> PrefetchLoader:
        self.loader, self._submitted = PrefetchLoader(loader), 0
        return self.loader

    def _allowed(self, trainer: L.Trainer) -> int:
        """How many batches from the one starting now may be mapped: it, and up to ``depth`` more, none past the
        next step checkpoint or the last step."""
        step, allowed = trainer.global_step, 1
        while allowed <= self.depth:
            after = step + allowed  # the global step once the last allowed batch has trained
            if (self.every_n_steps and after % self.every_n_steps == 0) or after >= max(trainer.max_steps, 0) > 0:
                break
            allowed += 1
        return allowed

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._submitted = 0

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        for drawn in self.loader.upcoming(self._allowed(trainer))[self._submitted:]:
            self.embedding.prefetch(drawn.batch.to_kjt(), drawn.lookup_ids(self.embedding.num_embeddings - 1),
                                    event_time(drawn.batch))
            self._submitted += 1

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.loader.trained()
        self._submitted -= 1
