"""SASRec on jagged inputs: causal, batch-independent, and the recommender/losses agree with plain references."""
import pytest
import torch
import torch.nn.functional as F

from genrec.data.batch import JaggedBatch
from genrec.embedding import ItemEmbedding
from genrec.ops.jagged import jagged_to_padded, padded_to_jagged
from genrec.models.losses import FullSoftmaxLoss, SampledSoftmaxLoss
from genrec.models.recommender import SequentialRecommender
from tests.models.successor_pattern import train_on_successor_pattern
from genrec.models.sasrec import SASRec


def _batch(seqs: list[list[int]]) -> JaggedBatch:
    lengths = torch.tensor([len(s) for s in seqs])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    flat = torch.tensor([i for s in seqs for i in s])
    return JaggedBatch(item_ids=flat, offsets=offsets, target_ids=flat, user_ids=torch.arange(len(seqs)))


def _model(num_items=30, dim=16, similarity="dot") -> SequentialRecommender:
    torch.manual_seed(0)
    return SequentialRecommender(ItemEmbedding(num_items, dim, init_std=0.5),
                                 SASRec(dim=dim, num_layers=2, num_heads=2, max_len=8, dropout=0.0),
                                 similarity).eval()


def test_jagged_padded_round_trip():
    values = torch.randn(6, 3)
    offsets = torch.tensor([0, 2, 2, 6])
    padded = jagged_to_padded(values, offsets, 4, pad_value=-1.0)
    assert padded.shape == (3, 4, 3) and (padded[1] == -1).all() and (padded[0, 2:] == -1).all()
    assert torch.equal(padded_to_jagged(padded, offsets), values)


def test_causal_a_later_item_never_changes_an_earlier_output():
    model = _model()
    base = model.encode(_batch([[1, 2, 3, 4, 5, 6]]))
    changed = model.encode(_batch([[1, 2, 3, 4, 9, 7]]))
    assert torch.allclose(base[:4], changed[:4], atol=1e-6)
    assert not torch.allclose(base[4:], changed[4:], atol=1e-3)


def test_each_sequence_is_independent_of_its_batch():
    model = _model()
    seqs = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11]]
    together = model.encode(_batch(seqs))
    alone = torch.cat([model.encode(_batch([s])) for s in seqs])
    assert torch.allclose(together, alone, atol=1e-5)


def test_longer_than_max_len_is_an_error():
    with pytest.raises(ValueError, match="max_len=8"):
        _model().encode(_batch([list(range(1, 11))]))


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
def test_score_all_equals_explicit_products(similarity):
    model = _model(similarity=similarity)
    batch = _batch([[1, 2], [3, 4, 5]])
    scores = model.score_all(batch)
    states = model.encode(batch)[batch.offsets[1:] - 1]
    table = model.item_embedding.table()
    if similarity == "cosine":
        states, table = F.normalize(states, dim=-1), F.normalize(table, dim=-1)
    expected = states @ table.T
    assert torch.isinf(scores[:, 0]).all()
    assert torch.allclose(scores[:, 1:], expected[:, 1:], atol=1e-5)


def _loss(loss_fn, q, pos, model):
    ids = loss_fn.item_ids(pos, model.num_items)
    return loss_fn(q, pos, ids, model.all_item_vectors() if ids is None else model.item_vectors(ids))


def test_full_softmax_equals_cross_entropy_over_items():
    model = _model()
    q, pos = torch.randn(5, 16), torch.tensor([1, 7, 30, 2, 2])
    loss = _loss(FullSoftmaxLoss(temperature=0.5), q, pos, model)
    logits = q @ model.item_embedding.table()[1:].T / 0.5
    assert torch.allclose(loss, F.cross_entropy(logits, pos - 1))


def test_sampled_softmax_uniform_matches_reference_and_masks_hits():
    model = _model()
    q, pos = torch.randn(4, 16), torch.tensor([3, 5, 5, 9])
    torch.manual_seed(1)
    loss = _loss(SampledSoftmaxLoss(num_negatives=20, negatives="uniform", temperature=0.1), q, pos, model)
    torch.manual_seed(1)
    neg = torch.randint(1, 31, (20,))
    table = model.item_embedding.table()
    pos_logit = (q * table[pos]).sum(-1, keepdim=True)
    neg_logit = (q @ table[neg].T).masked_fill(neg[None] == pos[:, None], float("-inf"))
    expected = F.cross_entropy(torch.cat([pos_logit, neg_logit], 1) / 0.1, torch.zeros(4, dtype=torch.long))
    assert torch.allclose(loss, expected, atol=1e-6)


def test_in_batch_negatives_use_other_positives_with_logq():
    model = _model()
    q, pos = torch.randn(3, 16), torch.tensor([4, 4, 6])
    loss = _loss(SampledSoftmaxLoss(negatives="in_batch"), q, pos, model)
    table = model.item_embedding.table()
    ids, counts = torch.tensor([4, 6]), torch.tensor([2.0, 1.0])
    neg = q @ table[ids].T - torch.log(counts / 3)
    neg = neg.masked_fill(ids[None] == pos[:, None], float("-inf"))
    logits = torch.cat([(q * table[pos]).sum(-1, keepdim=True), neg], 1)
    assert torch.allclose(loss, F.cross_entropy(logits, torch.zeros(3, dtype=torch.long)), atol=1e-6)


@pytest.mark.parametrize("loss_fn", [FullSoftmaxLoss(), SampledSoftmaxLoss(num_negatives=7, negatives="mixed")])
def test_training_loss_looks_up_once_and_equals_separate_lookups(loss_fn):
    model = _model()
    batch = _batch([[1, 2, 3], [4, 5]])
    batch.target_ids = torch.tensor([2, 3, 9, 5, 6])
    calls = []
    model.item_embedding.tables.collection.register_forward_hook(lambda *args: calls.append(1))
    torch.manual_seed(3)
    loss = model.training_loss(batch, loss_fn)
    assert len(calls) == 1
    torch.manual_seed(3)
    expected = _loss(loss_fn, model.encode(batch), batch.target_ids, model)
    assert torch.allclose(loss, expected, atol=1e-6)


def test_item_ids_out_of_range_name_the_feature():
    with pytest.raises(ValueError, match=r"feature 'item': IDs must lie in \[0, 31\).*\[1, 31\]"):
        _model().encode(_batch([[1, 31]]))


def test_training_reduces_loss_on_a_learnable_pattern():
    torch.manual_seed(0)
    first, last = train_on_successor_pattern(SASRec(16, 1, 1, max_len=8, dropout=0.0))
    assert last < 0.1 * first


def test_sampled_softmax_per_position_draws_negatives_for_every_position():
    model = _model()
    q, pos = torch.randn(4, 16), torch.tensor([3, 5, 5, 9])
    torch.manual_seed(2)
    loss = _loss(SampledSoftmaxLoss(num_negatives=20, temperature=0.1, per_position=True), q, pos, model)
    torch.manual_seed(2)
    neg = torch.randint(1, 31, (4, 20))
    table = model.item_embedding.table()
    pos_logit = (q * table[pos]).sum(-1, keepdim=True)
    neg_logit = torch.stack([q[m] @ table[neg[m]].T for m in range(4)]).masked_fill(neg == pos[:, None], float("-inf"))
    expected = F.cross_entropy(torch.cat([pos_logit, neg_logit], 1) / 0.1, torch.zeros(4, dtype=torch.long))
    assert torch.allclose(loss, expected, atol=1e-6)
