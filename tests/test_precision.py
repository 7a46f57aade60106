"""bf16 autocast on CPU (``trainer.precision=bf16-mixed``): what runs in bf16 and what stays fp32, and that a bf16
run of SASRec and HSTU trains to metrics close to the fp32 run's."""
import pandas as pd
import pytest
import torch

from genrec import train as train_entry
from genrec.conf import compose_config
from genrec.ops.hstu import causal_weight, fused_pointwise_attention, pointwise_attention
from genrec.training.builders import build_datamodule, build_task
from tests.conftest import TINY_RUN

MODELS = ("sasrec", "hstu")


def _compose(tmp_path, *overrides):
    return compose_config("train", overrides=TINY_RUN + [f"data.cache_dir={tmp_path / 'cache'}", *overrides])


@pytest.mark.parametrize("model", MODELS)
def test_what_runs_in_bf16(tmp_path, model):
    """One training step under CPU autocast: the embedding lookups (TorchRec/FBGEMM tables), the norms and the loss
    are fp32, the encoder's linear layers bf16; parameters, gradients and AdamW's state stay fp32."""
    cfg = _compose(tmp_path, f"model={model}")
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    task = build_task(cfg, datamodule.data.num_items, datamodule.data.item_raw_ids)
    outputs = {}

    def record(name):
        def hook(module, inputs, output):
            outputs[name] = output.dtype if torch.is_tensor(output) else {k: v.dtype for k, v in output.items()}
        return hook

    for name, module in task.model.named_modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.LayerNorm)) or name == "item_embedding.tables":
            module.register_forward_hook(record(name))
    optimizer = task.configure_optimizers()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = task.training_loss(next(iter(datamodule.train_dataloader())))
    loss.backward()
    optimizer.step()

    assert loss.dtype == torch.float32
    assert set(outputs.pop("item_embedding.tables").values()) == {torch.float32}
    linears = {n for n, m in task.model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert linears and {outputs[n] for n in linears} == {torch.bfloat16}
    assert {dtype for n, dtype in outputs.items() if n not in linears} <= {torch.float32}
    assert {p.dtype for p in task.parameters()} == {torch.float32}
    assert {p.grad.dtype for p in task.parameters() if p.grad is not None} == {torch.float32}
    states = [t for state in optimizer.state.values() for t in state.values() if t.ndim > 0]
    assert states and {t.dtype for t in states} == {torch.float32}


@pytest.mark.slow  # 4 tiny runs of 3 epochs: ~1 min on the busy 2-core machine
@pytest.mark.parametrize("model", MODELS)
def test_a_bf16_run_trains_close_to_fp32(tmp_path, model):
    """Same seed and data: the epoch loss falls every epoch in both runs, and the bf16 run's test recall@10 and
    NDCG@10 are within 0.02 of the fp32 run's (6 of the 300 test users; measured: within 0.005)."""
    runs = {}
    for precision in ("32-true", "bf16-mixed"):
        cfg = _compose(tmp_path, f"model={model}", "trainer.max_epochs=3", "trainer.accelerator=cpu",
                       f"trainer.precision={precision}", "baselines=[]")
        runs[precision] = train_entry.run(cfg, tmp_path / precision)["metrics"]["test"]
        log = pd.read_csv(tmp_path / precision / "logs" / "metrics.csv").dropna(subset=["train/loss_epoch"])
        losses = log["train/loss_epoch"].tolist()
        assert len(losses) == 3 and losses[0] > losses[1] > losses[2], (precision, losses)
    for metric in ("recall@10", "ndcg@10"):
        assert runs["bf16-mixed"][metric] == pytest.approx(runs["32-true"][metric], abs=0.02), metric


@pytest.mark.parametrize("bias", ["per_sequence", "shared"])
def test_fused_pointwise_attention_under_autocast(bias):
    """HSTU's hand-written attention backward under bf16 autocast (which the backward runs outside of): fp32
    gradients of fp32 inputs, within bf16 rounding of the fp64 reference's."""
    torch.manual_seed(0)
    g, h, length = 3, 2, 7
    q, k, v = (torch.randn(g, h, length, 4, requires_grad=True) for _ in range(3))
    rab = torch.randn(g if bias == "per_sequence" else 1, length, length, requires_grad=True)
    scale, weights = torch.rand(g), torch.randn(g, h, length, 4)
    inputs = [q, k, v, rab]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = fused_pointwise_attention(q, k, v, rab, causal_weight(scale, length))
    assert got.dtype == torch.bfloat16
    grads = torch.autograd.grad((got.float() * weights).sum(), inputs)
    exact = [t.detach().double().requires_grad_() for t in inputs]
    expected = pointwise_attention(*exact[:3], exact[3], scale.double())
    for a, b, x in zip(grads, torch.autograd.grad((expected * weights.double()).sum(), exact), inputs):
        assert a.dtype == x.dtype == torch.float32
        assert torch.allclose(a.double(), b, rtol=0.05, atol=0.05 * b.abs().max().item())
    assert torch.allclose(got.double(), expected, rtol=0.05, atol=0.05 * expected.abs().max().item())
