"""Prefix examples (one target each) leak nothing and cover every training target; length buckets keep every
example exactly once per epoch and batch similar lengths; the bucketed loaders cover every user."""
import numpy as np
import pytest
import torch

from genrec.data.batch import EvalSequences, TrainPrefixes, TrainSequences
from genrec.data.samplers import TrainBatchSampler
from genrec.data.datamodule import SequenceDataModule



def test_prefixes_are_every_training_target_with_the_items_before_it(data):
    prefixes = TrainPrefixes(data, max_len=4)
    expected = [(u, seq[max(0, t - 4):t].tolist(), int(seq[t]))
                for u in range(data.num_users) for seq in [data.sequence(u)] for t in range(1, len(seq) - 2)]
    got = [(ex.user, ex.items.tolist(), int(ex.targets[0])) for ex in (prefixes[i] for i in range(len(prefixes)))]
    assert got == expected  # the last training item is a target, the validation and test items never are
    assert prefixes.lengths.tolist() == [len(items) for _, items, _ in expected]


def test_lengths_match_the_examples(data):
    for dataset in (TrainSequences(data, 5), EvalSequences(data, 5, "valid"), EvalSequences(data, 5, "test")):
        assert dataset.lengths.tolist() == [len(dataset[i].items) for i in range(len(dataset))]


def test_length_buckets_hold_every_example_once_and_sort_within_runs():
    lengths = np.random.default_rng(0).integers(1, 30, size=1000)
    sampler = TrainBatchSampler(1000, batch_size=16, seed=0, lengths=lengths, bucket_batches=4)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 63
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert all(list(lengths[b]) == sorted(lengths[b]) for b in batches)
    spread = np.mean([lengths[b].max() - lengths[b].min() for b in batches])
    assert spread < 8  # random batches of 16 out of 1..29 spread over ~25
    sampler.set_epoch(1)
    assert list(sampler) != batches  # shuffled anew every epoch


def test_bucketed_loaders_cover_every_user(data, tmp_path):
    module = SequenceDataModule({}, max_len=5, batch_size=32, eval_batch_size=50, bucket_by_length=True)
    module.data = data
    users = torch.cat([b.user_ids for b in module.val_dataloader()])
    assert sorted(users.tolist()) == list(range(data.num_users))
    sizes = [b.lengths for b in module.test_dataloader()]
    assert all(int(a.max()) <= int(b.min()) for a, b in zip(sizes[:-1], sizes[1:]))  # sorted by history length
    train = list(module.train_dataloader())
    assert sum(b.batch_size for b in train) == len(TrainSequences(data, 5))
    with pytest.raises(ValueError, match="train_examples"):
        SequenceDataModule({}, train_examples="windows")
