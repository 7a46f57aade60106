"""Quality against CPU time: train a preset with one thread under a CPU-seconds (or step) budget and record its
validation and test NDCG@10 / Recall@10 against the process CPU seconds at every validation pass, beside the
baselines' own cost (CPU seconds to build each baseline from the training parts and to score both splits).

The run is genrec-train's (``genrec.train.run``: its run folder, early stopping, best-checkpoint test) with the
callback of genrec/training/budget.py added (``+callbacks@callbacks.budget=budget``), ``threads=1``. The curve's
clock starts before the model is built and leaves out the callback's own test passes (see that module). From the
curve and the baselines the results file takes:

* ``cpu_seconds_to_pass``: per split, the CPU seconds of the first point (step 0 included) whose NDCG@10 is above
  ``transitions_last3_skip``'s on that split (``null``: never within the run);
* ``final``: the run's test metrics (its best validation checkpoint, as genrec-train reports it), the point it
  comes from, and the margin over ``transitions_last3_skip`` on test NDCG@10 and Recall@10.

Usage::

    python -m scripts.bench.bench_budget experiment=beauty_sasrec --recipe preset --seed 0
    python -m scripts.bench.bench_budget experiment=beauty_sasrec model.prior.enabled=true --recipe prior --seed 0
    python -m scripts.bench.bench_budget experiment=ml100k_sasrec --recipe preset --cpu-seconds 600 --max-steps 2000

Writes ``results/budget_<dataset>_<model>_<recipe>_seed<k>.json`` (the run folder under ``runs/budget/``) and
prints the curve.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from genrec import train as genrec_train  # noqa: E402
from genrec.conf import compose_config  # noqa: E402
from genrec.eval.baselines import BASELINES  # noqa: E402
from genrec.eval.metrics import evaluate  # noqa: E402
from genrec.training.budget import CURVE_FILE  # noqa: E402
from genrec.training.builders import build_datamodule  # noqa: E402
from genrec.utils.provenance import provenance, write_json  # noqa: E402

#: the baseline a model has to pass, and the metric
HEURISTIC, METRIC = "transitions_last3_skip", "ndcg@10"


def budget_config(overrides: list[str], seed: int, cpu_seconds: float | None, max_steps: int | None):
    """The run's config: ``overrides`` (an ``experiment=`` and the recipe's changes) with the budget callback, one
    thread and the seed."""
    extra = [f"seed={seed}", "threads=1", "trainer.enable_progress_bar=false", "+callbacks@callbacks.budget=budget",
             f"callbacks.budget.cpu_seconds={'null' if cpu_seconds is None else cpu_seconds}"]
    if max_steps is not None:
        extra.append(f"++trainer.max_steps={max_steps}")
    return compose_config("train", overrides=list(overrides) + extra)


def time_baselines(cfg) -> dict[str, dict[str, Any]]:
    """Every baseline of ``cfg.baselines``: its validation and test metrics and the process CPU seconds to build it
    (counting the training parts) and to score both splits, with ``cfg.threads`` torch threads."""
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    out = {}
    for name in cfg.baselines:
        started = time.process_time()
        scorer = BASELINES[name](datamodule.data)
        built = time.process_time()
        metrics = {split: evaluate(scorer, datamodule.eval_dataloader(split), tuple(cfg.eval.ks),
                                   cfg.eval.exclude_history) for split in ("valid", "test")}
        scored = time.process_time()
        out[name] = {**metrics, "cpu_seconds": {"build": round(built - started, 2), "score": round(scored - built, 2),
                                                "total": round(scored - started, 2)}}
    return out


def seconds_to_pass(points: list[dict], baseline: dict[str, dict[str, float]], split: str,
                    metric: str = METRIC) -> float | None:
    """CPU seconds of the first point whose ``split`` ``metric`` is above the baseline's (``None``: none is)."""
    return next((p["cpu_seconds"] for p in points if p[split][metric] > baseline[split][metric]), None)


def margins(test: dict[str, float], baseline: dict[str, float]) -> dict[str, float]:
    """Relative test margins over the baseline on NDCG@10 and Recall@10."""
    return {m: test[m] / baseline[m] - 1.0 for m in ("ndcg@10", "recall@10")}


