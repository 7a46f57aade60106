"""Train a sequential recommender: ``python -m genrec.train`` or ``genrec-train`` (Hydra CLI).

One run = one folder (``runs/<data>-<model>/<time>/`` by default) with the resolved ``config.yaml``,
``metrics.json`` (model and baselines, validation and test), ``checkpoints/``, CSV and TensorBoard logs and
``curves.png``. With ``results_name=<name>`` the metrics also go to ``results/<name>.json`` for docs/results.md.
"""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
import torch.distributed as dist
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from omegaconf import DictConfig, OmegaConf

from genrec.errors import DataError
from genrec.dist import ShardingConfig, TorchRecStrategy
from genrec.dist.checkpoint import checkpoint_epoch
from genrec.eval.baselines import BASELINES
from genrec.eval.metrics import evaluate
from genrec.conf import CONF_MODULE
from genrec.training.builders import build_datamodule, build_task, is_generative
from genrec.training.plots import plot_curves
from genrec.utils.provenance import REPO_ROOT, provenance, write_json

log = logging.getLogger("genrec.train")


def evaluate_baselines(cfg: DictConfig, datamodule) -> dict[str, dict[str, dict[str, float]]]:
    """Validation and test metrics of every baseline named in ``cfg.baselines``, by genrec's evaluation code."""
    out = {}
    for name in cfg.baselines:
        if name not in BASELINES:
            raise KeyError(f"unknown baseline {name!r}; known: {sorted(BASELINES)}")
        scorer = BASELINES[name](datamodule.data)
        out[name] = {split: evaluate(scorer, datamodule.eval_dataloader(split), tuple(cfg.eval.ks),
                                     cfg.eval.exclude_history) for split in ("valid", "test")}
    return out


def _split_metrics(logged: dict[str, Any], prefix: str) -> dict[str, float]:
    return {k.split("/", 1)[1]: float(v) for k, v in logged.items() if k.startswith(prefix + "/")}


def format_table(rows: dict[str, dict[str, float]], columns: list[str]) -> str:
    """A plain-text table: one row per model/baseline, one column per metric."""
    width = max(len(name) for name in rows) + 2
    lines = ["".ljust(width) + "".join(c.rjust(11) for c in columns)]
    for name, metrics in rows.items():
        lines.append(name.ljust(width) + "".join(f"{metrics.get(c, float('nan')):11.4f}" for c in columns))
    return "\n".join(lines)


def trainer_arguments(cfg: DictConfig) -> dict[str, Any]:
    """``cfg.trainer`` as keyword arguments; with ``sharding.type`` set, the strategy is genrec's
    :class:`TorchRecStrategy` (tables sharded, dense part data-parallel), even in one process."""
    kwargs = OmegaConf.to_container(cfg.trainer, resolve=True)
    sharding = ShardingConfig.from_config(cfg.sharding)
    if sharding.enabled:
        if kwargs.get("strategy", "auto") != "auto":
            raise ValueError(f"sharding={sharding.type} trains with genrec's TorchRecStrategy: leave trainer.strategy "
                             f"at auto (got {kwargs['strategy']!r})")
        kwargs["strategy"] = TorchRecStrategy(sharding)
    return kwargs


