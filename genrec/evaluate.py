"""Evaluate saved checkpoints: ``genrec-eval run_dir=runs/<...> [compare_to=runs/<other>]`` (Hydra CLI).

Rebuilds data and model from each run's ``config.yaml`` (its ``_target_`` callables checked against an allow-list
first: a run folder is data, not code), loads the checkpoint ``metrics.json`` names (checked to be the one the
metrics were computed from) or ``checkpoint=last``, and reports full-corpus metrics on the validation and test
splits, with the baselines, and on the test split the breakdowns of genrec/eval/breakdown.py (history length,
target popularity, cold targets). Writes
``<run_dir>/eval/metrics.json`` and ``<run_dir>/eval/evaluation.png`` (or ``out_dir``). With ``compare_to`` the
second run is evaluated on the same dataset and shown beside the first. ``decoding={beam:50,rank:codes}``
changes the first run's ``model.decoding`` (generative runs); ``compare_to`` the same run shows it beside the run's
own decoding.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from genrec.cli import check_command_line, format_table, metric_columns, run_cli
from genrec.conf import CONF_MODULE
from genrec.errors import ConfigError, UserError
from genrec.eval.baselines import BASELINES
from genrec.eval.breakdown import breakdowns, rank_users
from genrec.eval.plots import plot_evaluation
from genrec.runs import RunFolder
from genrec.trust import TRUSTED_TARGETS
from genrec.training.builders import load_run
from genrec.training.task import RecommenderTask
from genrec.utils.provenance import provenance, write_json


def _evaluate(score_fn, datamodule, cfg: DictConfig, ks: tuple[int, ...], exclude: bool,
              task: RecommenderTask | None = None) -> dict[str, Any]:
    """Validation and test metrics of one scorer, and the test breakdowns; a task's extra metrics (a generative
    model's ``invalid_rate``) are added to each split's metrics."""
    ranked = {}
    for split, loader in (("valid", datamodule.val_dataloader()), ("test", datamodule.test_dataloader())):
        ranked[split] = rank_users(score_fn, loader, ks, exclude)
        if task is not None:
            ranked[split].metrics.update(task.eval_extras(lambda totals: totals))
    b = cfg.breakdowns
    return {"metrics": {split: r.metrics for split, r in ranked.items()},
            "breakdowns": breakdowns(ranked["test"], datamodule.data, ks, list(b.history_edges),
                                     list(b.popularity_edges), b.cold_max_count)}


def _same_dataset(first, second, first_dir: Path, second_dir: Path) -> None:
    a, b = first.data, second.data
    if a.summary() != b.summary() or not np.array_equal(a.item_raw_ids, b.item_raw_ids) or a.split != b.split:
        raise UserError(f"compare_to: {second_dir / 'config.yaml'} was trained on {b.summary()} split {b.split}, "
                         f"but {first_dir / 'config.yaml'} on {a.summary()} split {a.split}: runs compared side by "
                         "side need the same dataset, item IDs and split")


def run(cfg: DictConfig) -> dict[str, Any]:
    run_dirs = [Path(cfg.run_dir)] + ([Path(cfg.compare_to)] if cfg.compare_to else [])
    unknown = [b for b in cfg.baselines or [] if b not in BASELINES]
    if unknown:
        raise ConfigError("baselines", f"unknown baseline(s) {unknown}; known: {sorted(BASELINES)}")
    allowed = TRUSTED_TARGETS + tuple(cfg.trusted_targets)
    checkpoints = []
    for key, run_dir in zip(("run_dir", "compare_to"), run_dirs):  # both checked before either loads data
        run = RunFolder.existing(run_dir, key)
        run.config(allowed)
        checkpoints.append(run.checkpoint(cfg.checkpoint))
    decoding = [OmegaConf.to_container(cfg.decoding) if cfg.decoding else None, None]  # run_dir's only
    loaded = [load_run(d, c, allowed, dec) for d, c, dec in zip(run_dirs, checkpoints, decoding)]
    first_cfg, datamodule, _ = loaded[0]
    for d, (_, other, _) in zip(run_dirs[1:], loaded[1:]):
        _same_dataset(datamodule, other, run_dirs[0], d)
    ks = tuple(cfg.ks or first_cfg.eval.ks)
    exclude = first_cfg.eval.exclude_history if cfg.exclude_history is None else cfg.exclude_history

    names = [c.model.name for c, _, _ in loaded]
    models = {}
    for i, (run_dir, name, (train_cfg, dm, task)) in enumerate(zip(run_dirs, names, loaded)):
        task.exclude_history = exclude
        label = name if names.count(name) == 1 else f"{name} #{i + 1}"
        models[label] = {"run_dir": str(run_dir), "checkpoint": cfg.checkpoint, "model": name,
                         "seed": train_cfg.seed, "decoding": decoding[i],
                         **_evaluate(task.make_scorer(), dm, cfg, ks, exclude, task)}
    baselines = {name: _evaluate(BASELINES[name](datamodule.data), datamodule, cfg, ks, exclude)
                 for name in cfg.baselines or []}

    out_dir = Path(cfg.out_dir) if cfg.out_dir else run_dirs[0] / "eval"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = {**models, **baselines}
    k = cfg.plot_metric.split("@")[1] if "@" in cfg.plot_metric else max(ks)
    plot = plot_evaluation(rows, cfg.plot_metric, [f"recall@{k}", f"ndcg@{k}", "mrr"], out_dir / "evaluation.png")
    out = {"dataset": datamodule.data.summary(), "exclude_history": exclude, "ks": list(ks),
           "breakdown_settings": OmegaConf.to_container(cfg.breakdowns), "models": models, "baselines": baselines,
           "plots": [plot.name], **provenance()}
    write_json(out_dir / "metrics.json", out)

    columns = metric_columns(ks)
    report = [f"Test metrics ({', '.join(f'{d} ({cfg.checkpoint} checkpoint)' for d in run_dirs)}):",
              format_table({n: r["metrics"]["test"] for n, r in rows.items()}, columns)]
    for breakdown, groups in next(iter(models.values()))["breakdowns"].items():
        report += [f"\nTest {cfg.plot_metric} by {breakdown.replace('_', ' ')} (users: "
                   + ", ".join(f"{g} {v['users']}" for g, v in groups.items()) + "):",
                   format_table({n: {g: v[cfg.plot_metric] for g, v in r["breakdowns"][breakdown].items()}
                                 for n, r in rows.items()}, list(groups))]
    print("\n".join(report) + f"\nwritten: {out_dir / 'metrics.json'}, {plot}")
    return out


@hydra.main(version_base="1.3", config_path=f"pkg://{CONF_MODULE}", config_name="eval")
def _hydra_main(cfg: DictConfig) -> None:
    run_cli("genrec-eval", run, cfg)


def main() -> None:
    check_command_line("genrec-eval", "eval")
    _hydra_main()


if __name__ == "__main__":
    main()