def run_budget(overrides: list[str], recipe: str, seed: int = 0, cpu_seconds: float | None = 1800.0,
               max_steps: int | None = None, runs_dir: Path = ROOT / "runs" / "budget",
               results_dir: Path = ROOT / "results") -> dict[str, Any]:
    """Train under the budget, time the baselines, write and return the results file's contents."""
    origin = provenance()
    cfg = budget_config(overrides, seed, cpu_seconds, max_steps)
    stem = f"budget_{cfg.data.name}_{cfg.model.name}_{recipe}_seed{seed}"
    run_dir = Path(runs_dir) / stem
    metrics = genrec_train.run(cfg, run_dir)
    curve = json.loads((run_dir / CURVE_FILE).read_text())
    baselines = time_baselines(cfg)
    heuristic = baselines[HEURISTIC]
    best = metrics["checkpoints"]["best"]
    point = next(p for p in curve["points"] if p["step"] == best["global_step"] and p["step"] > 0)
    final = {"valid": metrics["metrics"]["valid"], "test": metrics["metrics"]["test"], "epoch": best["epoch"],
             "step": best["global_step"], "cpu_seconds": point["cpu_seconds"],
             "margin_over_heuristic": margins(metrics["metrics"]["test"], heuristic["test"])}
    result = {
        "kind": "budget_curve",
        "name": stem,
        "dataset": metrics["dataset"],
        "model": cfg.model.name,
        "recipe": recipe,
        "seed": seed,
        "overrides": list(overrides),
        "budget": {"cpu_seconds": cpu_seconds, "max_steps": max_steps, "threads": cfg.threads},
        "protocol": metrics["protocol"],
        "heuristic": HEURISTIC,
        "cpu_seconds_to_pass": {split: seconds_to_pass(curve["points"], heuristic, split)
                                for split in ("valid", "test")},
        "final": final,
        "cpu_seconds_run": curve["points"][-1]["cpu_seconds"],
        "stopped_by_budget": curve["stopped_by_budget"],
        "epochs_run": metrics["epochs_run"],
        "steps_run": metrics["steps_run"],
        "curve": curve["points"],
        "baselines": baselines,
        "run_dir": str(run_dir),
        **origin,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    write_json(Path(results_dir) / f"{stem}.json", result)
    return result


def report(result: dict[str, Any]) -> str:
    """The curve and the summary as text."""
    heuristic = result["baselines"][HEURISTIC]
    lines = [f"{result['name']}: {METRIC} against CPU seconds ({HEURISTIC}: valid "
             f"{heuristic['valid'][METRIC]:.4f}, test {heuristic['test'][METRIC]:.4f}, built and scored in "
             f"{heuristic['cpu_seconds']['total']:.1f} CPU s)", "  cpu_s  epoch   step   valid    test"]
    lines += [f"{p['cpu_seconds']:7.1f} {p['epoch']:6d} {p['step']:6d}  {p['valid'][METRIC]:.4f}  "
              f"{p['test'][METRIC]:.4f}" for p in result["curve"]]
    final = result["final"]
    lines.append(f"passed {HEURISTIC} after {result['cpu_seconds_to_pass']} CPU s (valid, test); final test "
                 f"{METRIC} {final['test'][METRIC]:.4f} ({final['margin_over_heuristic'][METRIC]:+.1%}), recall@10 "
                 f"{final['test']['recall@10']:.4f} ({final['margin_over_heuristic']['recall@10']:+.1%}), best at "
                 f"{final['cpu_seconds']:.1f} of {result['cpu_seconds_run']:.1f} CPU s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("overrides", nargs="+", help="genrec-train overrides: experiment=<preset> and the recipe's changes")
    p.add_argument("--recipe", required=True, help="the recipe's name in the results file's name")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cpu-seconds", type=float, default=1800.0, help="CPU budget (default 1800: 30 min)")
    p.add_argument("--max-steps", type=int, default=None, help="a step budget as well (trainer.max_steps)")
    p.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "budget")
    p.add_argument("--results-dir", type=Path, default=ROOT / "results")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    result = run_budget(args.overrides, args.recipe, args.seed, args.cpu_seconds, args.max_steps, args.runs_dir,
                        args.results_dir)
    print(report(result))


if __name__ == "__main__":
    main()
