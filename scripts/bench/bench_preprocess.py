"""Event log -> sequences + leave-one-out splits at 1M-100M events: wall time and peak memory of genrec's streamed
path (``engine=polars``) beside today's pandas path and two single-engine designs, measured in the same run.

Engines (every one ends in the same arrays; their digests must agree, or the script fails):

* ``pandas``  -- ``read_events(engine="pandas")`` + ``build_sequences``: the log loaded as a DataFrame.
* ``polars``  -- ``read_events(engine="polars")`` + ``build_sequences``: two Polars streaming passes (ID tables,
  then int32 codes), k-core, remap and time order in NumPy on the codes (genrec/data/outofcore.py).
* ``polars_lazy`` -- reference, this script: the whole pipeline in Polars (streamed read, k-core rounds by window
  counts, dense ranks, one sort).
* ``duckdb`` -- reference, this script: the whole pipeline in DuckDB SQL (a table, k-core rounds by semi-joins,
  ID tables by row_number, joined and ordered), with a memory limit and a spill folder.

A case is one process: read + preprocess + the splits (TrainSequences, EvalSequences valid/test), timed inside it
after the imports (wall and CPU seconds, all threads); its peak memory is the process's peak resident set
(``wait4``; the interpreter with torch and the engines imported holds about 0.4 GiB of it). Cases
alternate engine by engine within each repeat; the table shows medians. A watchdog kills a case whose resident
memory passes ``--rss-limit-gib`` (the machine is shared). Today's pandas path is not run past ``--pandas-max``
events; its need there is extrapolated from its largest measured size and printed as such.

    python -m scripts.bench.bench_preprocess --data-dir /tmp/genrec_bench          # 1M, 10M, 30M, 100M (~30 min)
    python -m scripts.bench.bench_preprocess --sizes 1e6 --repeats 1 --out /tmp/b.json

The logs (genrec/data/event_log.py, seed 0, int64 IDs; 100M events = 1.4 GB) are written to ``--data-dir`` and
deleted at the end unless ``--keep-logs``. Writes ``results/bench_preprocess.json``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from scripts.docs.tables.common import prose

ROOT = Path(__file__).resolve().parents[2]

ENGINES = ("pandas", "polars", "polars_lazy", "duckdb")
GOAL = {"events": 100_000_000, "wall_s": 180.0, "peak_gib": 6.0}
MAX_LEN = 50
MIN_USER, MIN_ITEM = 5, 5  # the data presets' k-core (data/_base.yaml)


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=float, nargs="+", default=[1e6, 1e7, 3e7, 1e8])
    p.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    p.add_argument("--repeats", type=int, default=3, help="runs per case up to --repeat-max events")
    p.add_argument("--repeat-max", type=float, default=3e7, help="larger sizes run --large-repeats times")
    p.add_argument("--large-repeats", type=int, default=2)
    p.add_argument("--pandas-max", type=float, default=3e7, help="largest size the pandas path is run at")
    p.add_argument("--reference-max", type=float, default=1e7, help="largest size of polars_lazy and duckdb")
    p.add_argument("--rss-limit-gib", type=float, default=9.0, help="kill a case past this resident memory")
    p.add_argument("--data-dir", type=Path, default=Path("/tmp/genrec_bench"))
    p.add_argument("--keep-logs", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench_preprocess.json")
    p.add_argument("--case", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)  # worker mode
    return p.parse_args()


# --- the reference pipelines (integer IDs and timestamps, as the generated logs have) ------------------------------

def _polars_lazy(path: str):
    """(item_ids (N,) 1-based, offsets (U+1,), timestamps (N,), user raw IDs (U,), item raw IDs (I,))."""
    import numpy as np
    import polars as pl

    frame = (pl.scan_parquet(path).select(u="user_id", i="item_id", t="timestamp").with_row_index("row")
             .collect(engine="streaming"))
    while True:
        kept = frame.filter((pl.len().over("u") >= MIN_USER) & (pl.len().over("i") >= MIN_ITEM))
        if kept.height == frame.height:
            break
        frame = kept
    frame = frame.with_columns(uc=pl.col("u").rank("dense") - 1, ic=pl.col("i").rank("dense")).sort(["uc", "t", "row"])
    counts = np.bincount(frame["uc"].to_numpy())
    return (frame["ic"].to_numpy().astype(np.int64), np.concatenate([[0], np.cumsum(counts)]),
            frame["t"].to_numpy(), frame["u"].unique().sort().to_numpy(), frame["i"].unique().sort().to_numpy())


def _duckdb(path: str, spill: Path):
    import duckdb
    import numpy as np

    spill.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET memory_limit = '4GB'")
    con.execute(f"SET temp_directory = '{spill}'")
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"CREATE TEMP TABLE ev AS SELECT file_row_number AS row, user_id AS u, item_id AS i, timestamp AS t "
                f"FROM read_parquet('{path}', file_row_number = true)")
    count = con.execute("SELECT count(*) FROM ev").fetchone()[0]
    while True:
        con.execute(f"CREATE OR REPLACE TEMP TABLE ev AS SELECT * FROM ev "
                    f"WHERE u IN (SELECT u FROM ev GROUP BY u HAVING count(*) >= {MIN_USER}) "
                    f"AND i IN (SELECT i FROM ev GROUP BY i HAVING count(*) >= {MIN_ITEM})")
        left = con.execute("SELECT count(*) FROM ev").fetchone()[0]
        if left == count:
            break
        count = left
    con.execute("CREATE TEMP TABLE users AS SELECT u, row_number() OVER (ORDER BY u) - 1 AS uc "
                "FROM (SELECT DISTINCT u FROM ev)")
    con.execute("CREATE TEMP TABLE items AS SELECT i, row_number() OVER (ORDER BY i) AS ic "
                "FROM (SELECT DISTINCT i FROM ev)")
    out = con.execute("SELECT users.uc, items.ic, ev.t FROM ev JOIN users USING (u) JOIN items USING (i) "
                      "ORDER BY users.uc, ev.t, ev.row").fetchnumpy()
    user_raw = con.execute("SELECT u FROM users ORDER BY uc").fetchnumpy()["u"]
    item_raw = con.execute("SELECT i FROM items ORDER BY ic").fetchnumpy()["i"]
    counts = np.bincount(out["uc"])
    return (out["ic"].astype(np.int64), np.concatenate([[0], np.cumsum(counts)]), out["t"], user_raw, item_raw)


def _run_case(engine: str, path: str) -> dict:
    """Worker: one engine on one log; returns its timing, digest and summary."""
    import numpy as np

    from genrec.data.batch import EvalSequences, TrainSequences
    from genrec.data.generic import read_events
    from genrec.data.preprocess import PreprocessConfig, build_sequences
    from genrec.data.schema import SequenceData

    started, cpu = time.perf_counter(), time.process_time()
    if engine in ("pandas", "polars"):
        data = build_sequences(read_events(path, timestamp="timestamp", engine=engine),
                               PreprocessConfig(MIN_USER, MIN_ITEM))
    else:
        if engine == "polars_lazy":
            items, offsets, times, users, raw_items = _polars_lazy(path)
        else:
            items, offsets, times, users, raw_items = _duckdb(path, Path(path).parent / "duckdb_spill")
        item_raw_ids = np.empty(len(raw_items) + 1, object)
        item_raw_ids[1:] = raw_items
        data = SequenceData("events", items, offsets.astype(np.int64), times, item_raw_ids, users)
    splits = [TrainSequences(data, MAX_LEN), EvalSequences(data, MAX_LEN, "valid"),
              EvalSequences(data, MAX_LEN, "test")]
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    digest = hashlib.sha256()
    for array in (data.item_ids, data.offsets, data.timestamps, data.user_raw_ids,
                  np.asarray(data.item_raw_ids[1:].tolist(), np.int64)):
        digest.update(np.ascontiguousarray(array, np.int64).tobytes())
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 1), "digest": digest.hexdigest()[:16],
            "summary": data.summary(),
            "train_examples": len(splits[0]), "eval_users": len(splits[2])}


# --- the driver ----------------------------------------------------------------------------------------------------

def _rss_gib(pid: int) -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 2 ** 20 for line in text.splitlines() if line.startswith("VmRSS:")), 0.0)


def _measure(engine: str, path: Path, limit_gib: float) -> dict:
    """One case in its own process: its report plus peak RSS and CPU time (``wait4``), or why it was stopped."""
    proc = subprocess.Popen([sys.executable, "-m", __spec__.name, "--case", engine, str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = []

    def watch() -> None:
        while proc.poll() is None:
            if _rss_gib(proc.pid) > limit_gib:
                killed.append(_rss_gib(proc.pid))
                proc.kill()
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    load = os.getloadavg()[0]
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    watcher.join()
    run = {"peak_rss_gib": round(usage.ru_maxrss / 2 ** 20, 2), "load_avg_1min": round(load, 1)}
    if killed:
        return {**run, "stopped": f"killed at {killed[0]:.1f} GiB resident (limit {limit_gib} GiB)"}
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} on {path} failed:\n{err[-3000:]}")
    return {**run, **json.loads(out.strip().splitlines()[-1])}


def _log_for(size: int, args: argparse.Namespace) -> Path:
    from genrec.data.event_log import write_event_log

    path = args.data_dir / f"events_{size}_seed{args.seed}.parquet"
    if not path.exists():
        started = time.time()
        write_event_log(path.with_suffix(".tmp"), size, seed=args.seed).replace(path)
        print(f"wrote {path} ({path.stat().st_size / 2 ** 30:.2f} GiB) in {time.time() - started:.0f} s", flush=True)
    return path


def _engines_at(size: int, args: argparse.Namespace) -> list[str]:
    limits = {"pandas": args.pandas_max, "polars_lazy": args.reference_max, "duckdb": args.reference_max}
    return [e for e in args.engines if size <= limits.get(e, float("inf"))]


def _case_row(size: int, engine: str, runs: list[dict]) -> dict:
    done = [r for r in runs if "stopped" not in r]
    row = {"events": size, "engine": engine, "runs": runs}
    if not done:
        return {**row, "stopped": runs[0]["stopped"]}
    return {**row, "wall_s": statistics.median(r["wall_s"] for r in done),
            "peak_rss_gib": statistics.median(r["peak_rss_gib"] for r in done),
            "cpu_s": statistics.median(r["cpu_s"] for r in done), "digest": done[0]["digest"],
            "summary": done[0]["summary"], "train_examples": done[0]["train_examples"]}


def _pandas_extrapolation(rows: list[dict], size: int) -> dict | None:
    measured = [r for r in rows if r["engine"] == "pandas" and "peak_rss_gib" in r]
    if not measured:
        return None
    largest = max(measured, key=lambda r: r["events"])
    need = largest["peak_rss_gib"] * size / largest["events"]
    return {"events": size, "engine": "pandas",
            "not_run": f"would need about {need:.0f} GiB (its {largest['peak_rss_gib']:.1f} GiB at "
                       f"{largest['events'] / 1e6:g}M events, scaled linearly): "
                       "not run on the shared 24 GiB machine"}


def _table(rows: list[dict]) -> str:
    lines = [f"{'events':>8} {'engine':<12} {'wall s':>8} {'peak GiB':>9} {'CPU s':>7} {'vs pandas':>10}  digest"]
    for row in rows:
        label = f"{row['events'] / 1e6:g}M"
        if "wall_s" not in row:
            lines.append(f"{label:>8} {row['engine']:<12} {row.get('stopped') or row.get('not_run')}")
            continue
        base = next((r for r in rows if r["events"] == row["events"] and r["engine"] == "pandas" and "wall_s" in r),
                    None)
        ratio = f"{base['wall_s'] / row['wall_s']:.2f}x" if base else "-"
        lines.append(f"{label:>8} {row['engine']:<12} {row['wall_s']:8.1f} {row['peak_rss_gib']:9.2f} "
                     f"{row['cpu_s']:7.1f} {ratio:>10}  {row['digest']}")
    return "\n".join(lines)


def tables(files: list[dict]) -> list[str]:
    """The out-of-core preprocessing benchmark (scripts/bench/bench_preprocess.py): engines side by side per log
    size."""
    out = []
    for r in files:
        if r.get("name") != "bench_preprocess" or "cases" not in r:
            continue
        cfg, machine = r["config"], r["machine"]
        out += ["## Out-of-core preprocessing: event log -> sequences + splits", "",
                f"`results/{r['name']}.json` (`scripts/bench/bench_preprocess.py`, commit `{r['commit'][:12]}`): "
                f"synthetic Parquet logs (`{r['dataset']['generator']}`, seed {r['dataset']['seed']}, int64 IDs, "
                f"{r['dataset']['users']} users and items, long-tailed), {cfg['preprocess']['min_user_interactions']}"
                f"-core, then {cfg['splits']}. Each case is its own process; wall and CPU seconds of the pipeline "
                f"(after the imports), peak resident memory of the process; median of {cfg['repeats']} runs "
                f"({cfg['large_repeats']} past {cfg['repeat_max'] / 1e6:g}M events), engines alternating. The "
                f"{machine['cores']}-core machine was shared with other jobs (1-minute load average "
                f"{machine['load_avg_1min_start']} at the start, {machine['load_avg_1min_end']} at the end): wall "
                "time includes waiting for a core, CPU seconds are the work. Every engine's output has the same "
                "digest at each size.", "",
                "| events | engine | wall s | CPU s | peak GiB | pandas / engine wall | users | items | interactions |",
                "|---|---|---|---|---|---|---|---|---|"]
        for row in r["cases"]:
            size = f"{row['events'] / 1e6:g}M"
            if "wall_s" not in row:
                out.append(f"| {size} | {row['engine']} | {row.get('stopped') or row.get('not_run')} |" + " |" * 6)
                continue
            base = next((x for x in r["cases"] if x["events"] == row["events"] and x["engine"] == "pandas"
                         and "wall_s" in x), None)
            ratio = f"{base['wall_s'] / row['wall_s']:.2f}x" if base else "–"
            summary = row["summary"]
            out.append(f"| {size} | {row['engine']} | {row['wall_s']:.1f} | {row['cpu_s']:.1f} | "
                       f"{row['peak_rss_gib']:.2f} | {ratio} | {summary['users']:,} | {summary['items']:,} | "
                       f"{summary['interactions']:,} |")
        goal = r.get("goal")
        if goal:
            measured = next((x for x in r["cases"] if x["events"] == goal["events"] and x["engine"] == "polars"
                             and "cpu_s" in x), None)
            work = (f"; the pipeline's own work was {measured['cpu_s']:.0f} CPU seconds, the wall time beyond it "
                    f"includes waiting for a core on the shared machine and reading the file" if measured else "")
            out += ["", f"Goal: {goal['events'] / 1e6:g}M events in under {goal['wall_s']:.0f} s with under "
                        f"{goal['peak_gib']:g} GiB: **{'met' if goal['met'] else 'not met'}** "
                        f"({goal['measured_wall_s']:.0f} s wall, {goal['measured_peak_gib']:.2f} GiB{work})."]
        out += ["", prose("preprocess", "engines"),
                ""]
    return out


def main() -> None:
    args = _parse()
    if args.case:
        print(json.dumps(_run_case(*args.case)))
        return
    from genrec.utils.provenance import provenance, write_json

    origin = provenance()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    started, load_start = time.time(), os.getloadavg()
    rows: list[dict] = []
    try:
        for size in (int(s) for s in args.sizes):
            path = _log_for(size, args)
            engines = _engines_at(size, args)
            repeats = args.repeats if size <= args.repeat_max else args.large_repeats
            runs: dict[str, list[dict]] = {e: [] for e in engines}
            for _ in range(repeats):
                for engine in engines:
                    if runs[engine] and "stopped" in runs[engine][-1]:
                        continue
                    runs[engine].append(_measure(engine, path, args.rss_limit_gib))
                    print(f"{size / 1e6:g}M {engine}: {runs[engine][-1]}", flush=True)
            size_rows = [_case_row(size, e, runs[e]) for e in engines]
            digests = {r["digest"] for r in size_rows if "digest" in r}
            if len(digests) > 1:
                found = [(r["engine"], r.get("digest")) for r in size_rows]
                raise SystemExit(f"engines disagree at {size} events: {found}")
            if "pandas" in args.engines and "pandas" not in engines:
                size_rows.insert(0, _pandas_extrapolation(rows, size))
            rows += [r for r in size_rows if r is not None]
    finally:
        if not args.keep_logs:
            for path in args.data_dir.glob("events_*_seed*.parquet"):
                path.unlink()
        shutil.rmtree(args.data_dir / "duckdb_spill", ignore_errors=True)
    table = _table(rows)
    print("\n" + table)
    goal = next((r for r in rows if r["events"] == GOAL["events"] and r["engine"] == "polars" and "wall_s" in r), None)
    verdict = None
    if goal:
        verdict = {**GOAL, "measured_wall_s": goal["wall_s"], "measured_peak_gib": goal["peak_rss_gib"],
                   "met": goal["wall_s"] < GOAL["wall_s"] and goal["peak_rss_gib"] < GOAL["peak_gib"]}
        print(f"\ngoal (100M events < {GOAL['wall_s']:.0f} s, < {GOAL['peak_gib']} GiB): "
              f"{'met' if verdict['met'] else 'NOT met'} ({goal['wall_s']:.0f} s, {goal['peak_rss_gib']:.2f} GiB)")
    write_json(args.out, {
        "name": "bench_preprocess",
        "dataset": {"generator": "genrec/data/event_log.py (write_event_log)", "seed": args.seed, "id_type": "int",
                    "columns": ["user_id", "item_id", "timestamp"], "users": "events / 50", "items": "events / 50"},
        "config": {"preprocess": {"min_user_interactions": MIN_USER, "min_item_interactions": MIN_ITEM,
                                  "dedupe": False, "min_rating": None},
                   "splits": f"leave-one-out (TrainSequences + EvalSequences valid/test, max_len {MAX_LEN})",
                   "repeats": args.repeats, "large_repeats": args.large_repeats, "repeat_max": args.repeat_max,
                   "pandas_max": args.pandas_max, "reference_max": args.reference_max,
                   "rss_limit_gib": args.rss_limit_gib},
        "machine": {"cores": os.cpu_count(), "shared": True, "load_avg_1min_start": round(load_start[0], 1),
                    "load_avg_1min_end": round(os.getloadavg()[0], 1),
                    "note": "a 2-core machine shared with other engineers' jobs: wall times include waiting for a "
                            "core; CPU seconds are the work done"},
        "cases": rows, "goal": verdict, "table": table.splitlines(), "bench_seconds": round(time.time() - started),
        **origin,
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
