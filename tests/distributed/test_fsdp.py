"""Fully sharded training of an LLM-backbone generator (fsdp=full, genrec/training/fsdp.py): two gloo processes with
FSDP2 (every transformer layer a unit, the generator the root) reach the loss and weights of one process trained on
both processes' batches, within 1e-5; each process holds half of the parameters, gradients and Adam state. The
generator has an item head re-ranking its beam (``rank=hybrid``): the sharded processes rank like the reference.

Ranks get batches with different numbers of targets, so the generative task's rescaling to the global batch's mean
(`global_mean`) is exercised; the reference is the same task, unsharded, in this process.
"""
from __future__ import annotations

import traceback

import pytest
import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from genrec.models.backbones import HFVocabLM
from genrec.models.sid_generator import SIDGenerator
from genrec.training.fsdp import FSDPStrategy, is_sharded, shard_generator
from genrec.training.generative import GenerativeTask
from genrec.training.fit import trainer_arguments
from tests.distributed.ranks import close_group, spawn_ranks
from tests.generative.helpers import eval_batch, make_table, train_batch

WORLD, STEPS = 2, 4
HISTORIES = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
LLAMA = {"model_type": "llama", "vocab_size": 50, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64}
#: per step, per rank: whole training sequences of different lengths (rank 0 has more targets than rank 1)
SEQUENCES = [[[[1, 2, 3, 4, 5], [6, 7, 8]], [[9, 10, 11]]],
             [[[12, 13], [14, 15, 16, 17]], [[18, 19, 20, 21, 22, 23], [24, 25]]],
             [[[26, 27, 28]], [[29, 30], [31, 32, 33], [34, 35]]],
             [[[36, 37, 38, 39, 40, 1]], [[2, 3]]]]


def make_task() -> GenerativeTask:
    torch.manual_seed(0)
    model = SIDGenerator(make_table(40, (4, 5, 3)), HFVocabLM(config=dict(LLAMA)), item_head=True, rank="hybrid",
                         beam=6, top_k=4)
    return GenerativeTask(model)


def local_bytes(task: GenerativeTask, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of parameters, gradients and optimizer state this process holds (its shards, under FSDP)."""
    def size(t: torch.Tensor) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    params = list(task.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]
    return sum(size(p) for p in params) + sum(size(p.grad) for p in params if p.grad is not None) + \
        sum(size(v) for v in state)


def train(task: GenerativeTask, batches: list) -> tuple[list[float], torch.optim.Optimizer]:
    """Adam steps on ``batches``; the global loss of each step (summed over processes when sharded)."""
    optimizer = torch.optim.Adam(task.parameters(), lr=1e-2)
    losses = []
    for batch in batches:
        loss = task.training_loss(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        total = loss.detach().clone()
        if dist.is_initialized():  # each process's loss is its share of the global mean
            dist.all_reduce(total)
            total /= WORLD
        losses.append(total.item())
    return losses, optimizer


def worker(rank: int, folder: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    result = {}
    try:
        task = make_task()
        layers = shard_generator(task.model, init_device_mesh("cpu", (WORLD,)))
        result["units"] = len(layers) + 1
        result["sharded"] = is_sharded(task.model) and all(is_sharded(layer) for layer in layers)
        losses, optimizer = train(task, [train_batch(step[rank]) for step in SEQUENCES])
        result["losses"], result["local_bytes"] = losses, local_bytes(task, optimizer)
        result["weights"] = {n: p.full_tensor().detach().clone() for n, p in task.named_parameters()}
        task.model.eval()
        result["ranked"] = task.model.ranked(eval_batch(HISTORIES))
    except Exception:  # the parent shows the traceback of the failing rank
        result["traceback"] = traceback.format_exc()
    finally:
        torch.save(result, f"{folder}/out.{rank}")
        close_group(succeeded="traceback" not in result)


@pytest.mark.dist
@pytest.mark.slow  # ~2 min on the busy 2-core machine
def test_two_sharded_processes_train_like_one_on_the_global_batch(tmp_path):
    out = spawn_ranks(worker, (str(tmp_path),), tmp_path / "out", WORLD)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        task = make_task()
        losses, optimizer = train(task, [train_batch(step[0] + step[1]) for step in SEQUENCES])
        whole = local_bytes(task, optimizer)
        weights = dict(task.named_parameters())
        ranked = task.model.eval().ranked(eval_batch(HISTORIES))
    finally:
        torch.set_num_threads(before)
    for r in out:
        assert r["sharded"] and r["units"] == LLAMA["num_hidden_layers"] + 1
        assert r["losses"] == pytest.approx(losses, abs=1e-5)
        assert r["weights"].keys() == weights.keys()
        for name, weight in weights.items():
            torch.testing.assert_close(r["weights"][name], weight.detach(), rtol=0, atol=1e-5, msg=name)
        # ZeRO-3: each process holds about half of parameters, gradients and Adam's two moments (odd-sized first
        # dimensions split one row apart)
        assert 0.45 * whole < r["local_bytes"] < 0.55 * whole
        assert torch.equal(r["ranked"].items, ranked.items)
        torch.testing.assert_close(r["ranked"].scores, ranked.scores, rtol=0, atol=1e-4)
    assert sum(r["local_bytes"] for r in out) >= whole  # every byte held somewhere
    initial = dict(make_task().named_parameters())
    assert all(not torch.equal(initial[n], w) for n, w in weights.items())  # every weight trained


def test_fsdp_configs_build_their_strategy():
    from genrec.conf import compose_config

    full = compose_config("train", overrides=["fsdp=full", "trainer.devices=2", "trainer.accelerator=cpu"])
    none = compose_config("train", overrides=["fsdp=none"])
    strategy = trainer_arguments(full)["strategy"]
    assert isinstance(strategy, FSDPStrategy) and strategy.fsdp.reshard_after_forward
    assert not isinstance(trainer_arguments(none).get("strategy"), FSDPStrategy)
    assert OmegaConf.to_container(none.fsdp) == {"enabled": False}
