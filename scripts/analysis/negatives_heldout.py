"""How often an alignment stage's rejected items are the user's own held-out items (issue 16: why S-DPO with the
SFT model's beam as negatives falls far below its control).

The stage's preference examples come from the training split only (one per user, chosen = its last training item,
or one per training position, ``stage.positions=all``), rejected = ``num_negatives`` items that are never a training
item of the user. Nothing stops a
rejected item from being the user's validation or test target, and the stage cannot know (excluding them would leak
held-out data): this script counts, after the fact, how often it happened. Popularity negatives rarely hit a given
user's next item; the model's own beam is built to.

Reads the negatives cached in each run's checkpoint (``genrec_preferences``) and the run's data split; writes, per
run, the share of examples whose rejected items contain the user's validation target, the test target, either one,
and the share of all rejected items that are one of them::

    python -m scripts.analysis.negatives_heldout runs/post/sdpo_seq-1 runs/post/sdpo_seq_beam-1 \\
        --out results/negatives_heldout_beauty_post.json

(named so that it is not taken for a post-training run: those results start with ``beauty_post_``.)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch


def heldout_hits(negatives: np.ndarray, users: np.ndarray, valid: np.ndarray, test: np.ndarray) -> dict:
    """``negatives (U, K)`` rejected items (0 = empty) of ``users (U,)``; ``valid``/``test`` ``(num_users,)`` each
    user's held-out target (0 = none) -> the shares described in the module docstring."""
    in_valid = (negatives == valid[users, None]) & (valid[users, None] > 0)
    in_test = (negatives == test[users, None]) & (test[users, None] > 0)
    return {"examples": int(len(users)), "negatives_per_example": int(negatives.shape[1]),
            "examples_rejecting_valid_target": float(in_valid.any(1).mean()),
            "examples_rejecting_test_target": float(in_test.any(1).mean()),
            "examples_rejecting_either": float((in_valid | in_test).any(1).mean()),
            "rejected_items_that_are_heldout_targets": float((in_valid | in_test).sum() / (negatives > 0).sum())}


def heldout_targets(data) -> tuple[np.ndarray, np.ndarray]:
    """``(num_users,)`` each user's validation and test target item, as the evaluation has them
    (:meth:`SequenceData.targets`; 0 where the split has none)."""
    out = []
    for split in ("valid", "test"):
        users, positions = data.targets(split)
        items = np.zeros(data.num_users, dtype=np.int64)
        items[users] = data.item_ids[positions]
        out.append(items)
    return out[0], out[1]


def run_hits(run_dir: str) -> dict:
    from genrec.runs import RunFolder
    from genrec.training.align import CHECKPOINT_KEY
    from genrec.training.builders import build_datamodule
    from genrec.training.stages import stage_config

    run = RunFolder.existing(run_dir)
    cfg = run.config()
    checkpoint = torch.load(run.checkpoint("last"), map_location="cpu", weights_only=True)
    if CHECKPOINT_KEY not in checkpoint:
        raise SystemExit(f"{run_dir}: its last checkpoint has no {CHECKPOINT_KEY} (not an alignment stage)")
    preferences = checkpoint[CHECKPOINT_KEY]
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    data = datamodule.data
    keys = np.flatnonzero(preferences["chosen"].numpy() > 0)  # the examples' chosen items in data.item_ids
    users = np.searchsorted(data.offsets, keys, side="right") - 1
    valid, test = heldout_targets(data)
    hits = heldout_hits(preferences["negatives"].numpy()[keys], users, valid, test)
    stage = stage_config(cfg)
    return {"run": str(run_dir), "dataset": datamodule.data.summary(), "negatives": stage.negatives,
            "beam_skip": int(stage.get("beam_skip", 0)), "seed": int(cfg.seed), **hits}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="alignment-stage run folders (stage=dpo|sdpo)")
    parser.add_argument("--out", required=True, help="results JSON to write")
    args = parser.parse_args(argv)
    from genrec.utils.provenance import provenance, write_json

    rows = [run_hits(r) for r in args.runs]
    for row in rows:
        print(json.dumps(row))
    write_json(Path(args.out), {"kind": "negatives_heldout", "runs": rows, **provenance()})


if __name__ == "__main__":
    main()
