"""Evaluation users split over processes: each exactly once, the same number of batches on every process."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genrec.data.samplers import EvenShardBatchSampler


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
