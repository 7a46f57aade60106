"""Learning curves of finished genrec-train runs -> one results file: each run's validation metrics after every
training epoch, read from the run folder's own log (``logs/metrics.csv``, which the CSV logger keeps across
resumes), with the run's settings and, for a stage started with ``init_from``, the epoch it started from (so a
stage's curve continues its source's).

Usage::

    python -m scripts.analysis.record_curves --out results/curves_beauty_post.json runs/bpost/teacher \\
        runs/bpost/sft-0 ...
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from scripts.docs.tables.post_training import _post_prefix, _stage, _stage_label

#: validation metrics kept per epoch
METRICS = ("ndcg@10", "recall@10")


def curve(run_dir: Path) -> dict:
    """One run's settings and ``curve``: ``[{epoch, step, ndcg@10, recall@10}]`` after each validated epoch (the
    validation of the best checkpoint that genrec-train logs after training, at epoch ``epochs_run``, left out)."""
    from omegaconf import OmegaConf

    summary = json.loads((run_dir / "metrics.json").read_text())
    cfg = OmegaConf.load(run_dir / "config.yaml")
    log = (run_dir / "logs" / "metrics.csv").read_text().splitlines()
    rows = [r for r in csv.DictReader(log) if r.get("val/ndcg@10")]
    points = [{"epoch": int(r["epoch"]), "step": int(r["step"]), **{m: float(r[f"val/{m}"]) for m in METRICS}}
              for r in rows if int(r["epoch"]) < summary["epochs_run"]]
    every = int(cfg.trainer.get("check_val_every_n_epoch") or 1)  # validated after every ``every``-th epoch
    if [p["epoch"] for p in points] != list(range(every - 1, summary["epochs_run"], every)):
        raise SystemExit(f"record_curves: error: {run_dir}/logs/metrics.csv: expected one validation every {every} "
                         "epoch(s) "
                         f"0..{summary['epochs_run'] - 1}, got epochs {[p['epoch'] for p in points]}")
    started = json.loads((run_dir / "init_from.json").read_text()) if (run_dir / "init_from.json").exists() else None
    return {"run": str(run_dir), "results_name": cfg.get("results_name"), "model": cfg.model.name,
            "lr": cfg.optim.lr, "schedule": cfg.optim.get("schedule", "constant"),
            "max_epochs": cfg.trainer.max_epochs, "epochs_run": summary["epochs_run"],
            "best_epoch": summary["best_epoch"],
            "init_from": None if started is None else {"checkpoint": started["checkpoint"], "epoch": started["epoch"]},
            "test": {m: summary["metrics"]["test"][m] for m in METRICS}, "curve": points}


def tables(files: list[dict]) -> list[str]:
    """Validation NDCG@10 after every epoch of the runs in a curves file (scripts/analysis/record_curves.py), epochs
    counted from the start of training: a stage started with ``init_from`` continues its source's count."""
    out = []
    for r in (f for f in files if f.get("kind") == "validation_curves"):
        def start(run: dict) -> int:  # epochs trained before the run's first epoch
            return 0 if run["init_from"] is None else run["init_from"]["epoch"] + 1

        def label(run: dict) -> str:
            named = {"name": run["results_name"] or ""}
            return _stage_label(_stage(named)) if _post_prefix(named) else (run["results_name"] or run["run"])

        generative = [run for run in r["runs"] if run["model"] != "sasrec"]
        width = max(start(run) + run["epochs_run"] for run in generative)
        out += [f"## Learning curves (`results/{r['name']}.json`)", "",
                "`python -m scripts.analysis.record_curves`: validation NDCG@10 after each epoch, read from each run's "
                "own log; epochs counted from the start of training (a stage started from a checkpoint continues its "
                "count" + (f"; the retrieval model's row is cut at {width} epochs, its best is in the last columns"
                           if len(generative) < len(r["runs"]) else "") + ").", "",
                "| run | lr, schedule | " + " | ".join(str(e) for e in range(1, width + 1)) +
                " | best validation (epoch) | test ndcg@10 |", "|---|---|" + "---|" * (width + 2)]
        for run in r["runs"]:
            cells = [""] * width
            for point in run["curve"]:
                epoch = start(run) + point["epoch"]
                if epoch < width:
                    cells[epoch] = f"{point['ndcg@10']:.4f}"
            best = next(p for p in run["curve"] if p["epoch"] == run["best_epoch"])  # runs may skip validations
            out.append(f"| {label(run)} | {run['lr']:g}, {run['schedule']} | " + " | ".join(cells) +
                       f" | {best['ndcg@10']:.4f} ({start(run) + run['best_epoch'] + 1}) | "
                       f"{run['test']['ndcg@10']:.4f} |")
        out += ["", f"Commit `{r['commit'][:12]}` (of the script; each run's own commit is in its results file).",
                ""]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="results JSON to write")
    parser.add_argument("runs", nargs="+", help="genrec-train run folders")
    args = parser.parse_args(argv)
    from genrec.utils.provenance import provenance, write_json

    runs = [curve(Path(r)) for r in args.runs]
    write_json(Path(args.out), {"kind": "validation_curves", "metrics": list(METRICS), "runs": runs, **provenance()})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
