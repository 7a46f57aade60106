"""The same generator checkpoints ranked several ways -> one results file: for each run (a SID generator trained with
``model.generator.item_head=true``), its best checkpoint's validation and test metrics under every ``--mode`` (a named
setting of conf/ranking: ``codes``, ``head``, ``liger``, ``guided``) and every ``--variant`` (``model.decoding``
overrides, as ``genrec-eval decoding=...``, e.g. wider beams), each row saying what carries its ranking (codes, head
or both); the runs' protocol (split, users scored, history removal), each checkpoint's sha256, and the baselines
measured once on the same splits.

Usage::

    python -m scripts.analysis.compare_rankings --out results/scientific_rankings.json runs/spost/sft_items-0 ... \\
        --mode codes --mode head --mode liger --mode guided --variant rank=hybrid,beam=50,top_k=50
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
    """``run_dir``'s best checkpoint under ``decoding`` -> its dataset, protocol (split, users scored), checkpoint
    (file, sha256), what carries the ranking, validation and test metrics and evaluation time."""
    from genrec.data.split import PROTOCOLS, split_summary
    from genrec.dist.checkpoint import read_meta
    from genrec.eval.breakdown import rank_users
    from genrec.runs import RunFolder, file_digest
    from genrec.training.builders import load_run

    path = RunFolder.existing(run_dir).checkpoint("best")
    cfg, datamodule, task = load_run(run_dir, path, decoding=decoding)
    ks, exclude = tuple(cfg.eval.ks), cfg.eval.exclude_history
    task.exclude_history = exclude
    scorer, metrics, users, started = task.make_scorer(), {}, {}, time.time()
    for split, loader in (("valid", datamodule.val_dataloader()), ("test", datamodule.test_dataloader())):
        ranked = rank_users(scorer, loader, ks, exclude)
        metrics[split] = {**ranked.metrics, **task.eval_extras(lambda totals: totals)}
        users[split] = len(ranked.ranks)
    data, meta, model = datamodule.data, read_meta(path), task.model
    return {"decoding": decoding, "carried_by": model.ranking.carried_by,
            "dataset": data.summary(),
            "protocol": {"split": PROTOCOLS[data.split["kind"]], "ranking": "full corpus", "exclude_history": exclude,
                         "split_details": split_summary(data), "users_scored": users},
            "checkpoint": {"file": str(path.relative_to(run_dir)), "sha256": file_digest(path),
                           "epoch": int(meta["epoch"]), "global_step": int(meta["global_step"])},
            "metrics": metrics, "seconds": round(time.time() - started, 1)}


def evaluate_baselines(run_dir: Path, names: list[str]) -> dict:
    """The baselines ``names`` on ``run_dir``'s data and splits (validation and test metrics each)."""
    from genrec.eval.baselines import BASELINES
    from genrec.eval.breakdown import rank_users
    from genrec.training.builders import build_datamodule
    from genrec.runs import RunFolder

    cfg = RunFolder.existing(run_dir).config()
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    ks, exclude = tuple(cfg.eval.ks), cfg.eval.exclude_history
    out = {}
    for name in names:
        scorer = BASELINES[name](datamodule.data)
        out[name] = {split: rank_users(scorer, loader, ks, exclude).metrics for split, loader in
                     (("valid", datamodule.val_dataloader()), ("test", datamodule.test_dataloader()))}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders of generators with an item head")
    parser.add_argument("--mode", action="append", default=[], help="a named ranking of conf/ranking")
    parser.add_argument("--variant", action="append", default=[], help="model.decoding overrides, k=v[,k=v]")
    parser.add_argument("--baselines", nargs="*", default=["most_popular", "transitions", "transitions_last3_skip"],
                        help="baselines measured once on the first run's data (genrec.eval.baselines)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    from omegaconf import OmegaConf

    from genrec.eval.baselines import BASELINES
    from genrec.models.sid_generator import ranking_mode
    from genrec.utils.provenance import provenance, write_json

    if not args.mode and not args.variant:
        parser.error("give at least one --mode or --variant")
    unknown = [b for b in args.baselines if b not in BASELINES]
    if unknown:
        parser.error(f"unknown baseline(s) {unknown}; known: {sorted(BASELINES)}")
    torch.set_num_threads(args.threads)
    settings = [(name, ranking_mode(name)) for name in args.mode] + [(None, parse_variant(v)) for v in args.variant]
    rows = []
    for run_dir in args.runs:
        cfg = OmegaConf.load(run_dir / "config.yaml")
        for mode, decoding in settings:
            rows.append({"run": str(run_dir), "results_name": cfg.get("results_name"), "seed": cfg.seed,
                         "mode": mode, **evaluate(run_dir, decoding)})
            print(run_dir, mode or decoding, {k: round(v, 4) for k, v in rows[-1]["metrics"]["test"].items()},
                  flush=True)
    baselines = evaluate_baselines(args.runs[0], args.baselines)
    write_json(args.out, {"kind": "ranking_comparison", "name": args.out.stem, "dataset": rows[0]["dataset"],
                          "protocol": rows[0]["protocol"], "modes": args.mode,
                          "variants": [d for mode, d in settings if mode is None], "runs": rows,
                          "baselines": baselines, **provenance()})


if __name__ == "__main__":
    main()
