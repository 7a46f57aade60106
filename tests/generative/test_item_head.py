"""The SID generator's item head (``item_head=true``): its loss, and the four ways the model ranks (``codes``,
``hybrid``, ``guided``, ``items``), each against a direct computation; the scores preference alignment compares
(``ranking_scores``) against the ranking's own."""
from unittest import mock

import pytest
import torch

from genrec.data.batch import prefixes
from genrec.errors import UserError
from genrec.models.hstu import HSTU
from genrec.models.sasrec import SASRec
from genrec.models.sid_generator import SIDGenerator
from tests.generative.helpers import eval_batch, make_table, one_thread, train_batch

single_thread = pytest.fixture(autouse=True)(one_thread)

TABLE = make_table(40, (4, 5, 3))
HISTORIES = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10, 11], [12]]


BACKBONES = {"sasrec": lambda: SASRec(dim=16, num_layers=2, num_heads=2, max_len=40, dropout=0.0),
             "hstu": lambda: HSTU(dim=16, num_layers=2, num_heads=2, attention_dim=8, hidden_dim=8, max_len=40,
                                  dropout=0.0, time_bias=False)}


def generator(backbone: str = "sasrec", **kw) -> SIDGenerator:
    torch.manual_seed(0)
    model = SIDGenerator(TABLE, BACKBONES[backbone](),
                         **{"item_head": True, "beam": 8, "top_k": 5, **kw}).eval()
    with torch.no_grad():  # spread the untrained model's distributions so that rankings differ clearly
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(3.0)
    return model


def test_loss_adds_the_item_heads_cross_entropy_to_the_next_token_loss():
    """On one sequence ``a b c``: the loss is the mean code NLL plus the mean of ``-log p_item(target)``, each
    target's item distribution computed again from its own prefix through the decoding path."""
    model = generator()
    a, b, c = 5, 17, 30
    with torch.no_grad():
        loss = model.loss(train_batch([[a, b, c]]))
        steps = (([], a), ([a], b), ([a, b], c))
        codes = sum(float(model.item_log_probs(eval_batch([h]), torch.tensor([[i]]))) for h, i in steps)
        items = sum(float(model.item_head_log_probs(eval_batch([h]))[0, i]) for h, i in steps)
    assert float(loss) == pytest.approx(-codes / (3 * 3) - items / 3, abs=1e-5)


def test_without_the_item_head_the_loss_is_the_next_token_loss_alone():
    with_head, without = generator(), generator(item_head=False)
    without.load_state_dict({k: v for k, v in with_head.state_dict().items() if "item_head" not in k})
    batch = train_batch([[5, 17, 30], [2, 9]])
    with torch.no_grad():
        targets = with_head.target_log_probs(batch)
        assert float(without.loss(batch)) == pytest.approx(float(targets.nll(with_head.sids.codes[targets.items])), abs=1e-6)
        assert float(with_head.loss(batch)) == pytest.approx(float(without.loss(batch) + targets.item_nll()), abs=1e-6)


def test_hybrid_re_ranks_the_beams_items_by_code_plus_item_log_probability():
    model = generator(rank="hybrid")
    batch = eval_batch(HISTORIES)
    beam, ranked = model.generate(batch), model.ranked(batch)
    with torch.no_grad():
        head = model.item_head_log_probs(batch)
    for user in range(len(HISTORIES)):
        expected = {int(i): float(s) + float(head[user, i]) for i, s in zip(beam.items[user], beam.scores[user])}
        got = {int(i): float(s) for i, s in zip(ranked.items[user], ranked.scores[user])}
        assert got.keys() == expected.keys()
        assert all(got[i] == pytest.approx(expected[i], abs=1e-5) for i in got)
        assert ranked.scores[user].tolist() == sorted(ranked.scores[user].tolist(), reverse=True)
        assert (ranked.codes[user] == model.sids.codes[ranked.items[user]]).all()
    assert not torch.equal(ranked.items, beam.items)  # the re-ranking changed some order


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_hybrid_weighs_the_code_log_probability_by_code_weight(weight):
    """``code_weight`` w: the beam's items by w x code + item-head log-probability; at 0 the item head alone orders
    the beam's items."""
    model = generator(rank="hybrid", code_weight=weight)
    batch = eval_batch(HISTORIES)
    beam, ranked = model.generate(batch), model.ranked(batch)
    with torch.no_grad():
        head = model.item_head_log_probs(batch)
    for user in range(len(HISTORIES)):
        expected = sorted(((weight * float(s) + float(head[user, i]), int(i))
                           for i, s in zip(beam.items[user], beam.scores[user])), reverse=True)
        assert ranked.items[user].tolist() == [i for _, i in expected]
        assert ranked.scores[user].tolist() == pytest.approx([s for s, _ in expected], abs=1e-5)
    with pytest.raises(UserError, match="model.decoding.code_weight: got -1"):
        generator(rank="hybrid", code_weight=-1)


