"""Train a sequential recommender: ``genrec-train`` or ``python -m genrec.train`` (Hydra CLI).

One run = one folder (``runs/<data>-<model>/<time>/`` by default, see :mod:`genrec.runs`): the resolved
``config.yaml``, ``metrics.json`` (model and baselines, validation and test, the checkpoint they came from, and the
training telemetry's summary),
``checkpoints/``, CSV and TensorBoard logs and ``curves.png``. With ``results_name=<name>`` the metrics also go to
``<results_dir>/<name>.json`` for docs/results.md.

Training refuses a folder that already holds a run. ``resume_from=<run folder or one of its checkpoints>``
continues that run in its own folder, exactly: the run's ``config.yaml`` with the command line's value overrides
on top, every random state, the position in the epoch, the best score, early stopping, and the logs appended.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
import torch.distributed as dist
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from genrec.cli import check_command_line, continue_in_run_folder, format_table, metric_columns, run_cli
from genrec.conf import CONF_MODULE
from genrec.data.preprocess import PreprocessConfig
from genrec.data.split import PROTOCOLS, SplitConfig, split_summary
from genrec.dist import TorchRecStrategy
from genrec.dist.checkpoint import read_meta
from genrec.errors import ConfigError, UserError
from genrec.eval.baselines import BASELINES
from genrec.eval.metrics import evaluate
from genrec.models.item_init import initialize_items
from genrec.runs import CHECKPOINT_DIR, RunFolder, file_digest, results_file
from genrec.training.builders import build_datamodule, build_task, init_checkpoint, initialize
from genrec.training.plots import plot_curves
from genrec.training.stages import check_stage
from genrec.training.tables import check_table_config, close_tables
from genrec.training.telemetry import Telemetry, format_summary
from genrec.training.fit import build_trainer, check_train_config
from genrec.utils.provenance import provenance, write_json
from genrec.utils.results import write_result

log = logging.getLogger("genrec.train")

PROG = "genrec-train"
RESUMES_FILE = "resumes.jsonl"
INIT_FILE = "init_from.json"  # the checkpoint a stage started from (init_from=), with its sha256


def resume_folder(resume_from: str) -> tuple[Path, Path]:
    """``resume_from`` (a run folder, or a checkpoint inside its ``checkpoints/``) -> (run folder, checkpoint), both
    found; nothing is read (:func:`resume_point` checks the checkpoint)."""
    path = Path(resume_from)
    if path.is_dir() and not path.name.endswith(".ckpt"):
        folder, checkpoint = path, path / CHECKPOINT_DIR / "last.ckpt"
    elif path.parent.name == CHECKPOINT_DIR:
        folder, checkpoint = path.parent.parent, path
    else:
        raise UserError(f"resume_from={resume_from}: expected a run folder written by genrec-train, or a checkpoint "
                        f"in its {CHECKPOINT_DIR}/ folder")
    if not (folder / "config.yaml").is_file():
        raise UserError(f"resume_from={resume_from}: {folder} is not a run folder (no config.yaml)")
    if not checkpoint.exists():
        raise UserError(f"resume_from={resume_from}: {checkpoint} not found: the run stopped before its first "
                        f"checkpoint; delete {folder} and train again")
    return folder, checkpoint


def resume_point(resume_from: str) -> tuple[Path, Path, dict[str, Any]]:
    """:func:`resume_folder`, with the checkpoint checked to be the run's own and intact
    (:meth:`RunFolder.check_checkpoint`: a truncated, tampered or foreign file fails here, naming itself) ->
    (run folder, checkpoint, its meta)."""
    folder, checkpoint = resume_folder(resume_from)
    return folder, checkpoint, RunFolder(folder).check_checkpoint(checkpoint)


#: what a resumed run may change: how long it trains, where it runs, what it logs and reports (everything else,
#: model, data and optimizer settings included, belongs to the checkpoint and comes from the run's config.yaml)
RESUME_KEYS = ("trainer.max_epochs", "trainer.max_steps", "trainer.max_time", "trainer.devices", "trainer.num_nodes",
               "trainer.accelerator", "trainer.enable_progress_bar", "trainer.log_every_n_steps",
               "checkpoint_every_n_steps", "resume_from", "results_name", "results_dir", "overwrite_results",
               "threads", "baselines", "data.num_workers", "data.cache_dir")
RESUME_GROUPS = ("callbacks.", "logger.", "telemetry.")


def resumed_config(saved: DictConfig, overrides: list[str]) -> DictConfig:
    """The config of a resumed run: its saved ``config.yaml`` with the command line's ``overrides`` on top, which
    may only change :data:`RESUME_KEYS` and the keys under :data:`RESUME_GROUPS`."""
    cfg = saved.copy()
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key not in RESUME_KEYS and not key.startswith(RESUME_GROUPS):
            raise ConfigError(key, "a resumed run keeps its config.yaml; only how long it trains, where it runs and "
                                   f"what it logs may change ({', '.join(RESUME_KEYS + RESUME_GROUPS)})")
        if override.is_sweep_override() or override.is_delete():
            raise ConfigError(key, "a resumed run takes plain values (no sweeps, no deletions)")
        OmegaConf.update(cfg, key, override.value(), force_add=override.is_add())
    return cfg


def evaluate_baselines(cfg: DictConfig, datamodule) -> dict[str, dict[str, dict[str, float]]]:
    """Validation and test metrics of every baseline named in ``cfg.baselines``, by genrec's evaluation code."""
    out = {}
    for name in cfg.baselines:
        scorer = BASELINES[name](datamodule.data)
        out[name] = {split: evaluate(scorer, datamodule.eval_dataloader(split), tuple(cfg.eval.ks),
                                     cfg.eval.exclude_history) for split in ("valid", "test")}
    return out


