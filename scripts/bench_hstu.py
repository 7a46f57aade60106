"""Training-step throughput and peak memory of HSTU: jagged vs padded attention, measured in the same run.

Each (max length, implementation) case runs in its own process so its peak memory is its own: on CPU the peak
resident memory above what the process held before its first step (model, optimizer and batches built), on CUDA
``torch.cuda.max_memory_allocated``. A step is a whole training step of the ``model=hstu`` preset (item lookup,
encoder, loss -- the full softmax by default --, backward, AdamW); its time is the fastest of ``--steps`` steps
(the least disturbed on a shared machine), with the process CPU time recorded beside it. Batches are real users'
training sequences (items, timestamps and therefore lengths as in the data), the most recent ``max_len`` kept.

Usage::

    python scripts/bench_hstu.py                          # ML-100K lengths, max length 200 and 1024
    python scripts/bench_hstu.py --data beauty --max-lens 50 --steps 20

Prints a table with the padded/jagged ratios and writes ``results/bench_hstu.json``.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

IMPLEMENTATIONS = ("padded", "jagged")


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="ml100k", help="data preset whose users' sequences make the batches")
    p.add_argument("--model", default="hstu", help="model preset")
    p.add_argument("--loss", default="full", help="loss preset (genrec/conf/loss); the full softmax keeps the step about "
                                                  "the encoder (model=hstu's per-position negatives are an "
                                                  "(N, 128, D) lookup that dominates a CPU step)")
    p.add_argument("--max-lens", type=int, nargs="+", default=[200, 1024])
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=5, help="timed steps per case (after --warmup)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", default="cuda" if _cuda() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "results" / "bench_hstu.json"))
    p.add_argument("--case", nargs=2, metavar=("IMPL", "MAX_LEN"), help=argparse.SUPPRESS)  # worker mode
    return p.parse_args()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _compose(args: argparse.Namespace, max_len: int):
    from hydra import compose, initialize_config_dir

    from genrec.conf import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=[f"data={args.data}", f"model={args.model}", f"loss@model.loss={args.loss}",
                                           f"data.max_len={max_len}", f"data.batch_size={args.batch_size}"])


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def run_case(args: argparse.Namespace, impl: str, max_len: int) -> dict:
    """One case in this process: build the preset, draw batches, time ``warmup + steps`` training steps."""
    import numpy as np
    import torch

    from genrec.data.batch import TrainSequences, collate
    from genrec.training.builders import build_datamodule, build_task

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = _compose(args, max_len)
    cfg.model.encoder.attention = impl
    torch.manual_seed(args.seed)
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    task = build_task(cfg, datamodule.data.num_items).to(args.device)
    optimizer = task.configure_optimizers()
    dataset = TrainSequences(datamodule.data, max_len)
    rng = np.random.default_rng(args.seed)
    batches = [collate([dataset[int(i)] for i in rng.choice(len(dataset), args.batch_size, replace=False)])
               .to(args.device) for _ in range(args.warmup + args.steps)]

    def step(batch) -> None:
        loss = task.loss(task.model.encode(batch), batch.target_ids, task.model)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    task.train()
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    rss_before = _rss_bytes()
    times, cpu_times = [], []
    for i, batch in enumerate(batches):
        sync()
        started, cpu_started = time.perf_counter(), time.process_time()
        step(batch)
        sync()
        if i >= args.warmup:
            times.append(time.perf_counter() - started)
            cpu_times.append(time.process_time() - cpu_started)
    if args.device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    lengths = np.concatenate([b.lengths.cpu().numpy() for b in batches])
    step_s = min(times)  # the fastest step: the least disturbed by other work on a shared machine
    return {"impl": impl, "max_len": max_len, "threads": torch.get_num_threads(), "step_seconds_min": step_s,
            "step_seconds": times, "cpu_seconds": cpu_times, "sequences_per_second": args.batch_size / step_s,
            "peak_memory_mib": peak / 2**20,
            "mean_length": float(lengths.mean()), "max_length_seen": int(lengths.max()),
            "mean_batch_longest": float(np.mean([int(b.lengths.max()) for b in batches]))}


def main() -> None:
    args = _parse()
    if args.case:
        print(json.dumps(run_case(args, args.case[0], int(args.case[1]))))
        return
    from genrec.utils.provenance import provenance, write_json

    cases = []
    for max_len in args.max_lens:
        for impl in IMPLEMENTATIONS:
            cmd = [sys.executable, __file__, "--case", impl, str(max_len)] + [
                a for a in sys.argv[1:] if a != "--case"]
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if out.returncode:
                sys.exit(f"bench_hstu: case {impl} max_len={max_len} failed:\n{out.stderr[-3000:]}")
            cases.append(json.loads(out.stdout.strip().splitlines()[-1]))
            c = cases[-1]
            print(f"  {impl:>6} L={max_len:<5} {c['sequences_per_second']:8.1f} seq/s  "
                  f"{c['peak_memory_mib']:8.1f} MiB", file=sys.stderr)
    rows = []
    for max_len in args.max_lens:
        by = {c["impl"]: c for c in cases if c["max_len"] == max_len}
        pad, jag = by["padded"], by["jagged"]
        rows.append({"max_len": max_len, "padded": pad, "jagged": jag,
                     "speedup": jag["sequences_per_second"] / pad["sequences_per_second"],
                     "memory_ratio": pad["peak_memory_mib"] / jag["peak_memory_mib"]})
    header = (f"{'max len':>8} {'mean len':>9} {'longest':>8} | {'padded seq/s':>12} {'jagged seq/s':>12} "
              f"{'speed-up':>9} | {'padded MiB':>10} {'jagged MiB':>10} {'mem ratio':>9}")
    print(f"HSTU training step ({args.model} preset, {args.loss} loss, batch {args.batch_size}, {args.data} sequences, "
          f"{args.device}, {cases[0]['threads']} threads; fastest of {args.steps} steps):")
    print(header)
    print("-" * len(header))
    for r in rows:
        pad, jag = r["padded"], r["jagged"]
        print(f"{r['max_len']:>8} {pad['mean_length']:>9.1f} {pad['mean_batch_longest']:>8.0f} | "
              f"{pad['sequences_per_second']:>12.1f} {jag['sequences_per_second']:>12.1f} {r['speedup']:>8.2f}x | "
              f"{pad['peak_memory_mib']:>10.1f} {jag['peak_memory_mib']:>10.1f} {r['memory_ratio']:>8.2f}x")
    payload = {"name": Path(args.out).stem, "kind": "benchmark", "benchmark": "hstu_attention",
               "dataset": args.data, "model": args.model, "loss": args.loss, "batch_size": args.batch_size,
               "device": args.device,
               "steps": args.steps, "warmup": args.warmup, "seed": args.seed,
               "memory": "CPU: peak resident memory above the process's before its first step; "
                         "CUDA: torch.cuda.max_memory_allocated",
               "rows": rows, **provenance()}
    write_json(Path(args.out), payload)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
