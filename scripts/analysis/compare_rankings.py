"""The same generator checkpoints ranked several ways -> one results file: for each run (a SID generator trained with
``model.generator.item_head=true``), its best checkpoint's validation and test metrics under every ``--mode`` (a named
setting of conf/ranking: ``codes``, ``head``, ``liger``, ``guided``) and every ``--variant`` (``model.decoding``
overrides, as ``genrec-eval decoding=...``, e.g. wider beams), each row saying what carries its ranking (codes, head
or both); the runs' protocol (split, users scored, history removal), each checkpoint's sha256, and the baselines
measured once on the same splits.

Usage::

    python -m scripts.analysis.compare_rankings --out results/scientific_rankings.json runs/spost/sft_items-0 ... \\
        --mode codes --mode head --mode liger --mode guided --variant rank=hybrid,beam=50,top_k=50

``--keep FILE`` adds the rows of an earlier comparison of the same splits (each keeps the commit it was ranked at),
so seeds trained later join the table without ranking the earlier ones again; a run ranked now, or in an earlier
``--keep`` file, replaces that run's rows. With ``--keep`` alone, no run, the files are merged and the first file's
baselines kept.
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


def kept_comparison(path: Path, modes: list[str], variants: list[dict]) -> dict:
    """The earlier comparison at ``path`` (flat or in the results envelope), its rows each with the commit it was
    ranked at; a :class:`DataError` naming the file unless it ranked the same ``modes`` and ``variants``."""
    import json

    from genrec.errors import DataError
    from genrec.utils.results import flat, validate

    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DataError(path, f"cannot be read as JSON: {err}") from None
    record = flat(validate(record, path)) if "schema_version" in record else record
    if record.get("kind") != "ranking_comparison":
        raise DataError(path, "expected a ranking comparison (scripts/analysis/compare_rankings.py)", key="kind")
    if record["modes"] != modes or record["variants"] != variants:
        raise DataError(path, f"ranked modes {record['modes']} and variants {record['variants']}; expected "
                              f"{modes} and {variants}, as this comparison", key="modes")
    record["runs"] = [{**row, "commit": row.get("commit", record["commit"])} for row in record["runs"]]
    return record


def run_key(row: dict) -> str:
    """What names a row's run: its results name (a run trained again replaces its earlier rows), else its
    checkpoint's sha256."""
    return row["results_name"] or row["checkpoint"]["sha256"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="run folders of generators with an item head")
    parser.add_argument("--mode", action="append", default=[], help="a named ranking of conf/ranking")
    parser.add_argument("--variant", action="append", default=[], help="model.decoding overrides, k=v[,k=v]")
    parser.add_argument("--baselines", nargs="*", default=["most_popular", "transitions", "transitions_last3_skip"],
                        help="baselines measured once on the first run's data (genrec.eval.baselines)")
    parser.add_argument("--keep", action="append", default=[], type=Path,
                        help="an earlier comparison of the same splits whose rows join this one's")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    from omegaconf import OmegaConf

    from genrec.errors import DataError
    from genrec.eval.baselines import BASELINES
    from genrec.models.sid_generator import ranking_mode
    from genrec.utils.provenance import provenance, write_json

    if not args.mode and not args.variant:
        parser.error("give at least one --mode or --variant")
    if not args.runs and not args.keep:
        parser.error("give run folders, --keep files or both")
    unknown = [b for b in args.baselines if b not in BASELINES]
    if unknown:
        parser.error(f"unknown baseline(s) {unknown}; known: {sorted(BASELINES)}")
    torch.set_num_threads(args.threads)
    settings = [(name, ranking_mode(name)) for name in args.mode] + [(None, parse_variant(v)) for v in args.variant]
    variants = [d for mode, d in settings if mode is None]
    try:
        kept = [kept_comparison(path, args.mode, variants) for path in args.keep]
    except DataError as err:
        parser.error(str(err))
    rows, commit = [], provenance()["commit"]
    for run_dir in args.runs:
        cfg = OmegaConf.load(run_dir / "config.yaml")
        for mode, decoding in settings:
            rows.append({"run": str(run_dir), "results_name": cfg.get("results_name"), "seed": cfg.seed,
                         "mode": mode, **evaluate(run_dir, decoding), "commit": commit})
            print(run_dir, mode or decoding, {k: round(v, 4) for k, v in rows[-1]["metrics"]["test"].items()},
                  flush=True)
    reference = rows[0] if rows else kept[0]
    for path, record in zip(args.keep, kept):
        if (record["dataset"], record["protocol"]) != (reference["dataset"], reference["protocol"]):
            parser.error(str(DataError(path, f"ranked {record['dataset']} under {record['protocol']}; expected the "
                                             f"dataset and protocol of this comparison, {reference['dataset']} and "
                                             f"{reference['protocol']}", key="protocol")))
    ranked = {run_key(row) for row in rows}
    for record in kept:  # a run ranked now, or in an earlier --keep file, is not taken again
        fresh = [row for row in record["runs"] if run_key(row) not in ranked]
        ranked |= {run_key(row) for row in fresh}
        rows += fresh
    rows.sort(key=lambda row: row["seed"])  # stable: each seed's modes stay in order
    baselines = evaluate_baselines(args.runs[0], args.baselines) if args.runs else kept[0]["baselines"]
    write_json(args.out, {"kind": "ranking_comparison", "name": args.out.stem, "dataset": reference["dataset"],
                          "protocol": reference["protocol"], "modes": args.mode, "variants": variants, "runs": rows,
                          "baselines": baselines, **provenance()})


if __name__ == "__main__":
    main()
