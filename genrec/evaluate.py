"""Evaluate a saved checkpoint: ``genrec-eval run_dir=runs/<...>`` (Hydra CLI).

Rebuilds data and model from the run's resolved ``config.yaml``, loads ``checkpoints/<checkpoint>.ckpt`` and
reports full-corpus metrics on the validation and test splits, with the baselines, in ``<run_dir>/eval.json``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from genrec.data.errors import DataError
from genrec.dist.checkpoint import load_weights
from genrec.eval.metrics import evaluate
from genrec.train import evaluate_baselines, format_table
from genrec.training.builders import CONF_DIR, build_datamodule, build_task
from genrec.utils.provenance import provenance, write_json


def load_run(run_dir: Path, checkpoint: str = "best"):
    """-> (resolved run config, datamodule set up, task with the checkpoint's weights, in eval mode)."""
    config_path, ckpt_path = run_dir / "config.yaml", run_dir / "checkpoints" / f"{checkpoint}.ckpt"
    for path in (config_path, ckpt_path):
        if not path.exists():
            raise DataError(path, "not found: expected a run folder written by genrec-train")
    cfg = OmegaConf.load(config_path)
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    task = build_task(cfg, datamodule.data.num_items)
    load_weights(ckpt_path, task)  # a Lightning file, or a distributed checkpoint folder of any world size
    return cfg, datamodule, task.eval()


def run(cfg: DictConfig) -> dict[str, Any]:
    run_dir = Path(cfg.run_dir)
    train_cfg, datamodule, task = load_run(run_dir, cfg.checkpoint)
    ks = tuple(cfg.ks or train_cfg.eval.ks)
    exclude = train_cfg.eval.exclude_history if cfg.exclude_history is None else cfg.exclude_history
    metrics = {split: evaluate(task.model.score_all, datamodule.eval_dataloader(split), ks, exclude)
               for split in ("valid", "test")}
    train_cfg.eval.ks, train_cfg.eval.exclude_history = list(ks), exclude
    baselines = evaluate_baselines(train_cfg, datamodule) if cfg.baselines else {}
    out = {"run_dir": str(run_dir), "checkpoint": cfg.checkpoint, "dataset": datamodule.data.summary(),
           "model": train_cfg.model.name, "exclude_history": exclude, "metrics": metrics, "baselines": baselines,
           **provenance()}
    write_json(Path(cfg.out) if cfg.out else run_dir / "eval.json", out)
    columns = [f"{m}@{k}" for k in ks for m in ("recall", "ndcg")] + ["mrr"]
    rows = {train_cfg.model.name: metrics["test"], **{n: b["test"] for n, b in baselines.items()}}
    print(f"Test metrics of {run_dir / 'checkpoints' / (cfg.checkpoint + '.ckpt')}:\n{format_table(rows, columns)}")
    return out


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="eval")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except DataError as err:
        print(f"genrec-eval: error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
