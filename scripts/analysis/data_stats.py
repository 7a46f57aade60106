"""Describe datasets the way training sees them; writes results/data_stats.json (rendered in docs/results.md by
data_stats_tables.py).

    python -m scripts.analysis.data_stats             # synthetic, ml100k, beauty, scientific (those present)
    python -m scripts.analysis.data_stats synthetic ml100k --out results/data_stats.json
    python -m scripts.analysis.data_stats synthetic data.reader.seed=1 --out /tmp/s.json   # overrides: every dataset

Every dataset is read by genrec's reader and preprocessed exactly as ``genrec-train data=<name>`` does (same config
group, same cache); the statistics are defined in genrec/data/stats.py. A dataset whose files are missing (the
real ones live in ../shared/data) is skipped with a note.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from omegaconf import OmegaConf

from genrec.conf import compose_config
from genrec.data.datamodule import load_dataset, read_log
from genrec.data.stats import dataset_stats
from genrec.errors import DataError
from genrec.utils.provenance import REPO_ROOT, provenance, write_json

DATASETS = ["synthetic", "ml100k", "beauty", "scientific"]


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help=f"data config names and key=value overrides (default: {DATASETS})")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "results" / "data_stats.json")
    p.add_argument("--clusters", type=int, default=20, help="item clusters for the taste statistics")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main() -> None:
    args = _parse()
    overrides = [n for n in args.names if "=" in n]
    names = [n for n in args.names if "=" not in n] or DATASETS
    datasets, skipped = {}, {}
    for name in names:
        data_cfg = compose_config("train", overrides=[f"data={name}", *overrides]).data
        start = time.perf_counter()
        try:
            data = load_dataset(data_cfg.reader, data_cfg.preprocess, data_cfg.cache_dir)
            log = read_log(data_cfg.reader)
        except DataError as e:
            skipped[name] = str(e)
            print(f"{name}: skipped ({e})")
            continue
        stats = dataset_stats(data, log, clusters=args.clusters, seed=args.seed)
        datasets[name] = {"config": OmegaConf.to_container(data_cfg, resolve=True), **stats,
                          "seconds": round(time.perf_counter() - start, 1)}
        print(f"{name}: {stats}")
    write_json(args.out, {"kind": "data_stats", "datasets": datasets, "skipped": skipped,
                          "clusters": args.clusters, "seed": args.seed, "overrides": overrides, **provenance()})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
