"""genrec-stream's throughput and lag -> results/bench_stream.json; its memory (``--memory-only``) ->
results/bench_stream_memory.json.

* **Throughput**: the first ``--events`` events of the synthetic default, trained once by the stream trainer from
  event files and from a Redis stream (a real redis-server on a free local port; the events published before the
  run), next to the same model and training step trained offline on the same events in the same process (one epoch
  over the users' sequences, :mod:`genrec.stream.offline`, users grouped so that a step holds
  ``stream.step_targets`` targets on average; the stream's steps hold at most that many). Both with the stream's
  default config (``--override`` changes both). The stream runs are whole runs (checkpoints every
  ``--checkpoint-every`` records, the stores, the logs), prequential evaluation off (the training figure), and once
  more on (files: with the ranking of every event, a measurement that costs about as much as the training). The
  four are alternated ``--repeats`` times (the offline run seeded by the repeat); the medians are reported, records
  per second of wall time and per second of the process's CPU time (all its threads; what a loaded machine
  disturbs least), and the online/offline ratios of both. Each run also counts the input positions its steps
  encoded per target: a stream step encodes each user's kept history again as the context of the user's new
  events, an offline step each sequence once.
* **Lag**: a producer thread adds the events to a Redis stream at ``--pace`` x the measured Redis throughput
  while the trainer consumes them; the seconds from an event's arrival in Redis to the end of its training step and
  the backlog, from the run's ``logs/stream.csv``.
* **Memory**: ``--memory-events`` generated events with a long tail (half of the items one-off, never seen again),
  from ``--memory-users`` users, in a separate ``genrec-stream`` process over event files (written in parts of
  500K events), a tier 0 of ``--memory-capacity`` rows with LRU eviction to an SSD tier, prequential evaluation off
  (its baselines keep per-item counts). What is under test is the stream machinery's memory (the user-history and
  seen-event stores, the table's tiers, offsets, checkpoints), so the model is small (``--memory-dim``,
  ``--memory-layers``, ``--memory-max-len``, micro-batches of ``--memory-batch-size`` trained in one step each, a
  checkpoint every ``--memory-checkpoint-every`` records; all recorded). RSS every ``--memory-log-every`` records.
  The rule, fixed before a run: (1) after the warm-up (the first ``--memory-warmup`` of the records) the RSS less
  the stores' own memory stays <= ``--rss-bound`` x its value at the end of the warm-up, and (2) at every logged
  row the stores' own memory (RocksDB block caches, into which their memtables and index and filter blocks are
  charged; the slab tier 2's ID index) stays <= ``--stores-bound`` x their configured memory (``cache_mib``); the
  benchmark fails (exit 1) otherwise. The table's tier 2 is ``--memory-table-store`` (the default store; another
  one writes ``results/bench_stream_memory_<store>.json``).

Usage::

    python -m scripts.bench.bench_stream                          # throughput and lag: results/bench_stream.json
    python -m scripts.bench.bench_stream --memory-only            # 10M events: results/bench_stream_memory.json
    python -m scripts.bench.bench_stream --events 5000 --repeats 1 --quick                          # checks
    python -m scripts.bench.bench_stream --memory-only --memory-events 200000 --memory-log-every 20000 --quick
"""
from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from omegaconf import OmegaConf  # noqa: E402

from genrec.conf import compose_config  # noqa: E402
from genrec.data.synthetic import generate_synthetic  # noqa: E402
from genrec.embedding.dynamic.config import StoreConfig  # noqa: E402
from genrec.storage.stores import STORE_BACKENDS, directory_bytes  # noqa: E402
from genrec.stream import cli  # noqa: E402
from genrec.stream.files import write_event_files  # noqa: E402
from genrec.stream.offline import train_offline, user_sequences  # noqa: E402
from genrec.stream.redis_streams import publish, wait_for_redis  # noqa: E402
from genrec.stream.replay import event_frame  # noqa: E402
from genrec.utils.provenance import provenance, write_json  # noqa: E402

