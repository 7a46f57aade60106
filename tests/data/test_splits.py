"""Leave-one-out splits leak nothing; truncation keeps the most recent items; batches are jagged and exact."""
import numpy as np
import pandas as pd
import torch

from genrec.data.batch import EvalSequences, TrainSequences, collate
from genrec.data.synthetic import generate_synthetic



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


def test_synthetic_is_deterministic_and_seed_sensitive():
    a = generate_synthetic(num_users=200, num_items=100, num_clusters=5, seed=7)
    b = generate_synthetic(num_users=200, num_items=100, num_clusters=5, seed=7)
    c = generate_synthetic(num_users=200, num_items=100, num_clusters=5, seed=8)
    assert a.events.equals(b.events) and a.items.equals(b.items)
    assert not a.events.equals(c.events)


def test_synthetic_structure():
    log = generate_synthetic(num_users=2000, num_items=500, num_clusters=20, num_successors=4, seed=0)
    ev = log.events
    counts = ev["item"].value_counts()
    assert counts.iloc[0] > 10 * counts.median()                       # power-law popularity
    assert (ev.groupby("user")["timestamp"].diff().dropna() > 0).all()  # time moves forward
    # the cluster graph: from each cluster, its 5 most frequent next clusters take far more than the 5/20 of
    # transitions they would take by chance (measured: 0.68 on average)
    cluster = log.items["latent_cluster"].to_numpy()
    prev, nxt = ev["item"].to_numpy()[:-1], ev["item"].to_numpy()[1:]
    same_user = ev["user"].to_numpy()[:-1] == ev["user"].to_numpy()[1:]
    table = pd.crosstab(cluster[prev][same_user], cluster[nxt][same_user]).to_numpy()
    top5 = np.sort(table, axis=1)[:, ::-1][:, :5].sum(axis=1) / table.sum(axis=1)
    assert top5.mean() > 0.5
    # titles carry the cluster: items of one cluster share their category and title vocabulary
    per_cluster = log.items.groupby("latent_cluster")["categories"].nunique()
    assert (per_cluster == 1).all()
