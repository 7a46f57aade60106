"""The residual transition prior (genrec.models.prior_head) and the co-occurrence initialisation of the item table
(genrec.models.item_init): both read the training parts only (a transition planted in the validation and test
targets never reaches them), the prior is the weighted log counts of the last three items, a training position's
prior leaves the position's own transitions out, and the loss and the ranking see the same sum."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from genrec.conf import compose_config
from genrec.data.batch import EvalSequences, TrainSequences, collate
from genrec.data.schema import SequenceData
from genrec.embedding import ItemEmbedding
from genrec.errors import ConfigError
from genrec.models.counts import LAST3_SKIP, ItemTransitions
from genrec.models.item_init import initialize_items, transition_vectors
from genrec.models.losses import FullSoftmaxLoss
from genrec.models.prior_head import TransitionPrior
from genrec.models.recommender import SequentialRecommender
from genrec.models.sasrec import SASRec
from genrec.training.builders import build_task

HELD_OUT = (31, 32)  # planted validation and test targets: items no training part holds


def sequences(*rows: list[int], num_items: int | None = None) -> SequenceData:
    """SequenceData with one user per row of dense item IDs (leave-one-out: the last two are held out)."""
    items = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows])
    num_items = num_items or int(items.max())
    return SequenceData(name="t", item_ids=items, offsets=np.cumsum([0] + [len(r) for r in rows]).astype(np.int64),
                        timestamps=None, item_raw_ids=np.arange(num_items + 1, dtype=object),
                        user_raw_ids=np.arange(len(rows)))


def clustered(held_out: bool) -> SequenceData:
    """60 users walking inside one of three clusters of 10 items (1-10, 11-20, 21-30); their validation and test
    targets are the planted pair ``HELD_OUT`` (``held_out=True``, the same transition for every user) or two more
    items of their cluster."""
    rng = np.random.default_rng(0)
    rows = []
    for u in range(60):
        cluster = 1 + 10 * (u % 3)
        walk = list(rng.integers(cluster, cluster + 10, 10))  # the same walks either way
        rows.append(walk[:8] + (list(HELD_OUT) if held_out else walk[8:]))
    return sequences(*rows, num_items=32)


def eval_batch(data: SequenceData, split: str):
    examples = EvalSequences(data, 20, split)
    return collate([examples[i] for i in range(len(examples))])


def test_prior_counts_training_parts_only():
    planted, plain = TransitionPrior.from_data(clustered(True)), TransitionPrior.from_data(clustered(False))
    for name in ("crow", "col", "log_counts", "keys", "counts"):  # the held-out targets change nothing
        assert torch.equal(getattr(planted, name), getattr(plain, name)), name
    # every test history ends with the planted validation target 31: the planted 31 -> 32 is never counted
    batch = eval_batch(clustered(True), "test")
    assert (batch.item_ids[batch.last_positions()] == HELD_OUT[0]).all()
    assert (planted(batch, training=False)[:, list(HELD_OUT)] == 0).all()


def test_item_init_reads_training_parts_only():
    planted, known = transition_vectors(clustered(True), 4)
    plain, _ = transition_vectors(clustered(False), 4)
    np.testing.assert_array_equal(planted, plain)
    assert not known[list(HELD_OUT)].any() and not known[0] and known[1:31].all()


def test_item_init_places_items_that_follow_each_other_close():
    data = clustered(True)
    model = SequentialRecommender(ItemEmbedding(32, 8), SASRec(8, num_layers=1, num_heads=1, max_len=20))
    weight = model.item_embedding.tables.weight(model.item_embedding.table_name)
    before = weight.detach().clone()
    initialize_items(model, data, "transitions_svd")
    after = weight.detach()
    # rows without a training transition (padding, the held-out items) keep their random values
    assert torch.equal(after[[0, *HELD_OUT]], before[[0, *HELD_OUT]])
    assert after[1:31].std().item() == pytest.approx(before[1:].std().item(), rel=1e-5)
    similarity = after[1:31] @ after[1:31].T
    same = torch.arange(30)[:, None] // 10 == torch.arange(30)[None, :] // 10
    assert similarity[same].mean() > 5 * similarity[~same].abs().mean()


def test_item_init_refuses_an_unknown_name():
    model = SequentialRecommender(ItemEmbedding(32, 8), SASRec(8, num_layers=1, num_heads=1, max_len=20))
    with pytest.raises(ConfigError, match="model.item_init"):
        initialize_items(model, clustered(True), "svd")


def test_prior_is_the_weighted_log_counts_of_the_last_three_items():
    data = clustered(False)
    prior, heuristic = TransitionPrior.from_data(data, weight=2.0), ItemTransitions(data, **LAST3_SKIP)
    log_counts = heuristic.counts.toarray()
    log_counts = np.log1p(log_counts)
    for split in ("valid", "test"):
        batch = eval_batch(data, split)
        items, ends = batch.item_ids.numpy(), batch.offsets[1:].numpy()
        by_hand = sum(2.0 * 0.5 ** j * log_counts[items[ends - 1 - j]] for j in range(3))  # every history has 3+
        np.testing.assert_allclose(prior(batch, training=False).detach().numpy(), by_hand, rtol=1e-6, atol=1e-6)


def test_training_prior_leaves_each_positions_own_transitions_out():
    # training parts: u0 [1, 2, 3], u1 [1, 2, 4], u2 [5, 6]; counted pairs (direct 1, skip-one 0.5):
    # 1->2: 2, 2->3: 1, 2->4: 1, 1..3: 0.5, 1..4: 0.5, 5->6: 1; voter weights 1, 0.5 (, 0.25)
    data = sequences([1, 2, 3, 7, 8], [1, 2, 4, 7, 8], [5, 6, 7, 8])
    prior = TransitionPrior.from_data(data)
    train = TrainSequences(data, 20)
    batch = collate([train[i] for i in range(len(train))])  # inputs [1, 2], [1, 2], [5]; targets [2, 3], [2, 4], [6]
    log = np.log
    expected = torch.zeros(5, 9, dtype=torch.float64)
    expected[0, [2, 3, 4]] = torch.tensor([log(2), log(1.5), log(1.5)])  # 1 -> 2 counted twice, once by this position
    expected[1, [2, 3, 4]] = torch.tensor([0.5 * log(3), 0.0, log(2) + 0.5 * log(1.5)])  # 2 -> 3, 1..3: u0's own
    expected[2] = expected[0]
    expected[3, [2, 3, 4]] = torch.tensor([0.5 * log(3), log(2) + 0.5 * log(1.5), 0.0])  # the mirror image for u1
    torch.testing.assert_close(prior(batch, training=True).detach().double(), expected)  # u2's 5 -> 6: its own
    # ranking u0's validation target from [1, 2, 3] counts its own pairs: 2 and 1 vote for 3
    history = collate([EvalSequences(data, 20, "valid")[0]])
    assert prior(history, training=False)[0, 3].item() == pytest.approx(0.5 * log(2) + 0.25 * log(1.5))


def test_loss_and_ranking_add_the_same_prior():
    torch.manual_seed(0)
    data = clustered(False)
    model = SequentialRecommender(ItemEmbedding(32, 8), SASRec(8, num_layers=1, num_heads=1, max_len=20, dropout=0.0),
                                  prior=TransitionPrior.from_data(data, weight=0.7))
    train = TrainSequences(data, 20)
    batch = collate([train[i] for i in range(8)])
    loss = FullSoftmaxLoss(temperature=0.5)
    states, table = model.encode(batch), model.all_item_vectors()
    by_hand = F.cross_entropy((states @ table[1:].T + model.prior(batch, training=True)[:, 1:]) / 0.5,
                              batch.target_ids - 1)
    trained = model.training_loss(batch, loss)
    assert trained.item() == pytest.approx(by_hand.item(), rel=1e-5)
    trained.backward()
    assert model.prior.weights.grad is not None and (model.prior.weights.grad.abs() > 0).all()
    history = eval_batch(data, "test")
    own = model.user_embeddings(history) @ table.T
    scores = model.score_all(history)
    np.testing.assert_allclose((scores - own)[:, 1:].detach().numpy(),
                               model.prior(history, training=False)[:, 1:].detach().numpy(), rtol=1e-5, atol=1e-6)
    assert (scores[:, 0] == float("-inf")).all()


def test_build_task_adds_the_prior_with_the_full_softmax_only():
    base = ["data.reader.num_users=50", "data.reader.num_items=32", "model.dim=8", "model.prior.enabled=true"]
    data = clustered(False)
    task = build_task(compose_config("train", base), data.num_items, data=data)
    assert isinstance(task.model.prior, TransitionPrior)
    assert task.model.prior.weights.tolist() == [1.0, 0.5, 0.25]
    assert "model.prior.weights" in dict(task.named_parameters())  # trained with the model
    with pytest.raises(ConfigError, match="model.prior"):
        build_task(compose_config("train", base + ["loss@model.loss=sampled"]), data.num_items, data=data)
    with pytest.raises(ValueError, match="needs the dataset"):
        build_task(compose_config("train", base), data.num_items)


def test_a_stacked_prior_leaves_the_models_gradients_as_without_it():
    data = clustered(False)
    train = TrainSequences(data, 20)
    batch = collate([train[i] for i in range(8)])
    grads = {}
    for prior in (None, TransitionPrior.from_data(data, fit="stacked")):
        torch.manual_seed(0)
        model = SequentialRecommender(ItemEmbedding(32, 8), SASRec(8, num_layers=1, num_heads=1, max_len=20,
                                                                   dropout=0.0), prior=prior)
        model.training_loss(batch, FullSoftmaxLoss(temperature=0.5)).backward()
        grads[prior is None] = {n: p.grad.clone() for n, p in model.named_parameters() if not n.startswith("prior")}
        if prior is not None:
            assert (prior.weights.grad.abs() > 0).all()  # the weights learn on the model's detached scores
    assert grads[True].keys() == grads[False].keys()
    for name, grad in grads[True].items():
        torch.testing.assert_close(grads[False][name], grad, msg=name)
    with pytest.raises(ConfigError, match="model.prior.fit"):
        TransitionPrior.from_data(data, fit="both")