@pytest.mark.parametrize("weight", [0.0, 1.0])
def test_guided_beam_that_keeps_every_prefix_ranks_the_corpus_by_weighted_code_plus_item_head(weight):
    """``guided`` with a beam as wide as the corpus: every unseen item by w x its teacher-forced code log-probability
    plus its item-head log-probability, exhaustively; at w = 0 exactly the ``items`` ranking."""
    model = generator(rank="guided", code_weight=weight, beam=40)
    batch = eval_batch(HISTORIES)
    ranked = model.ranked(batch)
    with torch.no_grad():
        every = torch.arange(1, 41).expand(len(HISTORIES), -1)
        exact = weight * model.item_log_probs(batch, every) + model.item_head_log_probs(batch)[:, 1:]
    for user, history in enumerate(HISTORIES):
        exact[user, torch.tensor(history) - 1] = float("-inf")
    top = exact.topk(5, dim=1)
    assert torch.equal(ranked.items, top.indices + 1)
    assert torch.allclose(ranked.scores, top.values, atol=1e-4)
    if weight == 0:
        items = generator(rank="items").ranked(batch)
        assert torch.equal(ranked.items, items.items) and torch.allclose(ranked.scores, items.scores, atol=1e-5)


def test_narrow_guided_beam_finds_more_of_the_item_heads_top_items_than_the_plain_beam():
    """A beam of 5 steered by the item head (w = 0) holds more of the head's own top-5 than a plain beam of 5
    re-ranked by it (``hybrid``, w = 0): the plain beam follows the codes, the guided one the head's mass (here
    10 against 2 of the 20)."""
    batch = eval_batch(HISTORIES)
    best = generator(rank="items").ranked(batch).items
    found = {}
    for rank in ("hybrid", "guided"):
        items = generator(rank=rank, code_weight=0.0, beam=5).ranked(batch).items
        found[rank] = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(items, best))
    assert found["guided"] > 2 * found["hybrid"]


def test_items_ranks_the_whole_corpus_by_the_item_head_without_the_history():
    model = generator(rank="items")
    batch = eval_batch(HISTORIES)
    ranked = model.ranked(batch)
    with torch.no_grad():
        head = model.item_head_log_probs(batch)
    for user, history in enumerate(HISTORIES):
        scores = head[user].clone()
        scores[history] = float("-inf")
        top = scores.topk(5)
        assert ranked.items[user].tolist() == top.indices.tolist()
        assert torch.allclose(ranked.scores[user], top.values)
        assert not set(history) & set(ranked.items[user].tolist())
    assert torch.allclose(head.exp().sum(1), torch.ones(len(HISTORIES)), atol=1e-5)
    assert (head[:, 0] == float("-inf")).all()  # the padding row is never an item


def test_codes_ranks_exactly_like_the_beam():
    model = generator(rank="codes")
    batch = eval_batch(HISTORIES)
    assert torch.equal(model.ranked(batch).items, model.generate(batch).items)


@pytest.mark.parametrize("backbone", ["sasrec", "hstu"])  # KV cache and branching; neither (the uncached path)
@pytest.mark.parametrize("rank, weight", [("codes", 1.0), ("hybrid", 0.5), ("guided", 0.5), ("guided", 0.0),
                                          ("items", 1.0)])
def test_ranking_scores_are_the_scores_the_ranked_items_carry(rank, weight, backbone):
    """``ranking_scores`` (what ``stage.score=ranking`` aligns) of the items ``ranked`` returns equal the scores it
    ranked them by; after every position of a training batch they equal the scores after each prefix as a prompt."""
    model = generator(rank=rank, code_weight=weight, backbone=backbone)
    batch = eval_batch(HISTORIES)
    ranked = model.ranked(batch)
    with torch.no_grad():
        assert torch.allclose(model.ranking_scores(batch, ranked.items), ranked.scores, atol=1e-4)
        train = train_batch([[5, 17, 30, 2], [9, 4], [33, 1, 8]])
        items = torch.randint(1, 41, (len(train.item_ids), 6), generator=torch.Generator().manual_seed(0))
        per_prefix = model.ranking_scores(prefixes(train), items)
        assert torch.allclose(model.prefix_ranking_scores(train, items), per_prefix, atol=1e-4)


@pytest.mark.parametrize("rank", ["hybrid", "guided"])
def test_ranking_scores_with_codes_and_item_head_run_the_history_once(rank):
    """At a code weight above 0 the code log-probabilities and the item head read the same backbone pass: one
    prefill of the histories (one of the whole sequences after every position), no other pass."""
    model = generator(rank=rank, code_weight=0.5)
    train = train_batch([[5, 17, 30, 2], [9, 4], [33, 1, 8]])
    items = torch.randint(1, 41, (len(train.item_ids), 6), generator=torch.Generator().manual_seed(0))
    for scores, args in ((model.ranking_scores, (eval_batch(HISTORIES), items[:len(HISTORIES)])),
                         (model.prefix_ranking_scores, (train, items))):
        with mock.patch.object(model.backbone, "prefill", wraps=model.backbone.prefill) as prefill, \
                mock.patch.object(model.backbone, "forward", wraps=model.backbone.forward) as forward:
            scores(*args)
        assert (prefill.call_count, forward.call_count) == (1, 0)