def run(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Train, select the best validation checkpoint, test it and write the run folder. Returns metrics.json.

    With several processes every process runs this function; rank 0 writes the results and returns them (the
    other ranks return ``{}``). The process group, if the run started one, is closed at the end."""
    try:
        return _train_and_test(cfg, run_dir)
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def _train_and_test(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    origin = provenance()  # taken before training: the commit that was checked out when the code was loaded
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if cfg.get("threads"):
        torch.set_num_threads(cfg.threads)
    L.seed_everything(cfg.seed, workers=True)
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    data = datamodule.data
    log.info("data: %s", data.summary())

    task = build_task(cfg, data.num_items, data.item_raw_ids)
    monitor = f"val/{cfg.eval.monitor}"
    checkpoint = ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="best", monitor=monitor, mode="max",
                                 save_last=True)
    callbacks = [checkpoint]
    if cfg.early_stop_patience:
        callbacks.append(EarlyStopping(monitor=monitor, mode="max", patience=cfg.early_stop_patience))
    csv_logger = CSVLogger(run_dir, name="logs", version="")
    trainer = L.Trainer(**trainer_arguments(cfg), callbacks=callbacks, default_root_dir=run_dir,
                        logger=[csv_logger, TensorBoardLogger(run_dir, name="tensorboard", version="")])
    started = time.time()
    trainer.fit(task, datamodule=datamodule, ckpt_path=cfg.resume_from)
    train_seconds = time.time() - started
    valid = trainer.validate(task, datamodule=datamodule, ckpt_path="best", verbose=False)[0]
    test = trainer.test(task, datamodule=datamodule, ckpt_path="best", verbose=False)[0]
    if not trainer.is_global_zero:
        return {}
    baselines = evaluate_baselines(cfg, datamodule)
    strategy = trainer.strategy

    metrics = {
        "dataset": data.summary(),
        "model": cfg.model.name,
        "seed": cfg.seed,
        "protocol": {"split": "leave-one-out (valid: second-to-last, test: last)", "ranking": "full corpus",
                     "exclude_history": cfg.eval.exclude_history, "monitor": monitor},
        **(_generative_info(cfg, task.model) if is_generative(cfg) else {}),
        "metrics": {"valid": _split_metrics(valid, "val"), "test": _split_metrics(test, "test")},
        "baselines": baselines,
        "best_checkpoint": str(Path(checkpoint.best_model_path).relative_to(run_dir)),
        "best_epoch": checkpoint_epoch(checkpoint.best_model_path),  # not the CSV log: a resume restarts it
        "epochs_run": trainer.current_epoch,
        "steps_run": trainer.global_step,
        "train_seconds": round(train_seconds, 1),
        "processes": trainer.world_size,
        "sharding_plan": strategy.plan_text.splitlines() if isinstance(strategy, TorchRecStrategy) else None,
        **origin,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    write_json(run_dir / "metrics.json", metrics)
    plot_curves(Path(csv_logger.log_dir) / "metrics.csv", run_dir / "curves.png")
    if cfg.results_name:
        write_json(REPO_ROOT / "results" / f"{cfg.results_name}.json", {"name": cfg.results_name, **metrics})

    columns = [f"{m}@{k}" for k in cfg.eval.ks for m in ("recall", "ndcg")] + ["mrr"]
    rows = {cfg.model.name: metrics["metrics"]["test"], **{n: b["test"] for n, b in baselines.items()}}
    if is_generative(cfg):
        print(f"\nInvalid semantic IDs among the decoded top-{task.model.top_k}: "
              f"{metrics['metrics']['test']['invalid_rate']:.2%} (constrained: {task.model.constrained})")
    print(f"\nTest metrics on {data.name} ({data.num_users} users, {data.num_items} items; full-corpus ranking, "
          f"history {'removed' if cfg.eval.exclude_history else 'kept'}):\n{format_table(rows, columns)}\n"
          f"run folder: {run_dir}")
    return metrics


def _generative_info(cfg: DictConfig, model) -> dict[str, Any]:
    """What a generative run's numbers depend on beyond the usual: its SID table and how it decodes."""
    return {"sid_table": {"folder": str(cfg.sid_table), "content_hash": model.sids.content_hash,
                          "codebook_sizes": list(model.sids.codebook_sizes), "tokenizer": model.sid_config},
            "decoding": {"beam": model.beam, "top_k": model.top_k, "constrained": model.constrained,
                         "history_removal": "history items masked in the beam's last step" if
                         cfg.eval.exclude_history else "none",
                         "ranking": f"the beam's top-{model.top_k} items ranked by log-probability; items outside "
                                    "it count as misses (MRR truncated there)"}}


@hydra.main(version_base="1.3", config_path=f"pkg://{CONF_MODULE}", config_name="train")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg, Path(HydraConfig.get().runtime.output_dir))
    except DataError as err:
        print(f"genrec-train: error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
