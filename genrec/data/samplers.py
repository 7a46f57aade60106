"""Splitting evaluation users over processes: each user exactly once, the same number of batches everywhere."""
from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from torch.utils.data import Sampler


class EvenShardBatchSampler(Sampler[list[int]]):
    """Batches of indices ``0..n - 1`` for process ``rank`` of ``world``.

    Process ``r`` takes indices ``r, r + world, r + 2 world, ...`` (so the shares differ by at most one) and splits
    them into ``ceil(ceil(n / world) / batch_size)`` batches of near-equal size, the same count on every process;
    no index is repeated or dropped (unlike ``DistributedSampler``, which pads with repeats).

    Args:
        n: number of examples.
        batch_size: largest batch.
        rank / world: this process and the number of processes.
    """

    def __init__(self, n: int, batch_size: int, rank: int, world: int):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside [0, {world})")
        self.indices = np.arange(rank, n, world)
        self.num_batches = math.ceil(math.ceil(n / world) / batch_size)
        if len(self.indices) < self.num_batches:
            raise ValueError(f"cannot split {n} examples into {self.num_batches} non-empty batches on each of "
                             f"{world} processes: lower the process count or raise the batch size")

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[list[int]]:
        for part in np.array_split(self.indices, self.num_batches):
            yield part.tolist()