def test_ranking_with_the_item_head_needs_one():
    with pytest.raises(UserError, match="model.decoding.rank=hybrid ranks with the item head"):
        generator(item_head=False, rank="hybrid")
    with pytest.raises(UserError, match="model.decoding.rank: got 'best'"):
        generator(rank="best")


def test_tied_item_head_scores_with_the_item_input_table():
    """``tie_item_tables``: no table of its own; the item head's logits are the last state times the item-input
    rows (computed here by hand), and a gradient of the head's loss reaches that table."""
    model = generator(item_inputs=True, tie_item_tables=True, rank="items")
    assert model.item_head is None
    assert not any("item_head" in name for name in model.state_dict())
    batch = eval_batch(HISTORIES)
    users = torch.arange(len(HISTORIES))
    with torch.no_grad():
        states = model._run_rows(model._history(batch), users, torch.zeros(len(users), 0, dtype=torch.int64))[:, -1]
        logits = states @ model.item_inputs.table().T
        logits[:, 0] = float("-inf")
        assert torch.allclose(model.item_head_log_probs(batch), logits.log_softmax(1), atol=1e-5)
    model.train()
    model.loss(train_batch([[5, 17, 30], [2, 9]])).backward()
    rows = model.item_inputs.tables.weight(model.item_inputs.table_name)
    assert rows.grad is not None and float(rows.grad[12].abs().sum()) > 0  # item 12: never read, only scored


def test_tying_the_item_tables_needs_both():
    for kw in (dict(item_inputs=False), dict(item_inputs=True, item_head=False, rank="codes")):
        with pytest.raises(UserError, match="tie_item_tables=true scores items with the item-input table"):
            generator(tie_item_tables=True, **kw)


@pytest.mark.parametrize("tied", [False, True])
def test_a_tiny_model_learns_a_deterministic_successor_through_its_item_head(tied):
    """Item i is always followed by item i % 40 + 1: after training, the item head alone puts the successor first
    (with its own table, or with the tied item-input table)."""
    torch.manual_seed(0)
    model = SIDGenerator(TABLE, SASRec(dim=16, num_layers=2, num_heads=2, max_len=40, dropout=0.0), item_head=True,
                         rank="items", beam=5, top_k=1, item_inputs=tied, tie_item_tables=tied)
    batch = train_batch([[(s + j - 1) % 40 + 1 for j in range(4)] for s in range(1, 41)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        loss = model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    top = model.ranked(eval_batch([[i, i % 40 + 1] for i in range(1, 41)])).items[:, 0]
    assert float((top == torch.tensor([(i + 1) % 40 + 1 for i in range(1, 41)])).float().mean()) > 0.9


@pytest.mark.parametrize("rank, weight", [("guided", 0.0), ("items", 1.0)])
def test_ranking_by_the_item_head_alone_runs_no_code_model(rank, weight):
    """At code weight 0 the guided beam only searches the trie for the head's best items: the code model is never
    prefilled or stepped (before, it ran every beam step and was discarded), and the one backbone pass is the item
    head's. The BeamScorer's target score adds one more head pass, still no code model."""
    model = generator(rank=rank, code_weight=weight)
    batch = eval_batch(HISTORIES, targets=[20, 21, 22, 23])
    for call, passes in ((model.ranked, 1), (model.scorer(), 2)):
        with mock.patch.object(model.backbone, "prefill", wraps=model.backbone.prefill) as prefill, \
                mock.patch.object(model.backbone, "step", wraps=model.backbone.step) as step, \
                mock.patch.object(model.backbone, "forward", wraps=model.backbone.forward) as forward:
            call(batch)
        assert (prefill.call_count, step.call_count, forward.call_count) == (0, 0, passes)


@pytest.mark.parametrize("rank, weight", [("codes", 1.0), ("items", 1.0), ("guided", 0.0), ("hybrid", 0.0),
                                          ("guided", 0.5)])
def test_the_target_log_probability_is_that_of_what_ranks(rank, weight):
    """``target_log_prob`` (the BeamScorer's sum over users) is the true target's score under what carries the
    ranking: its code log-probability where the codes rank, its item-head log-probability where the head alone
    orders the list (before: always the code model's), ``code_weight`` x code + head where both do."""
    model = generator(rank=rank, code_weight=weight)
    targets = [20, 21, 22, 23]
    batch = eval_batch(HISTORIES, targets=targets)
    scorer = model.scorer()
    scorer(batch)
    with torch.no_grad():
        code = model.item_log_probs(batch, torch.tensor(targets)[:, None])[:, 0]
        head = model.item_head_log_probs(batch)[torch.arange(4), torch.tensor(targets)]
    expected = {"codes": code, "items": head}.get(rank, weight * code + head)
    _, _, users, total = scorer.pop_counts()
    assert users == 4 and total == pytest.approx(float(expected.sum()), abs=1e-4)
