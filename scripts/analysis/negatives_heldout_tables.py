"""The docs table of scripts/analysis/negatives_heldout.py: how often an alignment stage's rejected items were the
user's own held-out items (shown in the post-training section of docs/results/generative.md).
"""
from __future__ import annotations

from pathlib import Path


def table(files: list[dict], dataset: str) -> list[str]:
    """How often an alignment stage's rejected items were the user's own validation or test target
    (scripts/analysis/negatives_heldout.py), for the stages that ran on ``dataset``."""
    rows = [row for f in files if f.get("kind") == "negatives_heldout" for row in f["runs"]
            if row["dataset"]["dataset"] == dataset]
    if not rows:
        return []
    out = ["How often the rejected items were the user's own held-out items (`scripts/analysis/negatives_heldout.py` "
           "on the "
           "stages' cached negatives; the stages cannot see those items, and excluding them would leak them): share "
           "of preference examples whose rejected items contain the user's validation target, test target, either, "
           "and share of all rejected items that are one of them.", "",
           "| stage run | negatives | seed | examples | validation target | test target | either | of rejected items |",
           "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        source = {"num_negatives": row["negatives_per_example"], "negatives": row["negatives"],
                  "beam_skip": row.get("beam_skip", 0)}
        out.append(f"| `{Path(row['run']).name}` | {_negatives_label(source)} | {row['seed']} | "
                   f"{row['examples']:,} | {row['examples_rejecting_valid_target']:.2%} | "
                   f"{row['examples_rejecting_test_target']:.2%} | {row['examples_rejecting_either']:.2%} | "
                   f"{row['rejected_items_that_are_heldout_targets']:.3%} |")
    return out + [""]


def _negatives_label(align: dict) -> str:
    """An alignment stage's ``align`` settings -> its negatives in words: ``8 beam``, ``8 beam from rank 11``."""
    skip = align.get("beam_skip", 0)
    return f"{align['num_negatives']} {align['negatives']}" + (f" from rank {skip + 1}" if skip else "")