def _split_metrics(logged: dict[str, Any], prefix: str) -> dict[str, float]:
    return {k.split("/", 1)[1]: float(v) for k, v in logged.items() if k.startswith(prefix + "/")}


def _check(cfg: DictConfig, run_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """Everything checkable before the data loads -> the checkpoint to resume from and its meta (or None)."""
    check_train_config(cfg)
    check_table_config(cfg)
    SplitConfig.from_config(cfg.data.get("split"))
    PreprocessConfig.from_config(cfg.data.get("preprocess"))
    check_stage(cfg)
    unknown = [b for b in cfg.baselines if b not in BASELINES]
    if unknown:
        raise ConfigError("baselines", f"unknown baseline(s) {unknown}; known: {sorted(BASELINES)}")
    results_file(cfg)
    if cfg.get("init_from"):
        init_checkpoint(cfg.init_from)
    if not cfg.resume_from:
        if rank_zero_only.rank == 0:  # other processes start once rank 0 has written the folder
            RunFolder(run_dir).require_new()
        return None
    folder, checkpoint, meta = resume_point(cfg.resume_from)
    if folder.resolve() != run_dir.resolve():
        raise UserError(f"resume_from={cfg.resume_from}: a run continues in its own folder {folder}, not in "
                        f"{run_dir}; to keep the original, copy the folder first and resume the copy")
    return checkpoint, meta


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
    resume, resume_meta = _check(cfg, run_dir) or (None, None)
    if rank_zero_only.rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not resume:
            RunFolder(run_dir).start_run()  # the identity every checkpoint of the run carries
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        if resume:
            with open(run_dir / RESUMES_FILE, "a") as f:
                f.write(json.dumps({"checkpoint": str(resume.resolve().relative_to(run_dir.resolve())), "epoch": resume_meta["epoch"],
                                    "global_step": resume_meta["global_step"], "commit": origin["commit"],
                                    "created": origin["created"]}) + "\n")
    if cfg.get("threads"):
        torch.set_num_threads(cfg.threads)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build_datamodule(cfg)
    datamodule.setup()  # a bad data file stops here, before the Trainer prints anything
    data = datamodule.data
    log.info("data: %s (seed %d)", data.summary(), cfg.seed)
    trainer, best = build_trainer(cfg, run_dir, resume_meta["global_step"] if resume_meta else None)
    task = build_task(cfg, data.num_items, data.item_raw_ids, datamodule.features, data)
    if cfg.model.get("item_init", "random") != "random" and not resume and not cfg.get("init_from"):
        initialize_items(task.model, data, cfg.model.item_init)  # a fresh run's item table (training parts only)
    # a new stage starts from another run's weights (recorded in the folder); a resumed one from its own checkpoint
    if cfg.get("init_from") and not resume:
        initialized = initialize(task, cfg.init_from)
        if rank_zero_only.rank == 0:
            write_json(run_dir / INIT_FILE, initialized)

    started = time.time()
    trainer.fit(task, datamodule=datamodule, ckpt_path=resume, weights_only=True)
    train_seconds = time.time() - started
    if not best.best_model_path:  # e.g. a time or step cap reached before the first validation
        raise ConfigError("trainer.check_val_every_n_epoch",
                          f"training stopped after {trainer.global_step} steps, before any validation "
                          "pass, so there is no best checkpoint to test: validate more often or let "
                          "the run go further (trainer.max_time, trainer.max_steps)")
    best_path = Path(best.best_model_path)
    valid = trainer.validate(task, datamodule=datamodule, ckpt_path=best_path, verbose=False, weights_only=True)[0]
    test = trainer.test(task, datamodule=datamodule, ckpt_path=best_path, verbose=False, weights_only=True)[0]
    close_tables(task)
    if not trainer.is_global_zero:
        return {}
    baselines = evaluate_baselines(cfg, datamodule)
    strategy = trainer.strategy
    best_meta = read_meta(best_path)
    telemetry = next((c for c in trainer.callbacks if isinstance(c, Telemetry)), None)
    resumes = [json.loads(line) for line in (run_dir / RESUMES_FILE).read_text().splitlines()] \
        if (run_dir / RESUMES_FILE).exists() else []

    metrics = {
        "dataset": data.summary(),
        "model": cfg.model.name,
        "seed": cfg.seed,
        "protocol": {"split": PROTOCOLS[data.split["kind"]], "ranking": "full corpus",
                     "exclude_history": cfg.eval.exclude_history, "monitor": best.monitor,
                     "split_details": split_summary(data),
                     "users_scored": {"valid": task.users_scored["val"], "test": task.users_scored["test"]}},
        **task.run_info(),
        "metrics": {"valid": _split_metrics(valid, "val"), "test": _split_metrics(test, "test")},
        "baselines": baselines,
        "checkpoints": {"best": {"file": str(best_path.relative_to(run_dir)), "sha256": file_digest(best_path),
                                 "epoch": int(best_meta["epoch"]), "global_step": int(best_meta["global_step"])}},
        "best_epoch": int(best_meta["epoch"]),
        "epochs_run": trainer.current_epoch,
        "steps_run": trainer.global_step,
        "train_seconds": round(train_seconds, 1),
        "resumes": resumes,
        "telemetry": telemetry.summary() if telemetry else None,
        "init_from": json.loads((run_dir / INIT_FILE).read_text()) if (run_dir / INIT_FILE).exists() else None,
        "processes": trainer.world_size,
        "sharding_plan": strategy.plan_text.splitlines() if isinstance(strategy, TorchRecStrategy) else None,
        **origin,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    write_json(run_dir / "metrics.json", metrics)
    csv_log = run_dir / "logs" / "metrics.csv"
    if csv_log.exists():
        plot_curves(csv_log, run_dir / "curves.png")
    results = results_file(cfg)
    if results:
        write_result(results, "train_run", {"name": cfg.results_name, **metrics})

    if metrics["telemetry"]:
        print("\n" + format_summary(metrics["telemetry"]))
    rows = {cfg.model.name: metrics["metrics"]["test"], **{n: b["test"] for n, b in baselines.items()}}
    for line in task.notes(metrics["metrics"]["test"]):
        print(f"\n{line}")
    tested, with_target = task.users_scored["test"], metrics["protocol"]["split_details"]["users_evaluated"]["test"]
    if tested < with_target:
        print(f"\n{cfg.model.name} was tested on {tested} of the {with_target} users with a test target (the "
              "trainer limited the test batches); the baselines on all of them")
    history = "removed" if cfg.eval.exclude_history else "kept"
    print(f"\nTest metrics on {data.name} ({tested} of {data.num_users} users tested, {data.num_items} items; "
          f"{data.split['kind']} split, full-corpus ranking, history {history}):\n"
          f"{format_table(rows, metric_columns(cfg.eval.ks))}\nrun folder: {run_dir}")
    return metrics


def _run_from_hydra(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if cfg.resume_from:
        folder, _ = resume_folder(cfg.resume_from)
        # hparams_search= composes the Hydra settings of a sweep trial the sweeper resumes, not the run's config
        overrides = [o for o in HydraConfig.get().overrides.task
                     if not o.startswith(("resume_from=", "hparams_search="))]
        cfg = resumed_config(RunFolder(folder).config(), overrides + [f"resume_from={cfg.resume_from}"])
    run(cfg, run_dir)


@hydra.main(version_base="1.3", config_path=f"pkg://{CONF_MODULE}", config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    run_cli(PROG, _run_from_hydra, cfg)


def main() -> None:
    """The CLI. ``resume_from=<run>`` without ``hydra.run.dir`` continues in the run's own folder."""
    check_command_line(PROG, "train")
    continue_in_run_folder(PROG, lambda resume: resume_folder(resume)[0])
    _hydra_main()


if __name__ == "__main__":
    main()
