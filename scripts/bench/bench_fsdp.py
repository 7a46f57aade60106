"""Memory per process of fully sharded training (fsdp=full, genrec/training/fsdp.py) vs one process.

The SID generator on a small `transformers` llama (HFVocabLM: the SID tokens appended to its vocabulary), trained
a few Adam steps on the same global batch by 1 process (unsharded) and by 2 gloo processes (FSDP2: every layer a
unit, the generator the root; each process half the batch). Per process: the bytes of parameters, gradients and
Adam state it holds (exact, from the tensors: its shards under FSDP), and its peak RSS above its RSS before the
model was built (``ru_maxrss``; allocator caching and the gathered layers included). The two settings alternate,
each in fresh processes; median over rounds. Also checked: the sharded run's final loss equals the single
process's (the tests check weights to 1e-5, tests/distributed/test_fsdp.py).

Usage: python -m scripts.bench.bench_fsdp [--rounds 2]  -> results/bench_fsdp.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import resource
import statistics
import tempfile
from pathlib import Path

import numpy as np
import psutil
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[2]

from genrec.data.batch import JaggedBatch  # noqa: E402
from genrec.tokenize.sid_table import PAD_CODE, SIDTable  # noqa: E402
from genrec.utils.provenance import provenance, write_json  # noqa: E402

LLAMA = {"model_type": "llama", "vocab_size": 4000, "hidden_size": 512, "intermediate_size": 1024,
         "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 256}
ITEMS, CODEBOOKS, SEQUENCES, LENGTH, STEPS = 1000, (16, 16, 16), 32, 20, 3


def sid_table() -> SIDTable:
    every = np.array(list(itertools.product(*[range(k) for k in CODEBOOKS])))
    codes = every[np.random.default_rng(0).choice(len(every), ITEMS, replace=False)]
    raw = np.array([None] + [f"item{i}" for i in range(1, ITEMS + 1)], dtype=object)
    return SIDTable(np.vstack([np.full((1, len(CODEBOOKS)), PAD_CODE), codes]), CODEBOOKS, raw, dataset="bench")


def batches(rank: int, world: int) -> list[JaggedBatch]:
    """Per step: this process's share of a global batch of ``SEQUENCES`` random sequences (inputs, next items)."""
    out = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(step)
        sequences = torch.randint(1, ITEMS + 1, (SEQUENCES, LENGTH + 1), generator=g)[rank::world]
        offsets = torch.arange(len(sequences) + 1) * LENGTH
        out.append(JaggedBatch(item_ids=sequences[:, :-1].reshape(-1), offsets=offsets,
                               target_ids=sequences[:, 1:].reshape(-1), user_ids=torch.arange(len(sequences))))
    return out


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    def size(t: torch.Tensor) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    params = list(model.parameters())
    moments = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0]
    return sum(size(p) + size(p.grad) for p in params if p.grad is not None) + sum(size(v) for v in moments)


def worker(rank: int, world: int, folder: str) -> None:
    from genrec.models.backbones import HFVocabLM
    from genrec.models.sid_generator import SIDGenerator
    from genrec.training.fsdp import shard_generator
    from genrec.training.generative import GenerativeTask

    torch.set_num_threads(1)
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh

        dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=world)
    table, data = sid_table(), batches(rank, world)
    before = psutil.Process().memory_info().rss
    torch.manual_seed(0)
    task = GenerativeTask(SIDGenerator(table, HFVocabLM(config=dict(LLAMA))))
    if world > 1:
        shard_generator(task.model, init_device_mesh("cpu", (world,)))
    optimizer = torch.optim.Adam(task.parameters(), lr=1e-3)
    for batch in data:
        loss = task.training_loss(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
    total = loss.detach().clone()
    if world > 1:
        dist.all_reduce(total)
        total /= world
    result = {"state_bytes": state_bytes(task, optimizer), "rss_before": before,
              "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "final_loss": total.item(),
              "parameters": sum(p.numel() for p in task.parameters())}
    (Path(folder) / f"out.{rank}").write_text(json.dumps(result))
    if world > 1:
        dist.destroy_process_group()


def measure(world: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(worker, args=(world, folder), nprocs=world, join=True)
        return [json.loads((Path(folder) / f"out.{r}").read_text()) for r in range(world)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs = {1: [], 2: []}
    for _ in range(args.rounds):
        for world in (1, 2):
            runs[world].append(measure(world))
    rows = []
    for world, rounds in runs.items():
        per_process = [p for r in rounds for p in r]
        rows.append({"processes": world, "parameters": per_process[0]["parameters"],
                     "state_mib": statistics.median(p["state_bytes"] for p in per_process) / 2**20,
                     "peak_rss_above_start_mib": statistics.median(p["peak_rss"] - p["rss_before"]
                                                                   for p in per_process) / 2**20,
                     "final_loss": [r[0]["final_loss"] for r in rounds]})
    one, two = rows
    print("| processes | parameters | params + grads + Adam per process, MiB | peak RSS above start, MiB | loss |")
    for r in rows:
        print(f"| {r['processes']} | {r['parameters']:,} | {r['state_mib']:.1f} | {r['peak_rss_above_start_mib']:.1f} "
              f"| {r['final_loss'][0]:.6f} |")
    payload = {"kind": "bench_fsdp", "benchmark": "fsdp_memory", "model": {"llama": LLAMA, "items": ITEMS,
               "codebooks": list(CODEBOOKS)}, "global_batch": {"sequences": SEQUENCES, "length": LENGTH},
               "steps": STEPS, "rounds": args.rounds, "rows": rows,
               "state_ratio": two["state_mib"] / one["state_mib"],
               "peak_ratio": two["peak_rss_above_start_mib"] / one["peak_rss_above_start_mib"],
               "max_loss_difference": max(abs(a - b) for a, b in zip(one["final_loss"], two["final_loss"])),
               "machine_note": "2 CPU cores shared with other engineers' jobs; one torch thread per process, gloo",
               **provenance()}
    path = write_json(ROOT / "results" / "bench_fsdp.json", payload)
    print(f"state 2 processes / 1: {payload['state_ratio']:.2f}; peak RSS: {payload['peak_ratio']:.2f}; "
          f"loss difference {payload['max_loss_difference']:.2e} -> {path}")


if __name__ == "__main__":
    main()
