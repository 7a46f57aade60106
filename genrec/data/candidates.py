"""A training batch's loss candidates drawn in the data loader.

A sampled-softmax step scores its positives against drawn negatives. Drawn in the loader — from a generator seeded by
the run's seed and the batch's example indices — they are known as soon as the batch is, so a loader (or TorchRec's
pipeline) can prepare a step's lookup while the previous step trains (a dynamic table maps and fetches its rows
ahead: genrec.training.prefetch), and a batch draws the same negatives however many batches are held ahead, in any
worker, after a resume and at any process count.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from genrec.data.batch import JaggedBatch, collate


@dataclass
class DrawnBatch:
    """A training batch and its loss's candidates.

    Attributes:
        batch: the jagged batch (``N`` input positions, ``N`` targets).
        candidate_ids: ``(C,)`` the item IDs the loss scores (``loss.item_ids``: positives, drawn negatives, in-batch
            negatives), or ``None``: the whole table.
    """

    batch: JaggedBatch
    candidate_ids: torch.Tensor | None

    @property
    def batch_size(self) -> int:
        return self.batch.batch_size

    def lookup_ids(self, num_items: int) -> torch.Tensor:
        """``(C,)`` the IDs the step looks up beside its inputs (every ID ``0..num_items`` for the whole table)."""
        return torch.arange(num_items + 1) if self.candidate_ids is None else self.candidate_ids

    def to(self, device: torch.device, non_blocking: bool = False) -> "DrawnBatch":
        ids = self.candidate_ids
        return DrawnBatch(self.batch.to(device), None if ids is None else ids.to(device, non_blocking=non_blocking))


def batch_generator(seed: int, indices: list[int]) -> torch.Generator:
    """A generator seeded by the run's ``seed`` and a batch's example ``indices``."""
    state = np.random.SeedSequence([seed, *indices]).generate_state(2, np.uint64)[0]
    return torch.Generator().manual_seed(int(state) & (2**63 - 1))


class CandidateCollate:
    """A ``collate_fn`` over :class:`~genrec.data.batch.IndexedExamples`: examples -> :class:`DrawnBatch`, the
    candidates named by ``loss.item_ids(targets, num_items, generator)`` with :func:`batch_generator`.

    Args:
        loss: the task's loss (anything with ``item_ids(positive_ids, num_items, generator=...)``).
        num_items: the items the negatives are drawn from (``1..num_items``).
        seed: the run's seed.
    """

    def __init__(self, loss: Any, num_items: int, seed: int):
        self.loss, self.num_items, self.seed = loss, num_items, seed

    def __call__(self, indexed: tuple[list[int], list]) -> DrawnBatch:
        indices, examples = indexed
        batch = collate(examples)
        generator = batch_generator(self.seed, indices)
        return DrawnBatch(batch, self.loss.item_ids(batch.target_ids, self.num_items, generator=generator))
