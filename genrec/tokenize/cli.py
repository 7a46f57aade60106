"""Tokenize a dataset's items into semantic IDs: ``genrec-tokenize`` / ``python -m genrec.tokenize`` (Hydra CLI).

One run = one folder (``runs/tokenize/<data>-<tokenizer>/<time>/``) with the resolved ``config.yaml``, the SID
table (``sid_table.parquet`` + ``sid_table.safetensors``), ``metrics.json`` (health report, settings, timings,
commit) and ``health.png`` (plus ``training.png`` for RQ-VAE). With ``results_name=<name>`` the metrics also go to
``results/<name>.json`` for docs/results.md.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from genrec.cli import check_command_line, run_cli
from genrec.conf import CONF_MODULE
from genrec.data.datamodule import load_dataset
from genrec.errors import ConfigError
from genrec.runs import RunFolder, results_file
from genrec.trust import call_target
from genrec.tokenize.collisions import resolve_collisions
from genrec.tokenize.health import health_report, plot_health, plot_training
from genrec.tokenize.quantizer import Quantizer
from genrec.tokenize.sid_table import PAD_CODE, SIDTable
from genrec.utils.provenance import provenance, write_json
from genrec.utils.results import write_result

log = logging.getLogger("genrec.tokenize")


def build(node: DictConfig | dict) -> Any:
    """Call ``node["_target_"]`` with the node's other keys except ``name`` (errors pass through unwrapped,
    unlike ``hydra.utils.instantiate``)."""
    return call_target(node, drop=("name",))


def format_levels(health: dict[str, Any]) -> str:
    lines = [f"{'level':>5}  {'kind':<9} {'used/codes':>11} {'usage':>6} {'entropy':>8} {'max items/code':>15}"]
    for level in health["levels"]:
        lines.append(f"{level['level']:>5}  {level['kind']:<9} {level['used']:>5}/{level['codes']:<5} "
                     f"{level['usage']:>6.1%} {level['normalized_entropy']:>8.3f} {level['max_items_per_code']:>15}")
    return "\n".join(lines)


def level_order(order, num_levels: int) -> list[int]:
    """``level_order`` (``None``: as fitted) checked to be a permutation of the quantizer's ``num_levels``
    levels. Applied after the collisions are resolved (a collision level stays last)."""
    if order is None:
        return list(range(num_levels))
    order = list(order)
    if sorted(order) != list(range(num_levels)):
        raise ConfigError("level_order", f"got {order}, expected a permutation of 0..{num_levels - 1}")
    return order


def run(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Encode, fit, resolve collisions, save the SID table and the health report. Returns metrics.json."""
    results = results_file(cfg)
    RunFolder(run_dir).require_new()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    started = time.time()
    data = load_dataset(cfg.data.reader, cfg.data.preprocess, cfg.data.cache_dir)
    embeddings = build(cfg.encoder).encode(data)
    x = embeddings.vectors
    encode_seconds = time.time() - started
    log.info("%s: %d items -> %s embeddings", data.name, data.num_items, x.shape)

    quantizer: Quantizer = build(cfg.tokenizer)
    order = level_order(cfg.get("level_order"), quantizer.num_levels)
    started = time.time()
    quantizer.fit(x, seed=cfg.seed)
    raw_codes = quantizer.encode(x)
    codes, sizes = resolve_collisions(raw_codes, cfg.collisions, quantizer.last_level_distances(x),
                                      quantizer.codebook_sizes)
    if order != sorted(order):  # a permutation keeps every tuple unique; a collision level stays last
        columns = order + list(range(len(order), codes.shape[1]))
        raw_codes, codes = np.ascontiguousarray(raw_codes[:, order]), np.ascontiguousarray(codes[:, columns])
        sizes = [sizes[i] for i in columns]
    fit_seconds = time.time() - started

    table_config = {"data": cfg.data.name, "encoder": OmegaConf.to_container(cfg.encoder, resolve=True),
                    "tokenizer": OmegaConf.to_container(cfg.tokenizer, resolve=True),
                    "collisions": cfg.collisions, "seed": cfg.seed, "level_order": order}
    table = SIDTable(codes=np.vstack([np.full((1, codes.shape[1]), PAD_CODE), codes]), codebook_sizes=sizes,
                     item_raw_ids=data.item_raw_ids, dataset=data.name, config=table_config,
                     semantic_levels=raw_codes.shape[1])
    table.save(run_dir)
    health = health_report(raw_codes, codes, sizes, x, quantizer.reconstruct(x))
    plot_health(codes, sizes, run_dir / "health.png")
    history = getattr(quantizer, "history", None)
    if history:
        plot_training(history, run_dir / "training.png")

    metrics = {
        "kind": "tokenize",
        "dataset": data.summary(),
        "tokenizer": cfg.tokenizer.name,
        "encoder": {"name": cfg.encoder.name, "dim": int(x.shape[1]), **embeddings.info},
        "quantizer": quantizer.describe(),
        "collisions": cfg.collisions,
        "seed": cfg.seed,
        "health": health,
        "sid_table": {"folder": str(run_dir), "codebook_sizes": list(sizes), "content_hash": table.content_hash},
        "seconds": {"encode": round(encode_seconds, 1), "fit_and_resolve": round(fit_seconds, 1)},
        **provenance(),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    write_json(run_dir / "metrics.json", metrics)
    if results:
        write_result(results, "tokenize", {"name": cfg.results_name, **metrics})

    before, after = health["collisions_before"], health["collisions_after"]
    print(f"\nSID table of {data.name} ({data.num_items} items, {cfg.encoder.name} embeddings {x.shape[1]}-d, "
          f"{cfg.tokenizer.name}, codebook sizes {sizes}):\n{format_levels(health)}\n"
          f"collisions: {before['colliding_items']} items ({before['collision_rate']:.2%}) before resolution "
          f"({cfg.collisions}), {after['colliding_items']} after; reconstruction error "
          f"{health['reconstruction']['relative']:.4f} of the embeddings' variance\nrun folder: {run_dir}")
    return metrics


@hydra.main(version_base="1.3", config_path=f"pkg://{CONF_MODULE}", config_name="tokenize")
def _hydra_main(cfg: DictConfig) -> None:
    run_cli("genrec-tokenize", run, cfg, Path(HydraConfig.get().runtime.output_dir))


def main() -> None:
    check_command_line("genrec-tokenize", "tokenize")
    _hydra_main()


if __name__ == "__main__":
    main()
