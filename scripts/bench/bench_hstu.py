"""Training-step throughput and peak memory of HSTU: jagged vs padded attention, measured in the same run.

Each (max length, implementation) case runs in its own process so its peak memory is its own: on CPU the peak
resident memory above what the process held before its first step (model, optimizer and batches built), on CUDA
``torch.cuda.max_memory_allocated``. A step is a whole training step of the ``model=hstu`` preset (item lookup,
encoder, loss -- the full softmax by default --, backward, AdamW); its time is the fastest of ``--steps`` steps
(the least disturbed on a shared machine), with the process CPU time recorded beside it. Batches are real users'
training sequences (items, timestamps and therefore lengths as in the data), the most recent ``max_len`` kept.

Usage::

    python -m scripts.bench.bench_hstu                          # ML-100K lengths, max length 200 and 1024
    python -m scripts.bench.bench_hstu --data beauty --max-lens 50 --steps 20

Prints a table with the padded/jagged ratios and writes ``results/bench_hstu.json``.

With ``--peer <checkout of meta-recsys/generative-recommenders>`` it instead times genrec against Meta's reference
HSTU on exactly the same batches: the peer through its harness ``../shared/bench/peer_hstu_cpu.py`` (unchanged, in
its own process), genrec in a process of its own on the batches of that harness's ``make_batch`` (ML-1M-like, batch
128, max length 200), with the same seed, warm-up, timed steps and threads, for the presets ``hstu`` and
``hstu_large`` (``experiment=ml1m_hstu`` / ``ml1m_hstu_large``: 128 uniform negatives per position, cosine /
temperature 0.05, AdamW). One genrec step is what the peer's is: the batch's feature preparation (padded rows ->
JaggedBatch), loss over every position, backward, AdamW step, the loss read back. The two alternate (peer first in
odd rounds, genrec first in even ones) for ``--rounds`` rounds; each figure is the median over rounds of each run's
median step. Peak memory is the process's peak RSS (``getrusage``, imports included), the peer harness's
definition. Writes ``results/bench_hstu_peer.json``::

    PYTHONPATH=/tmp/ginlib python -m scripts.bench.bench_hstu --peer ../shared/peers/meta-generative-recommenders
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

ROOT = Path(__file__).resolve().parents[2]

IMPLEMENTATIONS = ("padded", "jagged")
#: peer harness config -> genrec experiment with the same published settings
PEER_PRESETS = {"hstu": "ml1m_hstu", "hstu_large": "ml1m_hstu_large"}


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
    peer = p.add_argument_group("genrec vs Meta's reference HSTU (--peer)")
    peer.add_argument("--peer", help="checkout of meta-recsys/generative-recommenders: run the peer comparison")
    peer.add_argument("--peer-rev", default="db1bf8f2e8f6a92a738dafd52a245eafb25a222b",
                      help="the peer checkout's commit, recorded in the JSON")
    peer.add_argument("--harness", default=str(ROOT.parent / "shared" / "bench" / "peer_hstu_cpu.py"),
                      help="the peer harness (its make_batch gives both sides their batches)")
    peer.add_argument("--presets", nargs="+", default=list(PEER_PRESETS), choices=list(PEER_PRESETS))
    peer.add_argument("--rounds", type=int, default=2, help="alternating rounds per preset")
    peer.add_argument("--peer-steps", type=int, default=20, help="timed steps per run")
    peer.add_argument("--peer-warmup", type=int, default=3)
    peer.add_argument("--peer-threads", type=int, default=2)
    peer.add_argument("--peer-seed", type=int, default=42)
    peer.add_argument("--omp-wait-policy", default="PASSIVE", choices=["PASSIVE", "ACTIVE"],
                      help="OMP_WAIT_POLICY of both sides' processes: on shared cores libgomp's default spinning "
                           "at every parallel region's barrier made genrec's step up to 10x slower")
    peer.add_argument("--peer-out", default=str(ROOT / "results" / "bench_hstu_peer.json"))
    peer.add_argument("--genrec-case", metavar="PRESET", help=argparse.SUPPRESS)  # worker mode
    return p.parse_args()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _compose(args: argparse.Namespace, max_len: int):
    from genrec.conf import compose_config

    return compose_config("train", [f"data={args.data}", f"model={args.model}", f"loss@model.loss={args.loss}",
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
        loss = task.training_loss(batch)
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


def _load_harness(path: str):
    """The peer harness as a module (only its numpy ``make_batch`` is used in genrec's process)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("peer_hstu_cpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jagged_from_row(row: dict):
    """The harness's padded row (``historical_* (B, 200)``, ``history_lengths``, ``target_*``) -> the JaggedBatch
    genrec trains on: position ``i`` of a history predicts item ``i + 1``, the last one the target (the positions
    and targets of the peer's loss)."""
    import torch

    from genrec.data.batch import JaggedBatch

    lengths = row["history_lengths"]
    width = row["historical_ids"].shape[1]
    mask = torch.arange(width)[None, :] < lengths[:, None]  # (B, 200)

    def shifted(history, target):  # (B, 201): the history with the target written after its last item
        full = torch.cat([history, history.new_zeros(len(history), 1)], 1)
        return full.scatter_(1, lengths[:, None], target[:, None])

    ids, times = shifted(row["historical_ids"], row["target_ids"]), shifted(row["historical_timestamps"],
                                                                          row["target_timestamps"])
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    return JaggedBatch(item_ids=ids[:, :-1][mask], offsets=offsets, target_ids=ids[:, 1:][mask],
                       user_ids=row["user_id"], timestamps=times[:, :-1][mask], query_timestamps=times[:, 1:][mask])


def run_genrec_peer_case(args: argparse.Namespace, preset: str) -> dict:
    """genrec's step on the harness's batches, timed like the harness times the peer's (in this process)."""
    import os

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(args.peer_threads))
    import numpy as np
    import torch

    from genrec.conf import compose_config
    from genrec.training.builders import build_task

    torch.set_num_threads(args.peer_threads)
    harness = _load_harness(args.harness)
    settings = harness.TRAIN_SETTINGS
    n = args.peer_warmup + args.peer_steps
    rows = [{k: torch.from_numpy(v) for k, v in harness.make_batch(
        args.peer_seed, i, settings["local_batch_size"], 3706, settings["max_sequence_length"]).items()}
        for i in range(n)]
    cfg = compose_config("train", overrides=[f"experiment={PEER_PRESETS[preset]}"])
    torch.manual_seed(args.peer_seed)
    task = build_task(cfg, 3706)
    optimizer = task.configure_optimizers()
    task.train()

    def step(row) -> float:
        loss = task.training_loss(_jagged_from_row(row))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    losses = [step(row) for row in rows[:args.peer_warmup]]
    times, cpu0 = [], os.times()
    for row in rows[args.peer_warmup:]:
        started = time.perf_counter()
        losses.append(step(row))
        times.append(time.perf_counter() - started)
    cpu1 = os.times()
    median = statistics.median(times)
    return {"implementation": "genrec", "config": preset, "experiment": PEER_PRESETS[preset],
            "step_s_median": median, "step_times_s": times,
            "seqs_per_s_at_median": settings["local_batch_size"] / median,
            "cpu_user_s_per_step": (cpu1.user - cpu0.user) / len(times),
            "cpu_sys_s_per_step": (cpu1.system - cpu0.system) / len(times),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "loss_first": losses[0], "loss_last": losses[-1], "threads": torch.get_num_threads()}


