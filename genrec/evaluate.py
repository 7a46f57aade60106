"""Evaluate saved checkpoints: ``genrec-eval run_dir=runs/<...> [compare_to=runs/<other>]`` (Hydra CLI).

Rebuilds data and model from each run's resolved ``config.yaml``, loads ``checkpoints/<checkpoint>.ckpt`` and
reports full-corpus metrics on the validation and test splits, with the baselines, and on the test split the
breakdowns of genrec/eval/breakdown.py (history length, target popularity, cold targets). Writes
``<run_dir>/eval/metrics.json`` and ``<run_dir>/eval/evaluation.png`` (or ``out_dir``). With ``compare_to`` the
second run is evaluated on the same dataset and shown beside the first.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from genrec.errors import DataError
from genrec.dist.checkpoint import load_weights
from genrec.eval.baselines import BASELINES
from genrec.eval.breakdown import breakdowns, rank_users
from genrec.eval.plots import plot_evaluation
from genrec.models.generative import BeamScorer, GenerativeRecommender
from genrec.train import format_table
from genrec.conf import CONF_MODULE
from genrec.training.builders import build_datamodule, build_task
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
    task = build_task(cfg, datamodule.data.num_items, datamodule.data.item_raw_ids)
    load_weights(ckpt_path, task)  # a Lightning file, or a distributed checkpoint folder of any world size
    return cfg, datamodule, task.eval()


def _evaluate(score_fn, datamodule, cfg: DictConfig, ks: tuple[int, ...], exclude: bool) -> dict[str, Any]:
    """Validation and test metrics of one scorer, and the test breakdowns; a generative model's
    :class:`BeamScorer` adds ``invalid_rate`` (decoded tuples that are no item) to each split's metrics."""
    ranked = {}
    for split, loader in (("valid", datamodule.val_dataloader()), ("test", datamodule.test_dataloader())):
        ranked[split] = rank_users(score_fn, loader, ks, exclude)
        if isinstance(score_fn, BeamScorer):
            ranked[split].metrics["invalid_rate"] = score_fn.pop_invalid_rate()
    b = cfg.breakdowns
    return {"metrics": {split: r.metrics for split, r in ranked.items()},
            "breakdowns": breakdowns(ranked["test"], datamodule.data, ks, list(b.history_edges),
                                     list(b.popularity_edges), b.cold_max_count)}


def _same_dataset(first, second, first_dir: Path, second_dir: Path) -> None:
    a, b = first.data, second.data
    if a.summary() != b.summary() or not np.array_equal(a.item_raw_ids, b.item_raw_ids):
        raise ValueError(f"compare_to: {second_dir / 'config.yaml'} was trained on {b.summary()}, but "
                         f"{first_dir / 'config.yaml'} on {a.summary()}: runs compared side by side need the same "
                         "dataset and item IDs")


def run(cfg: DictConfig) -> dict[str, Any]:
    run_dirs = [Path(cfg.run_dir)] + ([Path(cfg.compare_to)] if cfg.compare_to else [])
    loaded = [load_run(d, cfg.checkpoint) for d in run_dirs]
    first_cfg, datamodule, _ = loaded[0]
    for d, (_, other, _) in zip(run_dirs[1:], loaded[1:]):
        _same_dataset(datamodule, other, run_dirs[0], d)
    ks = tuple(cfg.ks or first_cfg.eval.ks)
    exclude = first_cfg.eval.exclude_history if cfg.exclude_history is None else cfg.exclude_history

    for _, _, task in loaded:
        if isinstance(task.model, GenerativeRecommender):  # it removes the history inside the beam
            task.model.exclude_history = exclude
    scorers = [task.model.scorer() if isinstance(task.model, GenerativeRecommender) else task.model.score_all
               for _, _, task in loaded]
    names = [c.model.name for c, _, _ in loaded]
    models = {}
    for i, (run_dir, name, (train_cfg, dm, _), scorer) in enumerate(zip(run_dirs, names, loaded, scorers)):
        label = name if names.count(name) == 1 else f"{name} #{i + 1}"
        models[label] = {"run_dir": str(run_dir), "checkpoint": cfg.checkpoint, "model": name,
                         "seed": train_cfg.seed, **_evaluate(scorer, dm, cfg, ks, exclude)}
    baselines = {}
    for name in cfg.baselines or []:
        if name not in BASELINES:
            raise ValueError(f"baselines: unknown baseline {name!r}; known: {sorted(BASELINES)}")
        baselines[name] = _evaluate(BASELINES[name](datamodule.data), datamodule, cfg, ks, exclude)

    out_dir = Path(cfg.out_dir) if cfg.out_dir else run_dirs[0] / "eval"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = {**models, **baselines}
    k = cfg.plot_metric.split("@")[1] if "@" in cfg.plot_metric else max(ks)
    plot = plot_evaluation(rows, cfg.plot_metric, [f"recall@{k}", f"ndcg@{k}", "mrr"], out_dir / "evaluation.png")
    out = {"dataset": datamodule.data.summary(), "exclude_history": exclude, "ks": list(ks),
           "breakdown_settings": OmegaConf.to_container(cfg.breakdowns), "models": models, "baselines": baselines,
           "plots": [plot.name], **provenance()}
    write_json(out_dir / "metrics.json", out)

    columns = [f"{m}@{k}" for k in ks for m in ("recall", "ndcg")] + ["mrr"]
    report = [f"Test metrics ({', '.join(str(d / 'checkpoints' / (cfg.checkpoint + '.ckpt')) for d in run_dirs)}):",
              format_table({n: r["metrics"]["test"] for n, r in rows.items()}, columns)]
    for breakdown, groups in next(iter(models.values()))["breakdowns"].items():
        report += [f"\nTest {cfg.plot_metric} by {breakdown.replace('_', ' ')} (users: "
                   + ", ".join(f"{g} {v['users']}" for g, v in groups.items()) + "):",
                   format_table({n: {g: v[cfg.plot_metric] for g, v in r["breakdowns"][breakdown].items()}
                                 for n, r in rows.items()}, list(groups))]
    print("\n".join(report) + f"\nwritten: {out_dir / 'metrics.json'}, {plot}")
    return out


@hydra.main(version_base="1.3", config_path=f"pkg://{CONF_MODULE}", config_name="eval")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except (DataError, ValueError) as err:
        print(f"genrec-eval: error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
