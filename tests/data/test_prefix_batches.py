"""Prefix examples (one target each) leak nothing and cover every training target; length buckets keep every
example exactly once per epoch and batch similar lengths; the bucketed loaders cover every user."""
import numpy as np
import pytest
import torch

from genrec.data.batch import EvalSequences, JaggedBatch, TrainPrefixes, TrainSequences, collate, prefixes
from genrec.data.samplers import TrainBatchSampler
from genrec.data.datamodule import SequenceDataModule



def test_prefixes_are_every_training_target_with_the_items_before_it(data):
    prefixes = TrainPrefixes(data, max_len=4)
    expected = [(u, seq[max(0, t - 4):t].tolist(), int(seq[t]))
                for u in range(data.num_users) for seq in [data.sequence(u)] for t in range(1, len(seq) - 2)]
    got = [(ex.user, ex.items.tolist(), int(ex.targets[0])) for ex in (prefixes[i] for i in range(len(prefixes)))]
    assert got == expected  # the last training item is a target, the validation and test items never are
    assert prefixes.lengths.tolist() == [len(items) for _, items, _ in expected]


def test_prefixes_of_a_sequence_batch_are_its_prefix_examples(data):
    """``prefixes`` of a batch of whole training sequences = the :class:`TrainPrefixes` examples of those users (no
    truncation: every prefix fits max_len)."""
    sequences, examples = TrainSequences(data, 1000), TrainPrefixes(data, 1000)
    got = prefixes(collate([sequences[i] for i in range(len(sequences))]))
    expected = collate([examples[i] for i in range(len(examples))])
    for name in ("item_ids", "offsets", "target_ids", "user_ids", "timestamps", "query_timestamps"):
        assert torch.equal(getattr(got, name), getattr(expected, name)), name


def test_prefixes_hand_checked():
    batch = JaggedBatch(item_ids=torch.tensor([1, 2, 3, 7, 8]), offsets=torch.tensor([0, 3, 5]),
                        target_ids=torch.tensor([2, 3, 4, 8, 9]), user_ids=torch.tensor([5, 6]),
                        seen_ids=torch.tensor([1, 2, 3, 4, 7, 8, 9]), seen_offsets=torch.tensor([0, 4, 7]),
                        user_features=torch.tensor([[10], [20]]))
    rows = prefixes(batch)
    assert rows.item_ids.tolist() == [1, 1, 2, 1, 2, 3, 7, 7, 8] and rows.offsets.tolist() == [0, 1, 3, 6, 7, 9]
    assert rows.target_ids.tolist() == [2, 3, 4, 8, 9] and rows.user_ids.tolist() == [5, 5, 5, 6, 6]
    assert rows.seen_offsets.tolist() == [0, 4, 8, 12, 15, 18]
    assert rows.seen_ids.tolist() == [1, 2, 3, 4] * 3 + [7, 8, 9] * 2
    assert rows.user_features.tolist() == [[10]] * 3 + [[20]] * 2


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
