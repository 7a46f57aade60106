"""The GPU recipe's code path on CPU (``recipe=gpu`` with ``trainer.accelerator=cpu``): ``compile=true`` compiles
the sequence stacks in place and trains exactly like the eager model (on CUDA too, where a GPU is present); the
whole recipe (bf16 autocast, bucketed batches, warm-up; with compiled stacks on top) trains and decodes a tiny
generator end to end; the recipe itself leaves compile off; unsupported combinations are refused with the key
named."""
import copy
import itertools
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch._dynamo.utils import counters

from genrec import train as train_entry
from genrec.conf import compose_config
from genrec.errors import ConfigError
from genrec.models.attention import resolve
from genrec.models.hstu import HSTU
from genrec.training.builders import compile_stacks
from tests.generative.helpers import SMALL, TINY, eval_batch, one_thread, train_batch
from tests.generative.test_generative_models import gpt, tiger

single_thread = pytest.fixture(autouse=True, scope="module")(one_thread)
needs_compiler = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")),
                                    reason="torch.compile's CPU backend (inductor) needs a C++ compiler (g++)")

PLAIN = OmegaConf.create({"sharding": {"type": None}, "fsdp": {"enabled": False}})


def _loss_and_grads(model, batch):
    model.zero_grad()
    loss = model.loss(batch)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


BATCHES = {"sid_gpt": train_batch([[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12, 13]]),  # whole sequences
           "tiger": eval_batch([[1, 2, 3], [4, 5], [6, 7, 8, 9]], [10, 11, 12])}  # one target per prefix


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled CUDA kernels need a GPU")


@needs_compiler
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("name", ["sid_gpt", pytest.param("tiger", marks=pytest.mark.slow)])
def test_compiled_stacks_train_like_the_eager_model(name, device):
    """Same loss and gradients (1e-5) for the same weights, and the same parameter names (a checkpoint of one loads
    into the other). Without dropout: compiled code draws its own random numbers. TIGER is slow: compiling T5
    takes about a minute on one core. On CUDA (the GPU recipe's device) inductor emits Triton kernels instead.
    The decoder-only generator's SASRec stack compiles into one graph without a break (its jagged <-> padded
    conversion stays eager)."""
    torch.manual_seed(0)
    eager = {"sid_gpt": gpt, "tiger": lambda: tiger(dropout=0.0)}[name]().train().to(device)
    compiled = copy.deepcopy(eager)
    compile_stacks(PLAIN, compiled)
    batch = BATCHES[name].to(device)
    counters.clear()
    for _ in range(2):  # the second call runs the cached compiled graph
        (eager_loss, eager_grads), (loss, grads) = _loss_and_grads(eager, batch), _loss_and_grads(compiled, batch)
        assert loss == pytest.approx(eager_loss, abs=1e-5)
        assert grads.keys() == eager_grads.keys()
        for param, grad in grads.items():
            torch.testing.assert_close(grad, eager_grads[param], atol=1e-5, rtol=1e-4, msg=param)
    assert list(compiled.state_dict()) == list(eager.state_dict())
    assert counters["stats"]["unique_graphs"] >= 1  # the stacks ran compiled
    if name == "sid_gpt":
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]


