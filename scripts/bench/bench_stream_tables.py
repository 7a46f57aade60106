"""The docs table of scripts/bench/bench_stream.py: genrec-stream's throughput, lag and memory."""
from __future__ import annotations


def tables(files: list[dict]) -> list[str]:
    """genrec-stream's throughput against offline training, the lag (results/bench_stream.json), and memory
    (results/bench_stream_memory.json), from scripts/bench/bench_stream.py."""
    out = []
    for r in files:
        if r.get("kind") != "bench_stream" or r.get("quick") or r.get("archived"):
            continue
        out += ["## Streaming throughput, lag and memory", "",
                f"`results/{r['name']}.json` (`scripts/bench/bench_stream.py`, commit `{r['commit'][:12]}`): "
                f"{r['machine_note']}. {r['events']:,} events of the synthetic default, a checkpoint every "
                f"{r['checkpoint_every']:,} records, {r['threads']} torch thread; medians of {r['repeats']} "
                "alternated repeats. Offline: one epoch of the same model and training step over the same events in "
                "the same process, users grouped into steps of as many targets on average as the stream's steps "
                "hold at most. Online without the prequential ranking is the training figure; with it (files), every "
                "event is also ranked against every item seen before it, a measurement. Goal: "
                f"{r['goal']}. Records per second (per CPU second of the process, all its threads, in brackets):", "",
                "| model | micro-batch / step | online, files | online, Redis | online, files + prequential | "
                "offline | online / offline: files, Redis (CPU: files, Redis) | input positions encoded per target: "
                "online / offline | lag at a paced rate (mean / max s) |", "|---|---|---|---|---|---|---|---|---|"]
        for model, x in r["models"].items():
            m, lag, c = x["median"], x["lag"], x["config"]
            ratio, cpu = x["online_over_offline"], x["online_over_offline_cpu"]
            runs = " | ".join(f"{m[k]['records_per_s']:,.0f} ({m[k]['records_per_cpu_s']:,.0f})"
                              for k in ("files", "redis", "files_prequential", "offline"))
            out.append(f"| {model} | {c['batch_size']:,} records / {c['step_targets']} targets | {runs} | "
                       f"**{ratio['files']:.2f}, {ratio['redis']:.2f}** ({cpu['files']:.2f}, {cpu['redis']:.2f}) | "
                       f"{m['files']['positions_per_target']:.2f} / {m['offline']['positions_per_target']:.2f} | "
                       f"{lag['lag_seconds_mean']:.2f} / {lag['lag_seconds_max']:.2f} at {lag['rate_per_s']:,.0f} "
                       "events/s (Redis) |")
        out.append("")
    for r in files:
        if r.get("kind") == "bench_stream_memory" and not r.get("quick"):
            out += [_stream_memory(r["memory"], r), ""]
    return out


def archived_tries(files: list[dict]) -> list[str]:
    """One line per archived bench_stream file (results/archive/): a try at online throughput that was measured and
    reverted, its ratios to offline with a reader thread (``stream.read_ahead``, the try) and without."""
    out = []
    for r in files:
        if r.get("kind") != "bench_stream" or not r.get("archived"):
            continue
        cells = []
        for model, x in r["models"].items():
            ratio = x["online_over_offline"]
            cells.append(f"{model}: files {ratio['files']:.2f} against {ratio['files_one_thread']:.2f}, Redis "
                         f"{ratio['redis']:.2f} against {ratio['redis_one_thread']:.2f}")
        out.append(f"- `{r['name']}.json` (`scripts/bench/bench_stream.py` at commit `{r['commit'][:12]}`, issue 44): "
                   "genrec-stream reading the next micro-batch on a thread while one trains, against reading on the "
                   f"training thread, in the same run; online/offline records per second, {'; '.join(cells)}. "
                   "No consistent gain (the differences go both ways, within the repeats' spread): reverted.")
    return out


def _stream_memory(mem: dict, r: dict) -> str:
    """One paragraph about the memory run of scripts/bench/bench_stream.py."""
    m, caches = mem["model"], mem["stores_cache_mib"]
    series = mem["rss_every"]
    step = max(1, len(series["records"]) // 10)
    shown = list(range(0, len(series["records"]), step)) + ([len(series["records"]) - 1]
                                                            if (len(series["records"]) - 1) % step else [])
    points = ", ".join(f"{series['records'][i] / 1e6:.1f}M: {series['rss_mib'][i]:,.0f} "
                       f"({series['stores_mib'][i]:,.0f})" for i in shown)
    tier2 = mem.get("item_table_store", "rocksdb")  # runs before the option had RocksDB
    held = ("its ID index" if tier2 == "slab" else "its RocksDB block cache, memtables and index/filter blocks "
            "charged to it")
    return (f"**Memory** (`results/{r['name']}.json`, `scripts/bench/bench_stream.py --memory-only`, commit "
            f"`{r['commit'][:12]}`; {r['machine_note']}): {mem['events']:,} events, {mem['one_off_items']:.0%} of them "
            f"one-off items, {mem['users']:,} users, tier 0 of {mem['tier0_capacity']:,} rows with LRU eviction to "
            f"an SSD tier (**{tier2}**), prequential off, in a separate `genrec-stream` process. The stream machinery "
            f"is under test, so the model is small: SASRec of dim {m['dim']}, {m['layers']} layer, max_len "
            f"{m['max_len']}, dropout {m['dropout']}, micro-batches of {m['batch_size']:,}, a checkpoint every "
            f"{m['checkpoint_every']:,} records. The stores' memory: the user histories and seen event IDs, RocksDB "
            f"block caches with their memtables and index/filter blocks charged to them, {caches['user_histories']} "
            f"+ {caches['seen_events']} MiB; the table's tier 2, {held}, {caches['item_table_tier2']} MiB. "
            f"{mem['seconds']:,.0f} s, {mem['records_per_s']:,.0f} events/s. Rule, fixed before the run: "
            f"{mem['rss_bound_rule']}. Measured: RSS less the stores {mem['rss_mib_after_warmup']:,.0f} MiB at the "
            f"end of the warm-up, at most {mem['rss_mib_max_after_warmup']:,.0f} MiB after it (bound "
            f"{mem['rss_bound_mib']:,.0f}; slope {mem['rss_growth_mib_per_million_after_warmup']} MiB per million "
            f"events); the stores at most {mem['stores_mib_max']:,.0f} MiB (bound {mem['stores_bound_mib']:,.0f}); "
            f"whole RSS at most {mem['rss_mib_max']:,.0f} MiB at the logged rows (slope after the warm-up "
            f"{mem['rss_total_growth_mib_per_million_after_warmup']} MiB per million), peak {mem['peak_rss_mib']:,.0f} "
            f"MiB between them (the process's maximum resident set): "
            f"**{'met' if mem['passed'] else 'NOT met'}**. RSS in MiB (the stores' share) by events: {points}. "
            f"{mem['table']['evicted']:,} row evictions to tier 2 ({mem['table']['admitted']:,} rows admitted); on "
            f"disk at the end: "
            f"user and event state {mem['state_disk_mib']:,.0f} MiB, tier 2 {mem['table_tier2_disk_mib']:,.0f} MiB, "
            f"the run folder {mem['run_folder_disk_mib']:,.0f} MiB (live stores and the checkpoints kept, "
            + ("each checkpoint with its own copy of the slab file)." if tier2 == "slab" else
               "table files hard-linked between them counted at every link)."))
