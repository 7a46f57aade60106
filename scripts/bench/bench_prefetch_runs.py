"""genrec-train and genrec-stream with a dynamic item table whose tier 0 holds a tenth of the items: steps/s (records/s
for the stream) without and with prefetching (``model.embedding.prefetch_depth=1``), beside the same table all in
memory, on the synthetic default and on MovieLens-100K; the two tiered runs must give identical metrics and table
counters (the bench fails otherwise). The stream replays each dataset's events in timestamp order, prequential
evaluation on (its metrics are the ones compared), baselines off; its tier 0 holds a larger share of the items than
a tenth (``STREAMS``): a stream step trains whole user histories, and tier 0 must hold the distinct items of three
steps (ML-100K's 1,682 items are dense: its users' histories cover much of the catalogue).

Each run trains a fixed number of epochs (no early stopping, no baselines), one thread; the runs of a dataset run one
after another in this process. A tier 0 of 10% must still hold the rows of the last three batches (the one training,
the one mapped ahead, the one before): the batches are sized so that it does, and the file records the fraction.

    python -m scripts.bench.bench_prefetch_runs            # -> results/bench_prefetch_runs.json
    python -m scripts.bench.bench_prefetch_runs --quick    # one epoch of a smaller synthetic set, to check the script
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from genrec import train as train_entry  # noqa: E402
from genrec.conf import compose_config  # noqa: E402
from genrec.stream import cli as stream_cli  # noqa: E402
from genrec.utils.provenance import provenance, write_json  # noqa: E402

#: what every run shares: dynamic table, sampled softmax, fixed epochs, one thread
COMMON = ["embedding@model.embedding=dynamic", "loss@model.loss=sampled", "model.loss.num_negatives=16",
          "model.embedding.pinned_batches=2", "callbacks=none", "baselines=[]", "threads=1",
          "trainer.enable_progress_bar=false", "+trainer.enable_model_summary=false", "telemetry.enabled=false"]
#: dataset -> (its overrides, epochs)
DATASETS = {
    "synthetic": (["data.batch_size=8", "data.max_len=20", "model.dim=32"], 2),
    "ml100k": (["data=ml100k", "data.batch_size=2", "data.max_len=16", "model.dim=32"], 2),
}
QUICK = {"synthetic": (["data.reader.num_users=1500", "data.reader.num_items=2000", "data.batch_size=2",
                        "data.max_len=16", "model.dim=16"], 1)}
COUNTERS = ("admitted", "evicted", "hits_tier0", "hits_tier2", "live_rows_tier0")
#: what every stream run shares: a replay, one thread, no baselines, the table's rows of two steps pinned
STREAM_COMMON = ["source=replay", "stream.stop_when_idle=true", "threads=1", "prequential.baselines=[]",
                 "model.loss.num_negatives=128", "stream.step_targets=64",
                 "model.embedding.pinned_batches=2"]
#: dataset -> (its overrides, the share of its items tier 0 holds)
STREAMS = {"synthetic": (["data=synthetic"], 0.3), "ml100k": (["data=ml100k"], 0.7)}
QUICK_STREAMS = {"synthetic": (["data=synthetic", "stream.max_events=5000"], 0.3)}


def _run(overrides: list[str], folder: Path, name: str) -> dict:
    cfg = compose_config("train", overrides + [f"data.cache_dir={folder / 'cache'}",
                                               f"model.embedding.store.path={folder / name}-store"])
    metrics = train_entry.run(cfg, folder / name)
    return {"steps": metrics["steps_run"], "train_seconds": metrics["train_seconds"],
            "steps_per_s": metrics["steps_run"] / metrics["train_seconds"], "metrics": metrics["metrics"],
            "item_table": {k: metrics["item_table"][k] for k in COUNTERS}, "dataset": metrics["dataset"]}


def bench(name: str, overrides: list[str], epochs: int, folder: Path) -> dict:
    base = COMMON + overrides + [f"trainer.max_epochs={epochs}"]
    items = compose_config("train", base).data
    whole = _run(base + ["model.embedding.capacity=10000000"], folder, f"{name}-memory")
    num_items = whole["dataset"]["items"]
    capacity = max(num_items // 10, 1)
    tiered = base + [f"model.embedding.capacity={capacity}"]
    mapped = _run(tiered, folder, f"{name}-tier0")
    prefetched = _run(tiered + ["model.embedding.prefetch_depth=1"], folder, f"{name}-tier0-prefetch")
    identical = mapped["metrics"] == prefetched["metrics"] and mapped["item_table"] == prefetched["item_table"]
    if not identical:
        raise SystemExit(f"{name}: prefetching changed the run: {mapped['metrics']} vs {prefetched['metrics']}")
    runs = {"all_in_memory": whole, "tier0_10pct": mapped, "tier0_10pct_prefetch": prefetched}
    return {"settings": {"overrides": base, "epochs": epochs, "batch_size": items.batch_size,
                         "max_len": items.max_len},
            "tier0_rows": capacity, "tier0_fraction": capacity / (num_items + 1), "num_items": num_items,
            "runs": runs, "identical_with_prefetch": identical,
            "step_time_vs_all_in_memory": {k: whole["steps_per_s"] / r["steps_per_s"] for k, r in runs.items()}}


def _stream(overrides: list[str], folder: Path, name: str) -> dict:
    cfg = compose_config("stream", overrides + [f"model.embedding.store.path={folder / name}-store"])
    metrics = stream_cli.run(cfg, folder / name)
    return {"records": metrics["counts"]["records"], "steps": metrics["counts"]["steps"],
            "seconds": metrics["seconds"], "records_per_s": metrics["records_per_s"],
            "metrics": metrics["prequential"], "item_table": {k: metrics["item_table"][k] for k in COUNTERS}}


def bench_stream(name: str, overrides: list[str], share: float, folder: Path) -> dict:
    """genrec-stream over ``name``'s events: all in memory, then a tier 0 of ``share`` of the items it admitted,
    without and with prefetching."""
    base = STREAM_COMMON + overrides
    # the items the stream admits, counted by a first run (a tier 0 of 10M rows: the stream's negatives are drawn
    # from its resident rows, whose listing then costs in proportion to the capacity, so it is not the baseline)
    num_items = _stream(base + ["model.embedding.capacity=10000000"], folder, f"stream-{name}-count")["item_table"][
        "admitted"]
    whole = _stream(base + [f"model.embedding.capacity={num_items}"], folder, f"stream-{name}-memory")
    capacity = max(int(num_items * share), 1)
    tiered = base + [f"model.embedding.capacity={capacity}"]
    mapped = _stream(tiered, folder, f"stream-{name}-tier0")
    prefetched = _stream(tiered + ["model.embedding.prefetch_depth=1"], folder, f"stream-{name}-tier0-prefetch")
    identical = mapped["metrics"] == prefetched["metrics"] and mapped["item_table"] == prefetched["item_table"]
    if not identical:
        raise SystemExit(f"stream {name}: prefetching changed the run: {mapped} vs {prefetched}")
    runs = {"all_in_memory": whole, "tier0_10pct": mapped, "tier0_10pct_prefetch": prefetched}
    return {"settings": {"overrides": base}, "tier0_rows": capacity, "tier0_fraction": capacity / num_items,
            "num_items": num_items, "runs": runs, "identical_with_prefetch": identical,
            "step_time_vs_all_in_memory": {k: whole["records_per_s"] / r["records_per_s"] for k, r in runs.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench_prefetch_runs.json")
    args = parser.parse_args()
    datasets, streams = (QUICK, QUICK_STREAMS) if args.quick else (DATASETS, STREAMS)
    out = {"kind": "bench_prefetch_runs", "quick": args.quick, "cores": os.cpu_count(),
           "load_average_1min": {"start": os.getloadavg()[0]}, "datasets": {}, "streams": {}}
    with tempfile.TemporaryDirectory(prefix="genrec-prefetch-") as tmp:
        for name, (overrides, epochs) in datasets.items():
            out["datasets"][name] = bench(name, overrides, epochs, Path(tmp))
        for name, (overrides, share) in streams.items():
            out["streams"][name] = bench_stream(name, overrides, share, Path(tmp))
    out["load_average_1min"]["end"] = os.getloadavg()[0]
    out.update(provenance())
    write_json(args.out, out)
    print(f"{'run':<17} {'tier 0':>8} {'all in memory':>14} {'small tier 0':>11} {'+ prefetch':>11}  identical"
          "   (step time vs all in memory)")
    for program, key, unit in (("train", "datasets", "steps_per_s"), ("stream", "streams", "records_per_s")):
        for name, r in out[key].items():
            ratio = r["step_time_vs_all_in_memory"]
            print(f"{program + ' ' + name:<17} {r['tier0_fraction']:>8.1%} {r['runs']['all_in_memory'][unit]:>10.1f}/s "
                  f"{ratio['tier0_10pct']:>10.2f}x {ratio['tier0_10pct_prefetch']:>10.2f}x  "
                  f"{r['identical_with_prefetch']}")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
