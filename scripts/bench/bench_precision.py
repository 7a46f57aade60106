"""bf16 autocast (``trainer.precision=bf16-mixed``) against fp32 on CPU: training-step time and test metrics of
SASRec and HSTU on MovieLens-100K (``experiment=ml100k_sasrec`` / ``ml100k_hstu``).

Speed: one process builds each model twice from the same seed (fp32 weights both) and times whole training steps
(item lookup, encoder, loss, backward, AdamW step, loss read back) on the same real training batches, the fp32
step plain and the bf16 step under ``torch.autocast("cpu", torch.bfloat16)`` as Lightning's ``bf16-mixed`` runs it.
The two alternate (fp32 first in odd rounds, bf16 first in even ones) for ``--rounds`` rounds; each figure is the
median over rounds of each round's median step.

Quality: ``genrec.train`` runs each preset at both precisions (seed 0, ``--epochs`` epochs or the preset's early
stop, the same budget for both), with genrec's most-popular and item-transition baselines evaluated in the same
runs (full-corpus ranking, leave-one-out; evaluation scores in fp32 for both precisions).

The CPU's bf16 support (``avx512_bf16``, ``amx_bf16`` flags of /proc/cpuinfo) is recorded. Needs the GroupLens
folder at ``$GENREC_DATA_DIR/ml-100k`` (default ``../shared/data``); without it the script says so and exits 0.

Usage::

    nice -n 5 python -m scripts.bench.bench_precision            # writes results/bench_precision.json
    python -m scripts.bench.bench_precision --models sasrec --epochs 2 --rounds 2 --out /tmp/bench_precision.json
"""
from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PRESETS = {"sasrec": "ml100k_sasrec", "hstu": "ml100k_hstu"}
PRECISIONS = ("32-true", "bf16-mixed")
BASELINES = ("most_popular", "transitions")
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_fp16")


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    p.add_argument("--epochs", type=int, default=30,
                   help="training budget of each quality run (both precisions); 0: the preset's own (100 epochs, "
                        "early stopping)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per precision per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: steadiest on a shared machine)")
    p.add_argument("--out", default=str(ROOT / "results" / "bench_precision.json"))
    return p.parse_args()


