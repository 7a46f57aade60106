"""Step time of pipelined sparse input (sharding.pipeline=sparse_dist, genrec/dist/pipeline.py) on 2 gloo processes.

Per model, three ways to train the same batches with a row-wise sharded item table, in the same 2 processes:
- ``plain``: the unpipelined step genrec runs by default (``model(JaggedBatch)``: negatives drawn in the step);
- ``unpipelined``: the same step on SparseBatches (candidates drawn and the lookup KJT built by the loader);
- ``pipelined``: TorchRec's TrainPipelineSparseDist over the same SparseBatches: the next batch's input
  distribution is issued while this batch computes.
Batches are built inside the timed loop in every mode (collation + candidates: the loader's work, as with
``data.num_workers=0``). The modes alternate (the order rotates each round); a round times ``--steps`` steps after
``--warmup`` steps; a step's time is the slower process's; the figure is the median over rounds of the mean step
time. The machine's load average is recorded before and after every round.

Usage: python -m scripts.bench.bench_pipeline [--rounds 5 --steps 20 --warmup 3]  -> results/bench_pipeline.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[2]

from genrec.data.batch import JaggedBatch  # noqa: E402
from genrec.utils.provenance import provenance, write_json  # noqa: E402

WORLD, ITEMS, BATCH, MIN_LEN, MAX_LEN, DIM = 2, 20000, 64, 10, 50, 48  # FBGEMM: dim a multiple of 4
MODES = ("plain", "unpipelined", "pipelined")
TIMED = 1000  # the first timed step's batch index
#: model -> (encoder arguments, loss arguments); HSTU as the ``hstu`` preset (cosine, 128 negatives per position) but 48 wide (sharded tables: a multiple of 4)
MODELS = {
    "sasrec": ({"kind": "sasrec", "num_layers": 2, "num_heads": 2, "dropout": 0.2},
               {"num_negatives": 128, "per_position": False, "temperature": 1.0}, "dot"),
    "hstu": ({"kind": "hstu", "num_layers": 2, "num_heads": 1, "attention_dim": 48, "hidden_dim": 48,
              "dropout": 0.2},
             {"num_negatives": 128, "per_position": True, "temperature": 0.05}, "cosine"),
}


def make_task(model: str):
    from genrec.embedding import ItemEmbedding
    from genrec.models.hstu import HSTU
    from genrec.models.losses import SampledSoftmaxLoss
    from genrec.models.recommender import SequentialRecommender
    from genrec.models.sasrec import SASRec
    from genrec.training.retrieval import RetrievalTask

    encoder, loss, similarity = MODELS[model]
    args = {k: v for k, v in encoder.items() if k != "kind"}
    net = (SASRec(DIM, max_len=MAX_LEN, **args) if encoder["kind"] == "sasrec"
           else HSTU(DIM, max_len=MAX_LEN, time_bias=False, attention="jagged", **args))
    torch.manual_seed(0)
    return RetrievalTask(SequentialRecommender(ItemEmbedding(ITEMS, DIM), net, similarity=similarity),
                         SampledSoftmaxLoss(**loss), lr=1e-3)


def jagged_batch(step: int, rank: int) -> JaggedBatch:
    """Process ``rank``'s batch of step ``step``: ``BATCH`` random sequences of ``MIN_LEN..MAX_LEN`` items."""
    gen = torch.Generator().manual_seed(1000 * step + rank)
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (BATCH,), generator=gen)
    items = torch.randint(1, ITEMS + 1, (int(lengths.sum()) + BATCH,), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    starts = offsets[:-1] + torch.arange(BATCH)  # each sequence has one item more than its inputs
    inputs = torch.cat([items[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist())])
    targets = torch.cat([items[s + 1:s + 1 + n] for s, n in zip(starts.tolist(), lengths.tolist())])
    return JaggedBatch(item_ids=inputs, offsets=offsets, target_ids=targets, user_ids=torch.arange(BATCH))


def batches(mode: str, task, rank: int, first: int, count: int):
    """The batches of steps ``first .. first + count - 1``, built when asked for (the loader's work)."""
    from genrec.data.candidates import DrawnBatch
    from genrec.dist.pipeline import sparse_batch

    table = task.model.item_embedding.tables.configs[0]
    for step in range(first, first + count):
        batch = jagged_batch(step, rank)
        if mode == "plain":
            yield batch
            continue
        generator = torch.Generator().manual_seed(step)
        drawn = DrawnBatch(batch, task.loss.item_ids(batch.target_ids, table.num_embeddings - 1, generator=generator))
        yield sparse_batch(drawn, table)


def run_mode(mode: str, model, task, dense, rank: int, first: int, count: int) -> None:
    from genrec.dist.pipeline import sparse_dist_pipeline

    source = batches(mode, task, rank, first, count)
    if mode == "pipelined":
        pipeline = sparse_dist_pipeline(model, dense)
        while True:
            try:
                pipeline.progress(source)
            except StopIteration:
                break
        pipeline.detach()
        return
    for batch in source:
        out = model(batch)
        (out if mode == "plain" else out[0]).backward()
        dense.step()
        dense.zero_grad()


def worker(rank: int, folder: str, model_name: str, order: list[str], steps: int, warmup: int) -> None:
    from genrec.dist import ShardingConfig, shard_module

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=WORLD)
    task = make_task(model_name)
    model, _ = shard_module(task, ShardingConfig(type="row_wise"), torch.device("cpu"), WORLD)
    dense = task.configure_optimizers()
    times = {}
    for mode in order:  # every mode trains on the same batches: steps 0.. (warm-up), then TIMED..
        run_mode(mode, model, task, dense, rank, 0, warmup)
        dist.barrier()
        start = time.perf_counter()
        run_mode(mode, model, task, dense, rank, TIMED, steps)
        elapsed = torch.tensor(time.perf_counter() - start)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slower process sets the pace
        times[mode] = elapsed.item() / steps
    (Path(folder) / f"out.{rank}").write_text(json.dumps(times))
    dist.destroy_process_group()


