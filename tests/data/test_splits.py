"""Leave-one-out splits leak nothing; truncation keeps the most recent items; batches are jagged and exact."""
import numpy as np
import torch

from genrec.data.batch import EvalSequences, TrainSequences, collate



def test_no_split_sees_its_own_target(data):
    train = TrainSequences(data, max_len=1000)
    valid, test = EvalSequences(data, 1000, "valid"), EvalSequences(data, 1000, "test")
    for u in range(data.num_users):
        seq = data.sequence(u)
        v, t = valid[u], test[u]
        assert v.targets.tolist() == [seq[-2]] and t.targets.tolist() == [seq[-1]]
        assert v.items.tolist() == seq[:-2].tolist()            # validation input stops before its target
        assert t.items.tolist() == seq[:-1].tolist()            # test input ends with the validation item
    for i in range(len(train)):
        ex = train[i]
        seq = data.sequence(ex.user)
        # training inputs and targets come from the training part only: neither held-out position is used
        assert ex.items.tolist() == seq[:-3].tolist() and ex.targets.tolist() == seq[1:-2].tolist()


def test_truncation_keeps_most_recent(data):
    u = int(np.argmax(data.lengths))
    seq = data.sequence(u)
    assert len(seq) > 8
    test = EvalSequences(data, max_len=4, split="test")[u]
    assert test.items.tolist() == seq[-5:-1].tolist() and test.seen.tolist() == seq[:-1].tolist()
    train_users = TrainSequences(data, max_len=4).users
    ex = TrainSequences(data, max_len=4)[int(np.flatnonzero(train_users == u)[0])]
    assert ex.items.tolist() == seq[-7:-3].tolist() and ex.targets.tolist() == seq[-6:-2].tolist()


def test_collate_is_jagged(data):
    ds = EvalSequences(data, max_len=6, split="valid")
    batch = collate([ds[0], ds[1], ds[2]])
    assert batch.offsets.tolist() == [0, *np.cumsum([len(ds[i].items) for i in range(3)]).tolist()]
    for i in range(3):
        got = batch.item_ids[batch.offsets[i]:batch.offsets[i + 1]]
        assert got.tolist() == ds[i].items.tolist()
        # the query time of the last position is the target's time; earlier positions predict the next item
        q = batch.query_timestamps[batch.offsets[i]:batch.offsets[i + 1]]
        t = batch.timestamps[batch.offsets[i]:batch.offsets[i + 1]]
        assert torch.equal(q[:-1], t[1:])
    assert batch.target_ids.shape == (3,) and batch.seen_offsets[-1] == len(batch.seen_ids)
    kjt = batch.to_kjt()
    assert torch.equal(kjt["item"].values(), batch.item_ids) and torch.equal(kjt["item"].offsets(), batch.offsets)
