"""TIGER and the decoder-only generator (every backbone): KV-cached decoding equals decoding without a cache,
the beam's top-k equals exhaustive enumeration by teacher forcing, the losses are the teacher-forced
log-probabilities, and constraints keep every decoded ID valid."""
import pytest
import torch

from genrec.models.backbones import HFCausalLM
from genrec.models.hstu import HSTU
from genrec.models.sasrec import SASRec
from genrec.models.sid_generator import SIDGenerator
from genrec.models.tiger import TIGER
from tests.generative.helpers import eval_batch, make_table, one_thread, train_batch

single_thread = pytest.fixture(autouse=True)(one_thread)

TABLE = make_table(40, (4, 5, 3))
HISTORIES = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10, 11], [12]]


def tiger(**kw):
    return TIGER(TABLE, **{"d_model": 16, "d_kv": 8, "d_ff": 32, "num_heads": 2, "num_layers": 2,
                           "num_decoder_layers": 2, "user_buckets": 7, **kw})


def gpt(**kw):
    return SIDGenerator(TABLE, SASRec(dim=16, num_layers=2, num_heads=2, max_len=40, dropout=0.0),
                        **{"user_buckets": 5, **kw})


def llama(**kw):
    return SIDGenerator(TABLE, HFCausalLM(config={"model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
                                                  "num_hidden_layers": 2, "num_attention_heads": 2,
                                                  "num_key_value_heads": 1, "max_position_embeddings": 64}), **kw)


def gpt2(**kw):
    return SIDGenerator(TABLE, HFCausalLM(config={"model_type": "gpt2", "n_embd": 16, "n_layer": 2, "n_head": 2,
                                                  "n_positions": 64}), **kw)


def hstu(**kw):
    return SIDGenerator(TABLE, HSTU(dim=16, num_layers=2, num_heads=2, attention_dim=8, hidden_dim=8, max_len=40,
                                    dropout=0.0, time_bias=False), **kw)


def gpt_items(**kw):
    return gpt(item_inputs=True, **kw)


MODELS = {"tiger": tiger, "sid_gpt": gpt, "sid_gpt_items": gpt_items, "hf_llama": llama, "hf_gpt2": gpt2,
          "hstu": hstu}


def _build(name, **kw):
    torch.manual_seed(0)
    model = MODELS[name](**kw).eval()
    with torch.no_grad():  # spread the untrained model's distribution so that beams differ clearly
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(3.0)
    return model


