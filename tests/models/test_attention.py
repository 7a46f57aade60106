"""The attention switch: name resolution, the softmax implementations against their reference, and SASRec's
default path numerically unchanged by the switch."""
import math

import pytest
import torch
import torch.nn.functional as F

from genrec.models.attention import names, register, resolve
from genrec.models.attention import registry
from genrec.models.attention.softmax import padded_softmax_attention, sdpa_attention
from genrec.ops.jagged import jagged_to_padded, padded_to_jagged
from genrec.models.sasrec import SASRec


def test_auto_picks_sdpa_and_jagged_on_cpu_fp32():
    x = torch.zeros(2, 3)
    assert resolve("softmax", "auto", x).name == "sdpa"
    assert resolve("hstu", "auto", x).name == "jagged"
    assert names("softmax")[0] == "auto" and {"padded", "sdpa", "flash"} <= set(names("softmax"))
    assert {"padded", "jagged"} <= set(names("hstu"))


def test_unknown_or_unavailable_implementations_are_clear_errors():
    with pytest.raises(ValueError, match=r"model.encoder.attention='jagged' is not a softmax attention.*'sdpa'"):
        resolve("softmax", "jagged", torch.zeros(1))
    with pytest.raises(ValueError, match=r"model.encoder.attention='flash' needs CUDA tensors in fp16/bf16.*cpu"):
        resolve("softmax", "flash", torch.zeros(1))
    with pytest.raises(ValueError, match="attention='sdpax' is not a softmax"):
        SASRec(attention="sdpax")
    with pytest.raises(ValueError, match="already defined"):
        register("hstu", "jagged", lambda *a: None)


def test_a_registered_kernel_is_chosen_by_auto_where_it_can_run(monkeypatch):
    def kernel(*args):
        raise AssertionError("not called here")

    monkeypatch.setitem(registry._REGISTRY["hstu"], "fake", registry.AttentionImpl(
        "fake", kernel, available=lambda t: t.dtype == torch.float16, auto_rank=0, requirement="fp16"))
    assert resolve("hstu", "auto", torch.zeros(1, dtype=torch.float16)).fn is kernel
    assert resolve("hstu", "auto", torch.zeros(1)).name == "jagged"  # where it cannot run, the next in rank


def test_sdpa_equals_the_padded_reference():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 7, 4, generator=g, requires_grad=True) for _ in range(3))
    offsets = torch.tensor([0, 7, 9, 13])
    outs = [f(q, k, v, offsets, 0.0) for f in (padded_softmax_attention, sdpa_attention)]
    grads = [torch.autograd.grad(o.pow(2).sum(), (q, k, v)) for o in outs]
    assert torch.allclose(outs[0], outs[1], atol=1e-5)
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-5)


def _sasrec_before_the_switch(model: SASRec, embeddings, offsets):
    """SASRec's forward as it was before the attention switch (F.scaled_dot_product_attention called directly)."""
    longest = int((offsets[1:] - offsets[:-1]).max())
    x = jagged_to_padded(embeddings, offsets, longest)
    x = model.drop(x * math.sqrt(model.dim) + model.positions.weight[:longest])
    for block in model.blocks:
        attn = block.attn
        b, l, d = x.shape
        h = block.norm1(x)
        q, k, v = attn.qkv(h).view(b, l, 3, attn.num_heads, d // attn.num_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=attn.dropout if attn.training else 0.0)
        x = x + block.drop(attn.out(y.transpose(1, 2).reshape(b, l, d)))
        x = x + block.drop(block.ffn(block.norm2(x)))
    return padded_to_jagged(model.final_norm(x), offsets)


@pytest.mark.parametrize("train", [False, True])
def test_sasrec_default_attention_is_numerically_unchanged(train):
    torch.manual_seed(0)
    model = SASRec(dim=16, num_layers=2, num_heads=2, max_len=12, dropout=0.3, attn_dropout=0.1).train(train)
    offsets = torch.tensor([0, 5, 17, 18, 26])
    embeddings = torch.randn(26, 16)
    torch.manual_seed(1)
    now = model(embeddings, offsets)
    torch.manual_seed(1)  # same seed: the same dropout masks, drawn in the same order
    before = _sasrec_before_the_switch(model, embeddings, offsets)
    assert torch.equal(now, before)


def test_sasrec_padded_reference_equals_default():
    torch.manual_seed(0)
    model = SASRec(dim=16, num_layers=2, num_heads=2, max_len=12, dropout=0.0).eval()
    offsets = torch.tensor([0, 5, 17, 18, 26])
    embeddings = torch.randn(26, 16)
    default = model(embeddings, offsets)
    for block in model.blocks:
        block.attn.attention = "padded"
    assert torch.allclose(model(embeddings, offsets), default, atol=1e-5)
