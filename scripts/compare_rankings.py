"""The same generator checkpoints ranked several ways -> one results file: for each run (a SID generator trained with
``model.generator.item_head=true``), its best checkpoint's validation and test metrics under every ``--variant``
(``model.decoding`` overrides, as ``genrec-eval decoding=...``): the beam ranked by its codes alone, the beam
re-ranked by the item head (``hybrid``), the item head alone over the whole corpus (``items``), wider beams.

Usage::

    python scripts/compare_rankings.py --out results/scientific_rankings.json runs/spost/sft_items-0 ... \\
        --variant rank=codes --variant rank=hybrid --variant rank=items --variant rank=hybrid,beam=50,top_k=50
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch


def parse_variant(text: str) -> dict:
    """``rank=hybrid,beam=50,code_weight=0.5`` -> ``{"rank": "hybrid", "beam": 50, "code_weight": 0.5}`` (numbers
    where they parse)."""
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise SystemExit(f"compare_rankings: error: --variant {text!r}: expected key=value[,key=value]")
        out[key] = _number(value)
    return out


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def evaluate(run_dir: Path, decoding: dict) -> dict:
    """``run_dir``'s best checkpoint under ``decoding`` -> its dataset, validation and test metrics and evaluation
    time."""
    from genrec.eval.breakdown import rank_users
    from genrec.training.builders import load_run

    cfg, datamodule, task = load_run(run_dir, "best", decoding=decoding)
    ks, exclude = tuple(cfg.eval.ks), cfg.eval.exclude_history
    task.exclude_history = exclude
    scorer, metrics, started = task.make_scorer(), {}, time.time()
    for split, loader in (("valid", datamodule.val_dataloader()), ("test", datamodule.test_dataloader())):
        metrics[split] = {**rank_users(scorer, loader, ks, exclude).metrics,
                          **task.eval_extras(lambda totals: totals)}
    return {"decoding": decoding, "dataset": datamodule.data.summary(), "metrics": metrics,
            "seconds": round(time.time() - started, 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders of generators with an item head")
    parser.add_argument("--variant", action="append", required=True, help="model.decoding overrides, k=v[,k=v]")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    from omegaconf import OmegaConf

    from genrec.utils.provenance import provenance, write_json

    torch.set_num_threads(args.threads)
    variants = [parse_variant(v) for v in args.variant]
    rows = []
    for run_dir in args.runs:
        cfg = OmegaConf.load(run_dir / "config.yaml")
        for decoding in variants:
            rows.append({"run": str(run_dir), "results_name": cfg.get("results_name"), "seed": cfg.seed,
                         **evaluate(run_dir, decoding)})
            print(run_dir, decoding, {k: round(v, 4) for k, v in rows[-1]["metrics"]["test"].items()}, flush=True)
    write_json(args.out, {"kind": "ranking_comparison", "name": args.out.stem, "dataset": rows[0]["dataset"],
                          "variants": variants, "runs": rows, **provenance()})


if __name__ == "__main__":
    main()