def cpu_flags() -> dict[str, bool]:
    """Which of :data:`CPU_FLAGS` /proc/cpuinfo lists (all ``False`` where it cannot be read)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("flags")).split(":", 1)[1].split()
    except (OSError, StopIteration):
        flags = []
    return {flag: flag in flags for flag in CPU_FLAGS}


def time_steps(experiment: str, steps: int, rounds: int) -> dict[str, float]:
    """Median seconds per training step at each precision, alternating -> ``{precision: s/step}``."""
    import torch

    from genrec.conf import compose_config
    from genrec.training.builders import build_datamodule, build_task
    from scripts.bench.step_timing import alternating_medians, optimizer_of, train_step_seconds

    cfg = compose_config("train", [f"experiment={experiment}"])
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    loader = iter(datamodule.train_dataloader())
    batches = [next(loader) for _ in range(steps)]
    torch.manual_seed(0)
    task = build_task(cfg, datamodule.data.num_items, datamodule.data.item_raw_ids).train()
    tasks = {p: copy.deepcopy(task) for p in PRECISIONS}
    optimizers = {p: optimizer_of(t) for p, t in tasks.items()}

    def step(precision: str, batch) -> float:
        autocast = partial(torch.autocast, "cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed")
        return train_step_seconds(tasks[precision], optimizers[precision], batch, autocast)

    for p in PRECISIONS:  # warm-up: first-call allocations and kernel selection
        step(p, batches[0])
    return alternating_medians(step, PRECISIONS, batches, rounds)


def train_and_test(experiment: str, precision: str, epochs: int, threads: int, folder: Path) -> dict:
    """One ``genrec.train`` run -> test metrics of the model and the baselines, epochs run, wall seconds."""
    from genrec import train as train_entry
    from genrec.conf import compose_config

    overrides = [f"experiment={experiment}", f"trainer.precision={precision}", "trainer.accelerator=cpu", "seed=0",
                 "trainer.enable_progress_bar=false", f"threads={threads}", f"baselines={list(BASELINES)}"]
    if epochs:
        overrides.append(f"trainer.max_epochs={epochs}")
    start = time.perf_counter()
    result = train_entry.run(compose_config("train", overrides), folder / f"{experiment}-{precision}")
    return {"test": result["metrics"]["test"], "epochs_run": result["epochs_run"],
            "best_epoch": result.get("best_epoch"), "wall_s": time.perf_counter() - start,
            "baselines": {name: result["baselines"][name]["test"] for name in BASELINES}}


def tables(files: list[dict]) -> list[str]:
    """bf16-mixed vs fp32 training on CPU (scripts/bench/bench_precision.py): s/step and test metrics with baselines."""
    out = []
    for r in files:
        if r.get("benchmark") != "bf16-mixed vs fp32 training on CPU":
            continue
        c = r["config"]
        flags = ", ".join(f"{flag} {'yes' if on else 'no'}" for flag, on in r["cpu_flags"].items())
        out += [f"## Benchmark: bf16-mixed vs fp32 training on CPU (`results/{r['name']}.json`)", "",
                f"{r['dataset']}, seed {r['seed']}, `trainer.precision=32-true` vs `bf16-mixed` (bf16 autocast of the "
                "encoder; TorchRec tables, norms, loss, weights, optimizer state and evaluation scores stay fp32). "
                f"Speed: whole training steps (batch {c['batch_size']}) of both precisions alternating in one process, "
                f"{c['timed_steps']} steps per round, {c['rounds']} rounds, median of round medians, {c['threads']} "
                f"thread(s). Quality: one `genrec.train` run per precision, {c['epochs']} epochs at most (equal "
                "budgets; the presets' own is 100 with early stopping), baselines evaluated in the same runs. "
                f"CPU flags: {flags}. {r['note'][0].upper() + r['note'][1:]}. Commit `{r['commit'][:12]}`.", "",
                "| model | fp32 s/step | bf16 s/step | bf16 speed-up (fp32 s / bf16 s) |", "|---|---|---|---|"]
        for row in r["rows"]:
            t = row["s_per_step"]
            out.append(f"| {row['model']} (`{row['experiment']}`) | {t['32-true']:.3f} | {t['bf16-mixed']:.3f} | "
                       f"{row['bf16_speedup']:.2f}x |")
        out += ["", "A run's wall time includes evaluation and waiting on the shared CPU: it is not a speed figure.",
                "",
                "| model | precision | epochs run (best) | test recall@10 | test ndcg@10 | run wall s |",
                "|---|---|---|---|---|---|"]
        for row in r["rows"]:
            for precision, run in row["runs"].items():
                out.append(f"| {row['model']} | {precision} | {run['epochs_run']} ({run['best_epoch']}) | "
                           f"{run['test']['recall@10']:.4f} | {run['test']['ndcg@10']:.4f} | {run['wall_s']:.0f} |")
            for name, b in row["runs"]["32-true"]["baselines"].items():
                out.append(f"| {name} (baseline) | – | – | {b['recall@10']:.4f} | {b['ndcg@10']:.4f} | – |")
        verdicts = []
        for row in r["rows"]:
            speed = row["bf16_speedup"]
            pace = ("no measurable difference" if abs(speed - 1) < 0.03 else "faster" if speed > 1 else "slower")
            verdicts.append(f"{row['model']}: bf16 vs fp32 on this CPU: {pace} ({speed:.2f}x the fp32 step rate)")
            best_name, best = max(row["runs"]["32-true"]["baselines"].items(), key=lambda kv: kv[1]["ndcg@10"])
            for precision, run in row["runs"].items():
                beats = run["test"]["ndcg@10"] > best["ndcg@10"]
                verdicts.append(f"{row['model']} {precision} {'beats' if beats else 'does not beat'} the best "
                                f"baseline, {best_name} (NDCG@10 {run['test']['ndcg@10']:.4f} vs "
                                f"{best['ndcg@10']:.4f})")
        out += ["", "; ".join(verdicts) + ".", ""]
    return out


def main() -> None:
    args = _parse()
    data_dir = Path(os.environ.get("GENREC_DATA_DIR", ROOT / ".." / "shared" / "data")) / "ml-100k"
    if not data_dir.is_dir():
        print(f"bench_precision: skipped: MovieLens-100K not found at {data_dir} (set GENREC_DATA_DIR)")
        return
    import torch

    from genrec.utils.provenance import provenance, write_json

    torch.set_num_threads(args.threads)
    prov = provenance()  # the commit at the start: the code that ran, whatever is committed while it runs
    flags = cpu_flags()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_precision-") as tmp:
        for model in args.models:
            experiment = PRESETS[model]
            speed = time_steps(experiment, args.steps, args.rounds)
            runs = {p: train_and_test(experiment, p, args.epochs, args.threads, Path(tmp)) for p in PRECISIONS}
            rows.append({"model": model, "experiment": experiment, "s_per_step": speed,
                         "bf16_speedup": speed["32-true"] / speed["bf16-mixed"], "runs": runs})
            print(f"{model:7s} s/step fp32 {speed['32-true']:.4f}  bf16 {speed['bf16-mixed']:.4f}  "
                  f"fp32/bf16 {rows[-1]['bf16_speedup']:.2f}x  |  test ndcg@10 fp32 "
                  f"{runs['32-true']['test']['ndcg@10']:.4f}  bf16 {runs['bf16-mixed']['test']['ndcg@10']:.4f}  "
                  f"most_popular {runs['32-true']['baselines']['most_popular']['ndcg@10']:.4f}  "
                  f"transitions {runs['32-true']['baselines']['transitions']['ndcg@10']:.4f}", flush=True)
    payload = {"benchmark": "bf16-mixed vs fp32 training on CPU", "dataset": "ml100k", "seed": 0,
               "config": {"experiments": {m: PRESETS[m] for m in args.models},
                          "epochs": args.epochs or "preset (100, early stopping)", "timed_steps": args.steps,
                          "rounds": args.rounds, "threads": args.threads, "batch_size": 128},
               "cpu_flags": flags, "rows": rows,
               "note": "shared 2-core machine (other engineers' jobs running); steps timed alternating in one "
                       "process, median of round medians", **prov}
    write_json(Path(args.out), payload)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