def _run_peer(args: argparse.Namespace, preset: str, out: Path) -> dict:
    cmd = [sys.executable, args.harness, "--peer-root", args.peer, "--peer-rev", args.peer_rev, "--config", preset,
           "--steps", str(args.peer_steps), "--warmup", str(args.peer_warmup), "--threads", str(args.peer_threads),
           "--seed", str(args.peer_seed), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"bench_hstu: the peer harness failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    r = json.loads(out.read_text())
    res = r["results"]
    return {"implementation": "peer", "config": preset, "step_s_median": res["step_s"]["median"],
            "step_times_s": res["step_times_s"], "seqs_per_s_at_median": res["seqs_per_s_at_median"],
            "cpu_user_s_per_step": res["cpu_user_s_per_step"], "cpu_sys_s_per_step": res["cpu_sys_s_per_step"],
            "peak_rss_mib": res["peak_rss_mib"], "loss_first": res["loss_first"], "loss_last": res["loss_last"],
            "threads": r["run"]["torch_threads"], "gin_check": r["gin_check"]["status"], "peer": r["peer"],
            "data": r["data"]}


def _run_genrec(args: argparse.Namespace, preset: str) -> dict:
    cmd = [sys.executable, "-m", __spec__.name, "--genrec-case", preset, "--harness", args.harness,
           "--peer", args.peer, "--peer-steps", str(args.peer_steps), "--peer-warmup", str(args.peer_warmup),
           "--peer-threads", str(args.peer_threads), "--peer-seed", str(args.peer_seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        sys.exit(f"bench_hstu: the genrec case {preset} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def peer_main(args: argparse.Namespace) -> None:
    """genrec vs the peer, alternating, per preset; prints the table and writes ``--peer-out``."""
    import tempfile

    from genrec.utils.provenance import provenance, write_json

    import os

    os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy  # inherited by both sides' processes
    rows, load_before = [], os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets:
            runs = {"genrec": [], "peer": []}
            for round_ in range(args.rounds):
                order = ("peer", "genrec") if round_ % 2 == 0 else ("genrec", "peer")
                for side in order:
                    run = (_run_peer(args, preset, Path(tmp) / f"{preset}_{round_}.json") if side == "peer"
                           else _run_genrec(args, preset))
                    runs[side].append(run)
                    print(f"  {preset:<11} round {round_} {side:<6} {run['step_s_median']:.3f} s/step  "
                          f"{run['seqs_per_s_at_median']:.1f} seq/s  {run['peak_rss_mib']:.0f} MiB", file=sys.stderr)
            summary = {side: {key: statistics.median(r[key] for r in rs)
                              for key in ("step_s_median", "seqs_per_s_at_median", "peak_rss_mib",
                                          "cpu_user_s_per_step", "cpu_sys_s_per_step")}
                       for side, rs in runs.items()}
            g, p = summary["genrec"], summary["peer"]
            rows.append({"config": preset, "experiment": PEER_PRESETS[preset], "genrec": g, "peer": p,
                         "speedup_seqs_per_s": g["seqs_per_s_at_median"] / p["seqs_per_s_at_median"],
                         "memory_ratio": g["peak_rss_mib"] / p["peak_rss_mib"],
                         "cpu_ratio": (p["cpu_user_s_per_step"] + p["cpu_sys_s_per_step"])
                         / (g["cpu_user_s_per_step"] + g["cpu_sys_s_per_step"]),
                         "runs": runs})
    header = (f"{'preset':<11} | {'peer s/step':>11} {'genrec s/step':>13} | {'peer seq/s':>10} {'genrec seq/s':>12} "
              f"{'speed-up':>8} | {'peer MiB':>8} {'genrec MiB':>10} {'memory':>7} | {'CPU s/step peer/genrec':>22}")
    print(f"genrec vs Meta's reference HSTU, same batches (harness make_batch, seed {args.peer_seed}), "
          f"{args.peer_threads} threads, median over {args.rounds} alternating rounds of {args.peer_steps} steps:")
    print(header)
    print("-" * len(header))
    for r in rows:
        g, p = r["genrec"], r["peer"]
        print(f"{r['config']:<11} | {p['step_s_median']:>11.3f} {g['step_s_median']:>13.3f} | "
              f"{p['seqs_per_s_at_median']:>10.1f} {g['seqs_per_s_at_median']:>12.1f} {r['speedup_seqs_per_s']:>7.2f}x | "
              f"{p['peak_rss_mib']:>8.0f} {g['peak_rss_mib']:>10.0f} {r['memory_ratio']:>6.2f}x | "
              f"{p['cpu_user_s_per_step'] + p['cpu_sys_s_per_step']:>10.2f} / "
              f"{g['cpu_user_s_per_step'] + g['cpu_sys_s_per_step']:.2f}")
    payload = {"name": Path(args.peer_out).stem, "kind": "benchmark", "benchmark": "hstu_peer",
               "dataset": "synthetic ML-1M-like batches (peer harness make_batch)", "batch_size": 128,
               "max_len": 200, "num_items": 3706, "seed": args.peer_seed, "threads": args.peer_threads,
               "steps": args.peer_steps, "warmup": args.peer_warmup, "rounds": args.rounds,
               "omp_wait_policy": args.omp_wait_policy,
               "harness": Path(args.harness).name, "peer_rev": args.peer_rev,
               "memory": "peak RSS of the process (getrusage ru_maxrss; imports included), as the peer harness "
                         "measures it",
               "machine": f"{os.cpu_count()} cores shared with other jobs (1-minute load average "
                          f"{load_before[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end): absolute "
                          "figures move with the load; the ratios, measured alternating in one run, are the result.",
               "rows": rows, **provenance()}
    write_json(Path(args.peer_out), payload)
    print(f"wrote {args.peer_out}")


def tables(files: list[dict]) -> list[str]:
    """The sections of docs/results/speed.md from this script's files: jagged vs padded, then genrec vs the peer."""
    return _jagged_tables(files) + _peer_tables(files)


def _jagged_tables(files: list[dict]) -> list[str]:
    """The jagged vs padded HSTU benchmark (scripts/bench/bench_hstu.py)."""
    out = []
    for r in files:
        if r.get("benchmark") != "hstu_attention":
            continue
        out += [f"## Benchmark: HSTU training step, jagged vs padded attention (`results/{r['name']}.json`)", "",
                f"`{r['model']}` preset with the `{r.get('loss', 'sampled')}` loss, batch {r['batch_size']} of real "
                f"{r['dataset']} training sequences, "
                f"{r['device']}, {r['steps']} timed steps per case (fastest step; the machine is shared), "
                f"each case in its own process. Memory: {r['memory']}.", "",
                "| max length | mean length | mean longest in batch | padded seq/s | jagged seq/s | speed-up | "
                "padded / jagged CPU s per step | padded peak MiB | jagged peak MiB | memory ratio |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for row in r["rows"]:
            pad, jag = row["padded"], row["jagged"]
            out.append(f"| {row['max_len']} | {pad['mean_length']:.1f} | {pad['mean_batch_longest']:.0f} | "
                       f"{pad['sequences_per_second']:.1f} | {jag['sequences_per_second']:.1f} | "
                       f"{row['speedup']:.2f}x | {min(pad['cpu_seconds']):.2f} / {min(jag['cpu_seconds']):.2f} | "
                       f"{pad['peak_memory_mib']:.0f} | {jag['peak_memory_mib']:.0f} | {row['memory_ratio']:.2f}x |")
        cases = [c for row in r["rows"] for c in (row["padded"], row["jagged"])]
        contention = statistics.mean(min(c["step_seconds"]) / min(c["cpu_seconds"]) for c in cases)
        out += ["", f"Commit `{r['commit'][:12]}`, torch {r['environment']['torch']}, "
                    f"{r['rows'][0]['padded']['threads']} thread(s) per case. The machine was shared while this ran: "
                    f"a step's wall time was on average {contention:.1f}x its CPU time, so the sequences/s are far "
                    "below what the same machine gives when idle; the ratios, measured side by side, are the result "
                    "(the CPU-time column gives the same picture without the wait).", ""]
    return out


def _peer_tables(files: list[dict]) -> list[str]:
    """genrec's HSTU step vs Meta's reference on the same batches (scripts/bench/bench_hstu.py --peer)."""
    out = []
    for r in files:
        if r.get("benchmark") != "hstu_peer":
            continue
        out += [f"## Benchmark: HSTU training step, genrec vs Meta's reference HSTU (`results/{r['name']}.json`)", "",
                f"{r['dataset']}: batch {r['batch_size']}, max length {r['max_len']}, {r['num_items']} items, seed "
                f"{r['seed']}; a step is feature preparation, loss over every position with 128 uniform negatives "
                f"(cosine, temperature 0.05), backward and AdamW. Peer: `{r['harness']}` at `{r['peer_rev'][:12]}`, "
                f"genrec: `experiment=<experiment>`. {r['threads']} threads each (OMP_WAIT_POLICY "
                f"{r.get('omp_wait_policy', 'unset: libgomp spins')}), {r['steps']} timed steps after "
                f"{r['warmup']} warm-up per run, the two alternating for {r['rounds']} rounds; figures are medians "
                f"over rounds of each run's median step. Memory: {r['memory']}. Goal (issue 17): >= 2x the peer's "
                "seq/s and <= 0.5x its peak memory.", "",
                "| preset | experiment | peer s/step | genrec s/step | peer seq/s | genrec seq/s | speed-up | "
                "peer peak MiB | genrec peak MiB | memory ratio | CPU s/step peer / genrec |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in r["rows"]:
            g, p = row["genrec"], row["peer"]
            out.append(f"| {row['config']} | `{row['experiment']}` | {p['step_s_median']:.3f} | "
                       f"{g['step_s_median']:.3f} | {p['seqs_per_s_at_median']:.1f} | {g['seqs_per_s_at_median']:.1f} "
                       f"| {row['speedup_seqs_per_s']:.2f}x | {p['peak_rss_mib']:.0f} | {g['peak_rss_mib']:.0f} | "
                       f"{row['memory_ratio']:.2f}x | {p['cpu_user_s_per_step'] + p['cpu_sys_s_per_step']:.2f} / "
                       f"{g['cpu_user_s_per_step'] + g['cpu_sys_s_per_step']:.2f} |")
        met = [row["speedup_seqs_per_s"] >= 2 and row["memory_ratio"] <= 0.5 for row in r["rows"]]
        out += ["", f"Commit `{r['commit'][:12]}`, torch {r['environment']['torch']}. {r.get('machine', '')} "
                    f"Goal met at {sum(met)} of {len(met)} presets.", ""]
    return out


def main() -> None:
    args = _parse()
    if args.genrec_case:
        print(json.dumps(run_genrec_peer_case(args, args.genrec_case)))
        return
    if args.peer:
        peer_main(args)
        return
    if args.case:
        print(json.dumps(run_case(args, args.case[0], int(args.case[1]))))
        return
    from genrec.utils.provenance import provenance, write_json

    cases = []
    for max_len in args.max_lens:
        for impl in IMPLEMENTATIONS:
            cmd = [sys.executable, "-m", __spec__.name, "--case", impl, str(max_len)] + [
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
