"""HSTU: the jagged path equals the padded reference (outputs and gradients), the reference equals the formula
written out pair by pair, time buckets match hand values, causality, and a switched-off bias equals a zero bias."""
import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from genrec.models.attention import hstu as hstu_attention
from genrec.models.attention.hstu import jagged_hstu_attention, length_groups, padded_hstu_attention
from genrec.models.hstu import HSTU
from genrec.ops.hstu import RelativeBias, time_bucket
from genrec.ops.jagged import JaggedLayout
from tests.models.successor_pattern import train_on_successor_pattern


def _offsets(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)])


def _times(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Increasing event times per sequence (gaps from seconds to months) and the time each position predicts."""
    g = torch.Generator().manual_seed(seed)
    timestamps, queries = [], []
    for n in lengths:
        t = 10**9 + torch.cumsum(torch.randint(0, 10**7, (n + 1,), generator=g), 0)
        timestamps.append(t[:-1])
        queries.append(t[1:])
    return torch.cat(timestamps), torch.cat(queries)


def _hstu(**kwargs) -> HSTU:
    torch.manual_seed(0)
    args = dict(dim=16, num_layers=2, num_heads=2, attention_dim=8, hidden_dim=6, max_len=24, dropout=0.0)
    return HSTU(**{**args, **kwargs}).eval()


# ---- time buckets -----------------------------------------------------------------------------------------------

def test_time_bucket_hand_values():
    # floor(ln(max(|dt|, 1)) / 0.301): ln 2 / 0.301 = 2.30, ln 60 / 0.301 = 13.60, ln 3600 / 0.301 = 27.21,
    # ln 86400 / 0.301 = 37.76, ln 1e9 / 0.301 = 68.85
    delta = torch.tensor([0, 1, 2, -2, 3, 60, 3600, 86400, 10**9])
    assert time_bucket(delta, 128).tolist() == [0, 0, 2, 2, 3, 13, 27, 37, 68]
    assert time_bucket(delta, 30).tolist() == [0, 0, 2, 2, 3, 13, 27, 30, 30]  # clamped to num_buckets


# ---- the reference against the formula, pair by pair ------------------------------------------------------------

def _pairwise(q, k, v, lengths, bias: RelativeBias | None, scale):
    """out_i = sum_{j <= i} SiLU(q_i·k_j + rab_ij) · scale · v_j, one (i, j) pair at a time."""
    out, start = torch.zeros(len(q), q.shape[1], v.shape[2]), 0
    for b, n in enumerate(lengths):
        for i in range(n):
            for j in range(i + 1):
                score = (q[start + i] * k[start + j]).sum(-1)  # (H,)
                if bias is not None and bias.position is not None:
                    score = score + bias.position[i - j]
                if bias is not None and bias.time is not None:
                    gap = bias.query_timestamps[start + i] - bias.timestamps[start + j]
                    score = score + bias.time[min(int(math.log(max(abs(int(gap)), 1)) / 0.301), len(bias.time) - 1)]
                out[start + i] += (F.silu(score) * scale[b])[:, None] * v[start + j]
        start += n
    return out


@pytest.mark.parametrize("parts", ["none", "position", "time", "both"])
def test_padded_reference_equals_the_formula_pair_by_pair(parts):
    lengths = [3, 1, 6, 4]
    g = torch.Generator().manual_seed(0)
    n = sum(lengths)
    q, k, v = torch.randn(n, 2, 4, generator=g), torch.randn(n, 2, 4, generator=g), torch.randn(n, 2, 3, generator=g)
    timestamps, queries = _times(lengths)
    bias = RelativeBias(torch.randn(8, generator=g) if parts in ("position", "both") else None,
                        torch.randn(41, generator=g) if parts in ("time", "both") else None, timestamps, queries)
    bias = None if parts == "none" else bias
    scale = torch.tensor([0.5, 1.0, 0.25, 2.0])
    expected = _pairwise(q, k, v, lengths, bias, scale)
    got = padded_hstu_attention(q, k, v, JaggedLayout(_offsets(lengths)), bias, scale)
    assert torch.allclose(got, expected, atol=1e-5)


# ---- jagged == padded ------------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=12), overhead=st.sampled_from([1, 200, 10**6]),
       heads=st.integers(1, 3), with_time=st.booleans(), seed=st.integers(0, 1000))
def test_jagged_attention_equals_padded_with_gradients(lengths, overhead, heads, with_time, seed):
    g = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    inputs = [torch.randn(n, heads, d, generator=g, requires_grad=True) for d in (5, 5, 3)]
    position = torch.randn(30, generator=g, requires_grad=True)
    time = torch.randn(129, generator=g, requires_grad=True)
    timestamps, queries = _times(lengths, seed)
    bias = RelativeBias(position, time if with_time else None, timestamps, queries)
    scale = torch.rand(len(lengths), generator=g) + 0.1
    weight = torch.randn(n, heads, 3, generator=g)
    results = []
    for attend in (padded_hstu_attention, jagged_hstu_attention):
        with pytest.MonkeyPatch.context() as patch:  # from one group per sequence to a single group
            patch.setattr(hstu_attention, "GROUP_OVERHEAD", overhead)
            out = attend(*inputs, JaggedLayout(_offsets(lengths)), bias, scale)
        leaves = [*inputs, position] + ([time] if with_time else [])
        grads = torch.autograd.grad((out * weight).sum(), leaves)
        results.append((out, grads))
    (out_p, grads_p), (out_j, grads_j) = results
    assert torch.allclose(out_j, out_p, atol=1e-5)
    for a, b in zip(grads_j, grads_p):
        assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("variant,denominator", [("paper", "max_len"), ("production", "length")])
def test_hstu_jagged_equals_padded_reference_end_to_end(variant, denominator, monkeypatch):
    monkeypatch.setattr(hstu_attention, "GROUP_OVERHEAD", 50)  # several groups
    lengths = [5, 24, 1, 9, 13, 2, 7]
    offsets = _offsets(lengths)
    timestamps, queries = _times(lengths)
    embeddings = torch.randn(sum(lengths), 16, generator=torch.Generator().manual_seed(1))
    results = {}
    for impl in ("padded", "jagged"):
        model = _hstu(variant=variant, denominator=denominator, attention=impl)
        x = embeddings.clone().requires_grad_()
        out = model(x, offsets, timestamps, queries)
        out.pow(2).sum().backward()
        results[impl] = (out, x.grad, {n: p.grad for n, p in model.named_parameters()})
    (out_p, dx_p, dw_p), (out_j, dx_j, dw_j) = results["padded"], results["jagged"]
    assert torch.allclose(out_j, out_p, atol=1e-5)
    assert torch.allclose(dx_j, dx_p, atol=1e-4)
    assert dw_p.keys() == dw_j.keys() and all(dw_p[n] is not None for n in dw_p)
    for name in dw_p:
        assert torch.allclose(dw_j[name], dw_p[name], atol=1e-4), name


def test_length_groups_partition_sorted_runs_at_minimum_cost():
    rng = np.random.default_rng(0)
    for _ in range(20):
        lengths = rng.integers(1, 40, size=rng.integers(1, 8))
        overhead = float(rng.choice([1, 100, 1000]))
        groups = length_groups(lengths, overhead)
        assert sorted(np.concatenate(groups).tolist()) == list(range(len(lengths)))
        cost = sum(len(g) * lengths[g].max() ** 2 + overhead for g in groups)
        ordered = np.sort(lengths)
        best = min(  # every split of the sorted lengths into consecutive runs
            sum(len(r) * r.max() ** 2 + overhead for r in np.split(ordered, cuts))
            for k in range(len(lengths)) for cuts in itertools.combinations(range(1, len(lengths)), k))
        assert cost == pytest.approx(best)


# ---- model properties ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("attention", ["padded", "jagged"])
def test_causal_a_later_item_never_changes_an_earlier_output(attention):
    model = _hstu(attention=attention)
    lengths = [10]
    timestamps, queries = _times(lengths)
    x = torch.randn(10, 16, generator=torch.Generator().manual_seed(2))
    changed = x.clone()
    changed[6:] = torch.randn(4, 16)
    base = model(x, _offsets(lengths), timestamps, queries)
    other = model(changed, _offsets(lengths), timestamps, queries)
    assert torch.allclose(base[:6], other[:6], atol=1e-6)
    assert not torch.allclose(base[6:], other[6:], atol=1e-3)


def test_later_timestamps_never_change_earlier_outputs():
    """Position i uses the times up to the event it predicts (query_timestamps[i] = time of item i + 1) only."""
    model = _hstu()
    timestamps, queries = _times([10])
    shifted_t, shifted_q = timestamps.clone(), queries.clone()
    shifted_t[7:] += 10**6
    shifted_q[6:] += 10**6  # the time of item 7 onwards: the query time of position 6 onwards
    x = torch.randn(10, 16)
    base, other = model(x, _offsets([10]), timestamps, queries), model(x, _offsets([10]), shifted_t, shifted_q)
    assert torch.allclose(base[:6], other[:6], atol=1e-6)
    assert not torch.allclose(base[6:], other[6:], atol=1e-4)


def test_each_sequence_is_independent_of_its_batch():
    model = _hstu(attention="jagged")
    lengths = [3, 17, 1, 8]
    timestamps, queries = _times(lengths)
    x = torch.randn(sum(lengths), 16)
    together = model(x, _offsets(lengths), timestamps, queries)
    alone, start = [], 0
    for n in lengths:
        alone.append(model(x[start:start + n], _offsets([n]), timestamps[start:start + n], queries[start:start + n]))
        start += n
    assert torch.allclose(together, torch.cat(alone), atol=1e-5)


def test_bias_switched_off_equals_a_zero_bias():
    lengths = [4, 9, 2]
    timestamps, queries = _times(lengths)
    x = torch.randn(sum(lengths), 16)
    off = _hstu(position_bias=False, time_bias=False)
    zero = _hstu()
    missing = zero.load_state_dict(off.state_dict(), strict=False).missing_keys  # the same weights, plus the biases
    assert sorted(missing) == [f"blocks.{i}.{p}_bias" for i in range(2) for p in ("position", "time")]
    with torch.no_grad():
        for block in zero.blocks:
            block.position_bias.zero_()
            block.time_bias.zero_()
    assert torch.equal(off(x, _offsets(lengths), timestamps, queries), zero(x, _offsets(lengths), timestamps, queries))
    # and without timestamps (e.g. Amazon Beauty) the time part is simply left out
    no_time = _hstu()
    with torch.no_grad():
        for block in no_time.blocks:
            block.time_bias.zero_()
    assert torch.allclose(no_time(x, _offsets(lengths)), no_time(x, _offsets(lengths), timestamps, queries),
                          atol=1e-6)


def test_denominator_length_divides_by_each_sequences_length():
    lengths = [4, 9]
    layout = JaggedLayout(_offsets(lengths))
    q, k, v = torch.randn(13, 1, 4), torch.randn(13, 1, 4), torch.randn(13, 1, 4)
    a_max = padded_hstu_attention(q, k, v, layout, None, torch.full((2,), 1 / 24))
    a_len = padded_hstu_attention(q, k, v, layout, None, 1 / torch.tensor([4.0, 9.0]))
    assert torch.allclose(a_len[:4], a_max[:4] * 24 / 4, atol=1e-5)
    assert torch.allclose(a_len[4:], a_max[4:] * 24 / 9, atol=1e-5)
    model = _hstu(denominator="length")
    seen, scale = [], model._scale
    model._scale = lambda lengths, like: seen.append(scale(lengths, like)) or seen[-1]
    model(torch.randn(13, 16), _offsets(lengths))
    assert torch.equal(seen[0], torch.tensor([1 / 4, 1 / 9]))


def test_bad_settings_are_clear_errors():
    with pytest.raises(ValueError, match="model.encoder.denominator"):
        HSTU(denominator="mean")
    with pytest.raises(ValueError, match="model.encoder.variant"):
        HSTU(variant="v2")
    with pytest.raises(ValueError, match=r"model.encoder.attention='flash' is not a hstu attention"):
        HSTU(attention="flash")
    model = _hstu()
    with pytest.raises(ValueError, match="max_len=24"):
        model(torch.randn(30, 16), _offsets([30]))
    with pytest.raises(ValueError, match="timestamps and query_timestamps together"):
        model(torch.randn(3, 16), _offsets([3]), torch.arange(3), None)


def test_training_reduces_loss_on_a_learnable_pattern():
    torch.manual_seed(0)
    first, last = train_on_successor_pattern(HSTU(16, 2, 1, 16, 16, max_len=8, dropout=0.0))
    assert last < 0.1 * first