def measure(model: str, order: list[str], steps: int, warmup: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench_pipeline-") as folder:
        mp.spawn(worker, args=(folder, model, order, steps, warmup), nprocs=WORLD, join=True)
        return json.loads((Path(folder) / "out.0").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    rows, loads = [], []
    for model in MODELS:
        rounds = []
        for r in range(args.rounds):
            order = list(MODES[r % len(MODES):] + MODES[:r % len(MODES)])  # alternate which mode goes first
            before = os.getloadavg()[0]
            rounds.append(measure(model, order, args.steps, args.warmup))
            loads.append({"model": model, "round": r, "order": order, "load_before": before,
                          "load_after": os.getloadavg()[0]})
            print(f"{model} round {r}: " + ", ".join(f"{m} {rounds[-1][m] * 1e3:.0f} ms" for m in MODES),
                  flush=True)
        median = {m: statistics.median(x[m] for x in rounds) for m in MODES}
        rows.append({"model": model, "step_s": median, "rounds_step_s": rounds,
                     "pipelined_speedup_vs_plain": median["plain"] / median["pipelined"],
                     "pipelined_speedup_vs_unpipelined": median["unpipelined"] / median["pipelined"]})
    print("| model | plain s/step | unpipelined (SparseBatch) s/step | pipelined s/step | speed-up vs plain "
          "| vs unpipelined |")
    for r in rows:
        s = r["step_s"]
        print(f"| {r['model']} | {s['plain']:.3f} | {s['unpipelined']:.3f} | {s['pipelined']:.3f} "
              f"| {r['pipelined_speedup_vs_plain']:.2f}x | {r['pipelined_speedup_vs_unpipelined']:.2f}x |")
    payload = {"kind": "bench_pipeline", "processes": WORLD, "backend": "gloo", "device": "cpu",
               "sharding": "row_wise", "data": {"items": ITEMS, "sequences_per_process": BATCH,
                                                "lengths": [MIN_LEN, MAX_LEN], "dim": DIM, "synthetic": True},
               "models": {k: {"encoder": v[0], "loss": v[1], "similarity": v[2]} for k, v in MODELS.items()},
               "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup, "rows": rows,
               "machine_load": loads, "cpu_count": os.cpu_count(), "threads_per_process": 1,
               "machine_note": "2 CPU cores shared with other engineers' jobs (load average recorded per round); "
                               "2 gloo processes on one host, one torch thread each, no CUDA streams",
               **provenance()}
    path = write_json(ROOT / "results" / "bench_pipeline.json", payload)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
