"""Batch samplers: the training order (a function of the seed and the epoch alone, so a resumed run replays it
exactly), and evaluation users split over processes (each user exactly once, the same number of batches everywhere).
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Sampler


class TrainBatchSampler(Sampler[list[int]]):
    """Shuffled training batches of process ``rank`` of ``world``, drawn from ``(seed, epoch)`` only.

    Every epoch permutes the ``n`` examples with a generator seeded by ``(seed, epoch)`` (never the global random
    state), pads the permutation with its own first examples to a multiple of ``world`` (as ``DistributedSampler``
    does: every process runs the same number of batches, which sharded tables need) and gives process ``r`` every
    ``world``-th example from ``r``. With ``lengths``, every run of ``batch_size * bucket_batches`` examples of that
    share is sorted by length before it is cut into batches and the batches are shuffled (less padding, batches of
    similar length). :meth:`resume` skips the batches a checkpoint had already trained on.

    Lightning calls :meth:`set_epoch` before each epoch (through ``DataLoader.batch_sampler.sampler``, hence
    :attr:`sampler`). :attr:`generator` is reseeded with the epoch too; pass it as the ``DataLoader``'s generator,
    whose worker seeds then no longer draw from the global random state.

    Args:
        n: number of examples.
        batch_size: examples per batch (the last batch of an epoch may be smaller).
        seed: the run's seed.
        rank / world: this process and the number of processes.
        lengths: ``(n,)`` input lengths, to batch similar lengths together; ``None``: plain shuffled batches.
        bucket_batches: batches per length-sorted run.
    """

    def __init__(self, n: int, batch_size: int, seed: int, rank: int = 0, world: int = 1,
                 lengths: np.ndarray | None = None, bucket_batches: int = 50):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside [0, {world})")
        self.n, self.batch_size, self.seed, self.rank, self.world = n, batch_size, seed, rank, world
        self.lengths, self.bucket_batches = lengths, bucket_batches
        self.epoch, self.generator = 0, torch.Generator()
        self._skip: tuple[int, int] | None = None
        self.set_epoch(0)

    @property
    def sampler(self) -> "TrainBatchSampler":
        """Itself: Lightning sets the epoch of ``dataloader.sampler`` and ``dataloader.batch_sampler.sampler`` only."""
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.generator.manual_seed(int(np.random.SeedSequence([self.seed, epoch, 1]).generate_state(1)[0]))

    def resume(self, epoch: int, batches_done: int) -> None:
        """The next iteration over ``epoch`` starts after its first ``batches_done`` batches (once)."""
        self._skip = (epoch, batches_done)

    def __len__(self) -> int:
        return math.ceil(math.ceil(self.n / self.world) / self.batch_size)

    def batches(self, epoch: int) -> list[np.ndarray]:
        """Every batch of ``epoch`` for this process, in training order."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self.n)
        per_process = math.ceil(self.n / self.world)
        order = np.resize(order, per_process * self.world)[self.rank::self.world]  # pads with the first ones
        if self.lengths is None:
            return [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        run = self.batch_size * self.bucket_batches
        batches = []
        for start in range(0, len(order), run):
            part = order[start:start + run]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            batches += [part[i:i + self.batch_size] for i in range(0, len(part), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self) -> Iterator[list[int]]:
        skip = 0
        if self._skip is not None and self._skip[0] == self.epoch:
            skip, self._skip = self._skip[1], None
        for batch in self.batches(self.epoch)[skip:]:
            yield batch.tolist()


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
