"""Train online from an event stream: ``genrec-stream`` or ``python -m genrec.stream`` (Hydra CLI, ``stream.yaml``).

One run = one folder (``runs/stream-<model>/<time>/`` by default): ``config.yaml``, ``checkpoints/step-*/``,
``live/`` (the live stores), ``logs/stream.csv`` and ``logs/prequential.csv``, ``tensorboard/``,
``dead_letters.jsonl``, ``exports/v*/``, and when the run stops, ``prequential.png`` and ``metrics.json``.

A stream run is restarted with ``resume_from=<run folder>`` (after a crash or a stop): it continues from its newest
checkpoint, in its own folder, with its ``config.yaml``; the command line may change only when it stops, how it
logs, its threads and how the source is reached (:data:`RESUME_KEYS`). Training refuses a folder that already
holds a run.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from genrec.cli import check_command_line, continue_in_run_folder, format_table, run_cli
from genrec.conf import CONF_MODULE
from genrec.errors import ConfigError, UserError
from genrec.models.recommender import SequentialRecommender
from genrec.runs import RunFolder
from genrec.stream.baselines import ONLINE_BASELINES
from genrec.stream.exports import check_exportable
from genrec.stream.learner import Learner
from genrec.stream.loop import StreamLoop
from genrec.training.tables import check_table_config
from genrec.utils.provenance import provenance, write_json

log = logging.getLogger("genrec.stream")

PROG = "genrec-stream"
#: what a resumed run may change (the rest of its config belongs to its checkpoints)
RESUME_KEYS = ("resume_from", "threads", "stream.stop_when_idle", "stream.max_events", "stream.log_every_events",
               "source.url", "source.block_ms", "source.poll_seconds", "source.commit_path")


def resume_folder(resume_from: str) -> Path:
    folder = Path(resume_from)
    if not (folder / "config.yaml").is_file():
        raise UserError(f"resume_from={resume_from}: expected a run folder written by {PROG} (no config.yaml)")
    return folder


def resumed_config(saved: DictConfig, overrides: list[str]) -> DictConfig:
    """The saved ``config.yaml`` with the command line's ``overrides``, which may only change :data:`RESUME_KEYS`."""
    cfg = saved.copy()
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key not in RESUME_KEYS:
            raise ConfigError(key, f"a resumed stream run keeps its config.yaml; only {', '.join(RESUME_KEYS)} may "
                                   "change")
        OmegaConf.update(cfg, key, override.value(), force_add=True)
    return cfg


def _positive(cfg: DictConfig, key: str, allow_zero: bool = False) -> None:
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        expected = "a non-negative integer" if allow_zero else "a positive integer"
        raise ConfigError(key, f"got {value!r}, expected {expected}")


def check_config(cfg: DictConfig) -> None:
    """Everything checkable before the model is built or the source opened."""
    for key in ("stream.batch_size", "stream.step_targets", "stream.max_len", "checkpoint.keep"):
        _positive(cfg, key)
    for key in ("checkpoint.every_events", "export.every_events", "export.every_seconds", "export.keep",
                "stream.log_every_events", "prequential.window_events", "prequential.window_seconds"):
        _positive(cfg, key, allow_zero=True)
    if cfg.stream.max_events is not None:
        _positive(cfg, "stream.max_events")
    unknown = [b for b in cfg.prequential.baselines if b not in ONLINE_BASELINES]
    if unknown:
        raise ConfigError("prequential.baselines", f"unknown baseline(s) {unknown}; known: {sorted(ONLINE_BASELINES)}")
    if cfg.state.backend not in ("rocksdb", "lmdb"):
        raise ConfigError("state.backend", f"must be rocksdb or lmdb, got {cfg.state.backend!r}")
    check_table_config(cfg)
    if (cfg.model.get("prior") or {}).get("enabled") or cfg.model.get("item_init", "random") != "random":
        raise ConfigError("model.prior", "the transition prior and model.item_init read a training split's counts, "
                                         "which a stream does not have: leave them off (model.prior.enabled=false, "
                                         "model.item_init=random)")
    if cfg.model.get("kind", "retrieval") != "retrieval":
        raise ConfigError("model", f"model={cfg.model.name} is generative; the stream trainer trains retrieval models "
                                   "(sasrec, hstu)")
    if cfg.model.loss.get("_target_") != "genrec.models.losses.SampledSoftmaxLoss":
        raise ConfigError("model.loss", "the full softmax scores every item ID, which a stream does not know: use "
                                        "a sampled softmax (loss@model.loss=sampled)")


def build_learner(cfg: DictConfig) -> Learner:
    """The model of ``cfg.model`` on a dynamic item table, its sampled loss and AdamW (seeded by ``cfg.seed``)."""
    torch.manual_seed(cfg.seed)
    m = cfg.model
    model = SequentialRecommender(instantiate(m.embedding, num_items=0), instantiate(m.encoder), m.similarity)
    o = cfg.optim
    return Learner(model, instantiate(m.loss), lr=o.lr, weight_decay=o.weight_decay, betas=tuple(o.betas),
                   grad_clip=o.get("grad_clip", 0.0))


def run(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Train from the stream until it stops; writes the run folder and returns ``metrics.json``."""
    origin = provenance()
    check_config(cfg)
    if not cfg.resume_from:
        RunFolder(run_dir).require_new()
    elif Path(cfg.resume_from).resolve() != run_dir.resolve():
        raise UserError(f"resume_from={cfg.resume_from}: a stream run continues in its own folder, not in {run_dir}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    learner = build_learner(cfg)
    check_exportable(learner, cfg.export.every_events, cfg.export.every_seconds)
    source = instantiate(cfg.source, _convert_="all")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    trainer = StreamLoop(cfg, run_dir, source, learner, cfg.model.name)
    try:
        summary = trainer.run()
    finally:
        trainer.close()
    metrics = {"model": cfg.model.name, "seed": cfg.seed, "source": source.description, **summary, **origin,
               "config": OmegaConf.to_container(cfg, resolve=True)}
    write_json(run_dir / "metrics.json", metrics)
    counts = summary["counts"]
    print(f"\n{counts['records']} records: {counts['accepted']} trained on ({counts['targets']} as targets), "
          f"{counts['records'] - counts['accepted']} rejected (dead_letters.jsonl); "
          f"{summary['records_per_s'] or 0:.0f} records/s in this process")
    preq = summary["prequential"]
    if preq and preq["evaluated"]:
        names = list(preq["all"][cfg.model.name])
        print(f"prequential ({preq['evaluated']} events ranked before training on them):\n"
              f"{format_table(preq['all'], names)}")
    print(f"run folder: {run_dir}")
    return metrics


def _run_from_hydra(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if cfg.resume_from:
        folder = resume_folder(cfg.resume_from)
        overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith("resume_from=")]
        cfg = resumed_config(RunFolder(folder).config(), overrides + [f"resume_from={cfg.resume_from}"])
    run(cfg, run_dir)


@hydra.main(version_base="1.3", config_path=f"pkg://{CONF_MODULE}", config_name="stream")
def _hydra_main(cfg: DictConfig) -> None:
    run_cli(PROG, _run_from_hydra, cfg)


def main() -> None:
    """The CLI. ``resume_from=<run>`` without ``hydra.run.dir`` continues in the run's own folder."""
    check_command_line(PROG, "stream")
    continue_in_run_folder(PROG, resume_folder)
    _hydra_main()


if __name__ == "__main__":
    main()