#: the online runs, each against the offline one
ONLINE_RUNS = ("files", "redis", "files_prequential")
GOAL = "online records/s >= 0.8x offline on the same events, from files and from Redis (issue 44.6)"
MACHINE_NOTE = ("2 CPU cores shared with other engineers' jobs (load varies): absolute figures are noisy, the "
                "alternated medians and ratios less so")
#: the models as benchmarked (the presets' sizes; HSTU's published MovieLens configuration)
MODELS = {"sasrec": ["model=sasrec"], "hstu": ["model=hstu"]}


def redis_parser() -> str:
    """Which parser redis-py reads replies with: hiredis (C) when installed, else its own (Python)."""
    from redis.utils import HIREDIS_AVAILABLE

    return "hiredis" if HIREDIS_AVAILABLE else "python"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def stream_config(overrides: list[str]):
    return compose_config("stream", overrides=overrides)


class Redis:
    """A real redis-server on a free local port without persistence, in ``folder``."""

    def __init__(self, folder: Path):
        import redis

        path = shutil.which("redis-server")
        if path is None:
            raise SystemExit("bench_stream: error: redis-server is not installed (apt-get install redis-server)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([path, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(folder)], stdout=subprocess.DEVNULL)
        self.client = redis.Redis(port=self.port, decode_responses=True)
        wait_for_redis(self.client, 20)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


def rates(records: int, targets: int, steps: int, positions: int, seconds: float, cpu_seconds: float) -> dict:
    """A run's counts and its throughput: per second of wall time and per second of the process's CPU time (all its
    threads; the figure a loaded machine disturbs least)."""
    return {"records": records, "targets": targets, "steps": steps, "seconds": round(seconds, 2),
            "cpu_seconds": round(cpu_seconds, 2), "records_per_s": records / seconds,
            "targets_per_s": targets / seconds, "records_per_cpu_s": records / cpu_seconds,
            "targets_per_step": targets / steps, "positions_per_target": positions / targets}


def online(base: list[str], work: Path, name: str, source: list[str], prequential: bool = False) -> dict:
    """One whole stream run (its stores, checkpoints and logs; the seconds from the first record to the final
    checkpoint)."""
    run_dir = work / name
    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = stream_config(base + source + [f"prequential.enabled={str(prequential).lower()}",
                                         f"model.embedding.store.path={work / (name + '-store')}"])
    metrics = cli.run(cfg, run_dir)
    counts = metrics["counts"]
    out = {**rates(counts["records"], counts["targets"], counts["steps"], counts["positions"], metrics["seconds"],
                   metrics["cpu_seconds"]),
           "peak_rss_mib": round(metrics["peak_rss_mib"], 1), "csv": run_dir / "logs" / "stream.csv"}
    shutil.rmtree(work / (name + "-store"), ignore_errors=True)
    return out


def offline(base: list[str], work: Path, frame: pd.DataFrame, seed: int) -> dict:
    """One epoch of the same model over the same events' user sequences (:mod:`genrec.stream.offline`), users
    grouped so that a step holds ``stream.step_targets`` targets on average, as the stream's steps do at most."""
    cfg = stream_config(base + [f"model.embedding.store.path={work / 'offline-store'}"])
    torch.set_num_threads(int(cfg.threads))
    sequences = user_sequences(frame)
    targets = len(frame) - len(sequences)
    batch_users = max(1, round(int(cfg.stream.step_targets) * len(sequences) / targets))
    learner = cli.build_learner(cfg)
    fit = train_offline(learner, sequences, 1, batch_users, int(cfg.stream.max_len), seed)
    learner.embedding.close()
    shutil.rmtree(work / "offline-store", ignore_errors=True)
    return {**rates(len(frame), fit["targets"], fit["steps"], fit["positions"], fit["seconds"], fit["cpu_seconds"]),
            "batch_users": batch_users}


def paced_lag(base: list[str], work: Path, redis: Redis, frame: pd.DataFrame, rate: float, name: str) -> dict:
    """Events added to a Redis stream at ``rate`` per second while the trainer consumes them: the lag."""
    if not rate > 0:
        raise RuntimeError(f"the paced run needs a positive rate, got {rate}")
    key = f"paced-{name}"
    stop = threading.Event()

    def produce() -> None:
        started, sent = time.monotonic(), 0
        while sent < len(frame) and not stop.is_set():
            due = min(len(frame), int((time.monotonic() - started) * rate))
            if due > sent:
                publish(redis.client, key, frame.iloc[sent:due])
                sent = due
            time.sleep(0.02)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        run = online(base + ["stream.stop_when_idle=false", f"stream.max_events={len(frame)}",
                             "stream.log_every_events=1000"], work, name,
                     ["source=redis", f"source.url={redis.url}", f"source.stream={key}", "source.block_ms=100"])
    finally:
        stop.set()
        producer.join()
    rows = pd.read_csv(run["csv"])
    weights = rows["records"].diff().fillna(rows["records"])
    return {"rate_per_s": round(rate, 1), "records_per_s": run["records_per_s"],
            "lag_seconds_mean": float((rows["lag_seconds_mean"] * weights).sum() / weights.sum()),
            "lag_seconds_max": float(rows["lag_seconds_max"].max()), "backlog_events_max": int(rows["lag_events"].max()),
            "backlog_events_mean": float(rows["lag_events"].mean())}


def long_tail_events(start: int, count: int, users: int, head_items: int, one_off: float) -> pd.DataFrame:
    """Events ``start .. start + count - 1`` of a long-tail stream: users uniform over ``users``; an item is one-off
    (a new ID, never seen again) with probability ``one_off``, else one of ``head_items`` items with Zipf(0.8)
    weights; 10 events per second of event time. Seeded by ``start``."""
    rng = np.random.default_rng([7, start])
    weights = (np.arange(head_items) + 40.0) ** -0.8
    rows = start + np.arange(count)
    head = rng.choice(head_items, size=count, p=weights / weights.sum())
    items = np.where(rng.random(count) < one_off, 10**9 + rows, head)
    return pd.DataFrame({"event_id": np.char.add("m", rows.astype(str)), "user_id": rng.integers(0, users, count),
                         "item_id": items, "timestamp": 10**9 + rows // 10})


def memory_rule(args) -> str:
    """The bound, as stated before the run."""
    return (f"(1) after the first {args.memory_warmup:.0%} of the records (the warm-up), RSS less the stores' own "
            f"memory <= {args.rss_bound} x its value at the end of the warm-up; (2) at every logged row, the stores' "
            f"own memory <= {args.stores_bound} x their configured caches ({stores_cache_mib(args)} MiB)")


def stores_cache_mib(args) -> int:
    """The three stores' configured memory: user histories and seen events (``state.cache_mib`` each), the item
    table's tier 2 (``model.embedding.store.cache_mib``)."""
    return 2 * args.memory_state_cache_mib + args.memory_table_cache_mib


def memory(args, work: Path) -> dict:
    """A separate genrec-stream process over a long-tail stream; RSS from its logs."""
    folder = work / "long-tail"
    for start in range(0, args.memory_events, 500_000):
        part = long_tail_events(start, min(500_000, args.memory_events - start), args.memory_users, 20_000, 0.5)
        write_event_files(part, folder, 50_000, "parquet")
    run_dir, store = work / "memory-run", work / "memory-store"
    model = {"model": "sasrec", "dim": args.memory_dim, "layers": args.memory_layers, "heads": 1, "dropout": 0.0,
             "max_len": args.memory_max_len, "batch_size": args.memory_batch_size,
             "checkpoint_every": args.memory_checkpoint_every}
    overrides = ["model=sasrec", f"model.dim={args.memory_dim}", f"model.encoder.num_layers={args.memory_layers}",
                 "model.encoder.num_heads=1", "model.encoder.dropout=0.0", f"data.max_len={args.memory_max_len}",
                 f"stream.batch_size={args.memory_batch_size}", f"stream.step_targets={args.memory_batch_size}",
                 f"source.path={folder}", "source.poll_seconds=0.05",
                 f"source.commit_path={work / 'memory-commit.json'}", "stream.stop_when_idle=true",
                 f"stream.log_every_events={args.memory_log_every}", "prequential.enabled=false",
                 f"checkpoint.every_events={args.memory_checkpoint_every}",
                 f"model.embedding.capacity={args.memory_capacity}", f"state.cache_mib={args.memory_state_cache_mib}",
                 f"model.embedding.store.cache_mib={args.memory_table_cache_mib}",
                 f"model.embedding.store.backend={args.memory_table_store}",
                 f"model.embedding.store.path={store}", f"hydra.run.dir={run_dir}"]
    log(f"memory: {args.memory_events} events (half one-off items) in a genrec-stream process; rule: "
        f"{memory_rule(args)}")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "genrec.stream", *overrides], check=True, cwd=ROOT)
    seconds = time.perf_counter() - started
    rows = pd.read_csv(run_dir / "logs" / "stream.csv")
    rows["rss_without_stores_mib"] = rows["rss_mib"] - rows["stores_mib"]
    warm = rows[rows["records"] <= args.memory_warmup * args.memory_events]
    after = rows[rows["records"] > args.memory_warmup * args.memory_events]
    warm_rss = float(warm["rss_without_stores_mib"].iloc[-1])
    bound = args.rss_bound * warm_rss
    stores_bound = args.stores_bound * stores_cache_mib(args)
    peak_after = float(after["rss_without_stores_mib"].max())
    stores_peak = float(rows["stores_mib"].max())

    def slope(column: str) -> float | None:
        return round(float(np.polyfit(after["records"] / 1e6, after[column], 1)[0]), 2) if len(after) > 1 else None

    result = {"events": args.memory_events, "users": args.memory_users, "one_off_items": 0.5,
              "tier0_capacity": args.memory_capacity, "model": model, "item_table_store": args.memory_table_store,
              "stores_cache_mib": {"user_histories": args.memory_state_cache_mib,
                                   "seen_events": args.memory_state_cache_mib,
                                   "item_table_tier2": args.memory_table_cache_mib},
              "seconds": round(seconds, 1), "records_per_s": args.memory_events / seconds,
              "rss_bound_rule": memory_rule(args),
              "rss_mib_after_warmup": round(warm_rss, 1), "rss_mib_max_after_warmup": round(peak_after, 1),
              "rss_bound_mib": round(bound, 1),
              "rss_growth_mib_per_million_after_warmup": slope("rss_without_stores_mib"),
              "stores_mib_max": round(stores_peak, 1), "stores_bound_mib": round(stores_bound, 1),
              "stores_growth_mib_per_million_after_warmup": slope("stores_mib"),
              "rss_mib_max": float(rows["rss_mib"].max()), "peak_rss_mib": float(rows["peak_rss_mib"].max()),
              "rss_total_growth_mib_per_million_after_warmup": slope("rss_mib"),
              "rss_mib_end": float(rows["rss_mib"].iloc[-1]), "stores_mib_end": float(rows["stores_mib"].iloc[-1]),
              "passed_rss": peak_after <= bound, "passed_stores": stores_peak <= stores_bound,
              "passed": peak_after <= bound and stores_peak <= stores_bound,
              "table": {k: int(rows[k].iloc[-1]) for k in ("live_rows", "admitted", "evicted", "written_back")},
              "state_disk_mib": float(rows["state_disk_mib"].iloc[-1]),
              "table_tier2_disk_mib": round(directory_bytes(store) / 2**20, 1),
              "run_folder_disk_mib": round(directory_bytes(run_dir) / 2**20, 1),
              "rss_every": rows[["records", "rss_mib", "stores_mib", "records_per_s"]].round(1).to_dict("list")}
    shutil.rmtree(folder, ignore_errors=True)
    return result


def memory_summary(mem: dict) -> str:
    return (f"memory: {mem['events']} events in {mem['seconds']:.0f} s ({mem['records_per_s']:.0f}/s); RSS less the "
            f"stores {mem['rss_mib_after_warmup']} MiB after the warm-up, max {mem['rss_mib_max_after_warmup']} MiB "
            f"after it (bound {mem['rss_bound_mib']}; slope {mem['rss_growth_mib_per_million_after_warmup']} MiB per "
            f"million); the stores at most {mem['stores_mib_max']} MiB (bound {mem['stores_bound_mib']}): "
            f"{'passed' if mem['passed'] else 'FAILED'}")


def median_of(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs)
            for k in ("records_per_s", "targets_per_s", "records_per_cpu_s", "seconds", "cpu_seconds",
                      "targets_per_step", "positions_per_target")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=30000, help="events of the throughput runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--override", action="append", default=[],
                        help="a stream.yaml override for every throughput run (online and offline)")
    parser.add_argument("--checkpoint-every", type=int, default=10000)
    parser.add_argument("--pace", type=float, default=0.5, help="the lag run's rate, x the Redis throughput")
    parser.add_argument("--memory-events", type=int, default=10_000_000)
    parser.add_argument("--memory-users", type=int, default=100_000)
    parser.add_argument("--memory-capacity", type=int, default=50_000)
    parser.add_argument("--memory-log-every", type=int, default=100_000)
    parser.add_argument("--memory-dim", type=int, default=16)
    parser.add_argument("--memory-layers", type=int, default=1)
    parser.add_argument("--memory-max-len", type=int, default=10)
    parser.add_argument("--memory-batch-size", type=int, default=1024)
    parser.add_argument("--memory-checkpoint-every", type=int, default=500_000)
    parser.add_argument("--memory-state-cache-mib", type=int, default=32, help="state.cache_mib (two stores)")
    parser.add_argument("--memory-table-cache-mib", type=int, default=64, help="model.embedding.store.cache_mib")
    parser.add_argument("--memory-table-store", default=StoreConfig.backend, choices=STORE_BACKENDS,
                        help="model.embedding.store.backend (default: the default store)")
    parser.add_argument("--memory-warmup", type=float, default=0.2, help="the share of the records before the bound")
    parser.add_argument("--rss-bound", type=float, default=1.15)
    parser.add_argument("--stores-bound", type=float, default=1.25)
    parser.add_argument("--memory-only", action="store_true", help="only the memory run (results/bench_stream_memory)")
    parser.add_argument("--quick", action="store_true", help="a check of the script (results/bench_stream_quick)")
    args = parser.parse_args()
    origin = provenance()
    work = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    if args.memory_only:
        mem = memory(args, work)
        shutil.rmtree(work, ignore_errors=True)
        name = "bench_stream_memory" + ("" if args.memory_table_store == StoreConfig.backend
                                        else f"_{args.memory_table_store}") + ("_quick" if args.quick else "")
        path = write_json(ROOT / "results" / f"{name}.json",
                          {"kind": "bench_stream_memory", "quick": args.quick, "memory": mem, "threads": 1,
                           "machine_note": MACHINE_NOTE, **origin})
        print(memory_summary(mem) + f"\nwrote {path}")
        sys.exit(0 if mem["passed"] else 1)
    frame = event_frame(generate_synthetic())  # the synthetic default, in timestamp order
    frame = frame.iloc[:args.events].reset_index(drop=True)
    events_dir = work / "events"
    write_event_files(frame, events_dir, 10_000, "parquet")
    redis = Redis(work / "redis")
    results: dict[str, dict] = {}
    try:
        publish(redis.client, "events", frame)
        for model in args.models:
            base = MODELS[model] + ["data.max_len=50", "stream.stop_when_idle=true",
                                   f"checkpoint.every_events={args.checkpoint_every}", "stream.log_every_events=5000",
                                   *args.override]
            runs: dict[str, list[dict]] = {"files": [], "redis": [], "files_prequential": [], "offline": []}
            for r in range(args.repeats):
                files = [f"source.path={events_dir}", "source.poll_seconds=0.05",
                         f"source.commit_path={work / 'commit.json'}"]
                runs["files"].append(online(base, work, f"{model}-files", files))
                runs["redis"].append(online(base, work, f"{model}-redis", [
                    "source=redis", f"source.url={redis.url}", "source.stream=events", f"source.group={model}-{r}",
                    "source.block_ms=100"]))
                runs["offline"].append(offline(base, work, frame, seed=r))
                if r == 0:
                    runs["files_prequential"].append(online(base, work, f"{model}-preq", files, prequential=True))
                log(f"{model} repeat {r}: " + " | ".join(f"{k} {v[-1]['records_per_s']:.0f} records/s "
                                                         f"({v[-1]['records_per_cpu_s']:.0f} per CPU s)"
                                                         for k, v in runs.items() if v))
            medians = {k: median_of(v) for k, v in runs.items()}
            lag = paced_lag(base, work, redis, frame, args.pace * medians["redis"]["records_per_s"], model)
            log(f"{model} lag at {lag['rate_per_s']:.0f} events/s: mean {lag['lag_seconds_mean']:.2f} s, "
                f"max {lag['lag_seconds_max']:.2f} s")
            cfg = stream_config(base)
            results[model] = {
                "median": medians, "lag": lag,
                "online_over_offline": {k: medians[k]["records_per_s"] / medians["offline"]["records_per_s"]
                                        for k in ONLINE_RUNS},
                "online_over_offline_cpu": {k: medians[k]["records_per_cpu_s"] / medians["offline"]["records_per_cpu_s"]
                                            for k in ONLINE_RUNS},
                "config": {"batch_size": int(cfg.stream.batch_size), "step_targets": int(cfg.stream.step_targets),
                           "max_len": int(cfg.stream.max_len),
                           "model": OmegaConf.to_container(cfg.model, resolve=True),
                           "optim": OmegaConf.to_container(cfg.optim, resolve=True)},
                "runs": {k: [{n: x for n, x in run.items() if n != "csv"} for run in v] for k, v in runs.items()}}
    finally:
        redis.stop()
    shutil.rmtree(work, ignore_errors=True)
    result = {"kind": "bench_stream", "dataset": "synthetic default (first events in timestamp order)",
              "events": len(frame), "repeats": args.repeats, "checkpoint_every": args.checkpoint_every,
              "overrides": args.override, "threads": 1, "seeds": list(range(args.repeats)), "quick": args.quick,
              "models": results, "goal": GOAL, "redis_reply_parser": redis_parser(), "machine_note": MACHINE_NOTE,
              **origin}
    name = "bench_stream_quick" if args.quick else "bench_stream"
    path = write_json(ROOT / "results" / f"{name}.json", result)
    print("\nrecords/s (per CPU s); online / offline: wall, CPU")
    for model, r in results.items():
        m = r["median"]
        print(f"{model}: " + " | ".join(f"{k} {m[k]['records_per_s']:.0f} ({m[k]['records_per_cpu_s']:.0f})"
                                        for k in m) + " | "
              + " ".join(f"{k} {r['online_over_offline'][k]:.2f}, {r['online_over_offline_cpu'][k]:.2f}"
                         for k in ONLINE_RUNS))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