@pytest.mark.parametrize("name", MODELS)
def test_kv_cached_decoding_equals_uncached(name):
    model = _build(name)
    batch = eval_batch(HISTORIES)
    cached, plain = model.decoder(batch, use_cache=True), model.decoder(batch, use_cache=False)
    assert torch.allclose(cached.start(), plain.start(), atol=1e-5)
    rows = torch.arange(4).repeat_interleave(2)  # two beams per user
    codes = torch.tensor([0, 1, 2, 3, 1, 0, 3, 2])
    for decoder in (cached, plain):
        decoder.select(rows)
    first = [d.step(codes, 0) for d in (cached, plain)]
    assert torch.allclose(*first, atol=1e-5)
    shuffle = torch.tensor([1, 0, 3, 3, 4, 5, 7, 6])  # within each user's beams
    for decoder in (cached, plain):
        decoder.select(shuffle)
    second = [d.step(codes[shuffle] % 5, 1) for d in (cached, plain)]
    assert torch.allclose(*second, atol=1e-5)
    for constrained in (True, False):
        a = model.generate(batch, beam=6, top_k=6, constrained=constrained, use_cache=True)
        b = model.generate(batch, beam=6, top_k=6, constrained=constrained, use_cache=False)
        assert torch.equal(a.codes, b.codes) and torch.allclose(a.scores, b.scores, atol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_beam_top_k_equals_exhaustive_enumeration(name):
    model = _build(name)
    batch = eval_batch(HISTORIES)
    result = model.generate(batch, beam=40, top_k=10, exclude_history=True)
    with torch.no_grad():
        exact = model.item_log_probs(batch, torch.arange(1, 41).expand(len(HISTORIES), -1))  # (B, 40)
    for b, seen in enumerate(HISTORIES):
        exact[b, torch.tensor(seen) - 1] = float("-inf")
    scores, order = exact.sort(dim=1, descending=True, stable=True)
    assert torch.equal(result.items, order[:, :10] + 1)
    assert torch.allclose(result.scores, scores[:, :10], atol=1e-4)


@pytest.mark.parametrize("name", MODELS)
def test_constraints_keep_every_decoded_id_valid(name):
    model = _build(name)
    batch = eval_batch(HISTORIES)
    free = model.generate(batch, beam=20, top_k=20, constrained=False)
    assert free.invalid.any()  # 40 of the 60 possible tuples are items: an untrained model emits the others too
    assert torch.equal(free.items, model.sids.item_of(free.codes))
    bound = model.generate(batch, beam=20, top_k=20, constrained=True)
    assert not bound.invalid.any() and (bound.items > 0).all()


def test_tiger_loss_is_the_mean_negative_log_probability_per_code():
    model = _build("tiger")
    batch = eval_batch(HISTORIES, targets=[20, 21, 22, 23])
    with torch.no_grad():
        logp = model.item_log_probs(batch, batch.target_ids[:, None])
        assert model.loss(batch) == pytest.approx(float(-logp.sum() / (4 * 3)), abs=1e-5)


@pytest.mark.parametrize("name", ["sid_gpt", "sid_gpt_items", "hf_llama"])
def test_generator_loss_is_teacher_forced_next_token_prediction(name):
    model = _build(name)
    a, b, c = 5, 17, 30
    with torch.no_grad():
        loss = model.loss(train_batch([[a, b, c]]))
        parts = [model.item_log_probs(eval_batch([history]), torch.tensor([[item]]))
                 for history, item in (([], a), ([a], b), ([a, b], c))]
    assert float(loss) == pytest.approx(-float(sum(parts)) / (3 * 3), abs=1e-5)


@pytest.mark.parametrize("name", ["tiger", "sid_gpt"])
def test_a_tiny_model_learns_a_deterministic_successor(name):
    """Item i is always followed by item i % 40 + 1: after training, the top-1 decoded item is the successor."""
    torch.manual_seed(0)
    model = MODELS[name](user_buckets=0, **({"dropout": 0.0} if name == "tiger" else {}))
    sequences = [[(s + j - 1) % 40 + 1 for j in range(4)] for s in range(1, 41)]
    if name == "tiger":  # one target per example: every prefix of every sequence
        examples = [(s[:end], s[end]) for s in sequences for end in range(1, 4)]
        batch = eval_batch([h for h, _ in examples], [t for _, t in examples])
    else:
        batch = train_batch(sequences)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        loss = model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    histories = [[i, i % 40 + 1] for i in range(1, 41)]
    top = model.generate(eval_batch(histories), beam=5, top_k=1, exclude_history=False).items[:, 0]
    expected = torch.tensor([(i + 1) % 40 + 1 for i in range(1, 41)])
    assert float((top == expected).float().mean()) > 0.9


def test_item_inputs_reach_the_history_and_never_the_generated_item():
    """With ``item_inputs`` a history item's own row changes what is generated after it; the row of the item being
    scored changes nothing of its own score (its codes are generated from tokens that precede its row's token)."""
    model = _build("sid_gpt_items")
    batch = eval_batch([[3, 9]])
    candidates = torch.tensor([[9, 25]])
    rows = model.item_inputs.tables.weight(model.item_inputs.table_name)
    change = torch.randn(rows.shape[1], generator=torch.Generator().manual_seed(0))  # not uniform: norms remove that
    with torch.no_grad():
        before = model.item_log_probs(batch, candidates)
        rows[25].add_(change)  # a scored item's row
        assert torch.allclose(model.item_log_probs(batch, candidates), before, atol=1e-6)
        rows[9].add_(change)  # a history item's row
        assert not torch.allclose(model.item_log_probs(batch, candidates), before, atol=1e-3)


def test_a_checkpoint_of_another_sid_table_is_refused():
    state = _build("sid_gpt").state_dict()
    other = SIDGenerator(make_table(40, (4, 5, 3), seed=1), SASRec(dim=16, num_layers=2, num_heads=2, max_len=40),
                         user_buckets=5)
    with pytest.raises(ValueError, match="sid_table: the checkpoint was trained with SID table"):
        other.load_state_dict(state)
    _build("sid_gpt").load_state_dict(state)  # the same table loads


def test_hf_backbone_never_downloads():
    with pytest.raises(ValueError, match="nothing is downloaded"):
        HFCausalLM(pretrained="genrec-test/no-such-model")
