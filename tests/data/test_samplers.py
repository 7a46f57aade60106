"""Batch samplers: the training order (a function of seed and epoch; resumable mid-epoch), and evaluation users
split over processes (each exactly once, the same number of batches on every process)."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from genrec.data.samplers import EvenShardBatchSampler, TrainBatchSampler


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 300), batch_size=st.integers(1, 40), world=st.integers(1, 4), bucketed=st.booleans(),
       seed=st.integers(0, 3), epoch=st.integers(0, 3))
def test_training_order_covers_every_example_and_equal_batch_counts(n, batch_size, world, bucketed, seed, epoch):
    lengths = np.random.default_rng(n).integers(1, 50, size=n) if bucketed else None
    samplers = [TrainBatchSampler(n, batch_size, seed, rank, world, lengths, bucket_batches=3)
                for rank in range(world)]
    for s in samplers:
        s.set_epoch(epoch)
    batches = [list(s) for s in samplers]
    assert {len(b) for b in batches} == {len(samplers[0])}  # every process runs the same number of batches
    seen = [i for per_rank in batches for batch in per_rank for i in batch]
    per_process = -(-n // world)
    assert len(seen) == per_process * world and set(seen) == set(range(n))  # padded with repeats, as DDP does
    assert all(0 < len(batch) <= batch_size for per_rank in batches for batch in per_rank)


def test_training_order_depends_on_seed_and_epoch_only():
    sampler = TrainBatchSampler(100, 8, seed=3)
    torch.manual_seed(0)
    np.random.seed(0)
    first = list(sampler)
    torch.manual_seed(1)
    np.random.seed(1)
    assert list(sampler) == first  # the global random state plays no part
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first
    assert list(TrainBatchSampler(100, 8, seed=4)) != first
    sampler.set_epoch(0)
    assert list(sampler) == first


def test_resume_skips_the_batches_already_trained_once():
    sampler = TrainBatchSampler(50, 4, seed=0)
    sampler.set_epoch(2)
    full = list(sampler)
    sampler.resume(epoch=2, batches_done=5)
    assert list(sampler) == full[5:]
    assert list(sampler) == full  # only the resumed pass skips
    sampler.resume(epoch=2, batches_done=len(full))
    sampler.set_epoch(3)  # the checkpoint ended epoch 2: epoch 3 starts from its first batch
    epoch3 = list(sampler)
    assert len(epoch3) == len(full) and epoch3 != full


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 400), batch_size=st.integers(2, 64), world=st.integers(1, 8))
def test_every_index_once_and_equal_batch_counts(n, batch_size, world):
    if n < world:
        return
    samplers = [EvenShardBatchSampler(n, batch_size, rank, world) for rank in range(world)]
    batches = [list(s) for s in samplers]
    assert len({len(b) for b in batches}) == 1 and all(len(b) == len(s) for b, s in zip(batches, samplers))
    seen = sorted(i for per_rank in batches for batch in per_rank for i in batch)
    assert seen == list(range(n))
    assert all(0 < len(batch) <= batch_size for per_rank in batches for batch in per_rank)


def test_by_hand():
    assert list(EvenShardBatchSampler(7, 2, 0, 2)) == [[0, 2], [4, 6]]
    assert list(EvenShardBatchSampler(7, 2, 1, 2)) == [[1, 3], [5]]


def test_fewer_examples_than_processes_is_an_error():
    with pytest.raises(ValueError, match="cannot split 1 examples"):
        EvenShardBatchSampler(1, 4, 1, 2)