@needs_compiler
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize("variant", ["paper", "production"])
def test_compiled_hstu_runs_like_the_eager_encoder_in_two_graphs(variant, device):
    """HSTU compiles its blocks' dense parts only (project, combine), so jagged batches of any length run through
    the same two graphs without a break, with the eager encoder's outputs and gradients (time bias on). On CUDA the
    attention is the Triton kernel, whose fused ``u * LayerNorm(a)`` replaces ``combine``: one graph."""
    torch.manual_seed(0)
    eager = HSTU(dim=16, num_layers=2, num_heads=2, attention_dim=8, hidden_dim=6, max_len=24, dropout=0.0,
                 variant=variant).to(device)
    compiled = copy.deepcopy(eager)
    compiled.compile(dynamic=True)  # what compile_stacks does to a retrieval model's encoder
    counters.clear()
    for lengths in ([3, 7, 1, 4], [12, 2], [4, 9, 6]):  # three layouts (no total of 16, the width: see below)
        offsets = torch.tensor([0, *itertools.accumulate(lengths)], device=device)
        x = torch.randn(offsets[-1].item(), 16, device=device)
        times = torch.cumsum(torch.randint(1, 10**6, (len(x),), device=device), 0)
        outputs = []
        for model in (eager, compiled):
            model.zero_grad()
            inputs = x.clone().requires_grad_()
            out = model(inputs, offsets, times, times + 60)
            out.square().sum().backward()
            outputs.append((out.detach(), inputs.grad, {n: p.grad for n, p in model.named_parameters()}))
        (out, x_grad, grads), (c_out, c_x_grad, c_grads) = outputs
        torch.testing.assert_close(c_out, out, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(c_x_grad, x_grad, atol=1e-5, rtol=1e-4)
        for name, grad in grads.items():
            torch.testing.assert_close(c_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)
    # a batch of exactly D = 16 positions would add a graph: dynamo gives equal sizes one symbol, and D is fixed
    graphs = 1 if resolve("hstu", eager.attention, x).output is not None else 2
    assert counters["stats"]["unique_graphs"] == graphs and not counters["graph_break"]
    assert list(compiled.state_dict()) == list(eager.state_dict())


@pytest.mark.parametrize("key, value", [("sharding", {"type": "table_wise"}), ("fsdp", {"enabled": True})])
def test_compile_is_refused_with_sharded_training(key, value):
    cfg = OmegaConf.merge(PLAIN, {key: value})
    with pytest.raises(ConfigError, match="compile"):
        compile_stacks(cfg, gpt())


def test_the_gpu_recipe_leaves_compile_off():
    """Measured on an H200 (docs/results.md, "GPU recipe"): compiled steps were slower than eager ones there."""
    cfg = compose_config("train", ["model=sid_gpt", "recipe=gpu"])
    assert (cfg.compile, cfg.trainer.accelerator, cfg.trainer.precision, cfg.data.batch_size) == \
        (False, "gpu", "bf16-mixed", 1024)


@needs_compiler
def test_the_gpu_recipe_trains_a_generator_on_cpu(sid_table, tmp_path):
    """recipe=gpu end to end on the CPU with compile=true on top (the recipe's other run in
    scripts/gpu/gpu_recipe_check.sh): bf16-mixed, compiled stacks, its batch size and warm-up, then beam search."""
    cfg = compose_config("train", TINY + SMALL["sid_gpt"] + ["model=sid_gpt", f"sid_table={sid_table}",
                                                               f"data.cache_dir={sid_table / 'cache'}", "recipe=gpu",
                                                               "compile=true", "trainer.accelerator=cpu",
                                                               "data.num_workers=0", "data.batch_size=128"])
    metrics = train_entry.run(cfg, tmp_path / "run")
    config = metrics["config"]
    assert (config["compile"], config["trainer"]["precision"], config["optim"]["warmup_steps"]) == \
        (True, "bf16-mixed", 200)
    assert metrics["metrics"]["test"]["invalid_rate"] == 0.0
    assert 0.0 <= metrics["metrics"]["test"]["ndcg@10"] <= 1.0 and metrics["steps_run"] > 0
    weights = torch.load(tmp_path / "run" / metrics["checkpoints"]["best"]["file"], weights_only=False)["state_dict"]
    assert not any("_orig_mod" in name for name in weights)


def test_the_gpu_bundle_names_a_missing_input_before_downloading_anything(tmp_path):
    """scripts/gpu/pack_gpu_bundle.sh checks its inputs first: a missing SID table is named, nothing is written."""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(["bash", str(root / "scripts" / "gpu" / "pack_gpu_bundle.sh")], capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin", "SID_TABLE": str(tmp_path / "no-sid"),
                                            "TEACHER": str(tmp_path / "no-teacher"), "DEST": str(tmp_path / "bundle")})
    assert result.returncode == 2 and f"{tmp_path / 'no-sid'}/sid_table.parquet is missing" in result.stderr
    assert not (tmp_path / "bundle").exists()
