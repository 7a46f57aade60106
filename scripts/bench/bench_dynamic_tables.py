"""The docs tables of scripts/bench/bench_dynamic.py: exactness, remap speed, hit rates, tiers, overheads."""
from __future__ import annotations

from scripts.docs.tables.common import prose


def _rate(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:,.1f}K"


def _mib(num_bytes: float) -> str:
    return f"{num_bytes / 2**20:,.0f} MiB"


def _goal(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _dynamic_stores(r: dict) -> list[str]:
    st = r["stores"]
    if "new_rows_per_s" in next(iter(st["results"].values())):
        load = st["load_average_1min"]
        out = [f"**Tier-2 stores** ({st['rows']:,} rows of {st['record_bytes']} bytes written as new rows, then "
               f"{st['rows']:,} overwrites of random rows, in batches of {st['batch_rows']:,}; each store in turn, its "
               "background work (RocksDB's flushes and compactions) waited for and counted; CPU: the process's, "
               "every thread; reads: random multi-gets of 8192; `cache_mib` "
               f"{st['cache_mib']}; load average {load['start']:.1f} to {load['end']:.1f}):", "",
               "| store | new rows/s | CPU per new row | overwrites/s | CPU per overwrite | random reads (rows/s) "
               "| disk | checkpoint (s, size) | memory held |", "|---|---|---|---|---|---|---|---|---|"]
        for name, x in st["results"].items():
            out.append(f"| {name} | {x['new_rows_per_s']:,.0f} | {x['new_cpu_us_per_row']:.1f} µs "
                       f"| {x['overwrite_rows_per_s']:,.0f} | {x['overwrite_cpu_us_per_row']:.1f} µs "
                       f"| {x['get_rows_per_s']:,.0f} | {_mib(x['disk_bytes'])} | {x['checkpoint_s']:.2f} s, "
                       f"{_mib(x['checkpoint_disk_bytes'])} | {_mib(x['memory_bytes'])} |")
        return out + [""]
    out = [f"**Tier-2 store** ({st['rows']:,} rows of {st['record_bytes']} bytes, random multi-gets of 8192):", "",
           "| store | writes (rows/s) | random reads (rows/s) | disk |", "|---|---|---|---|"]
    for name, x in st["results"].items():
        out.append(f"| {name} | {x['put_rows_per_s']:,.0f} | {x['get_rows_per_s']:,.0f} | {_mib(x['disk_bytes'])} |")
    ltm = {x["backend"]: x for x in r.get("larger_than_memory", [])}
    if "lmdb" in ltm:
        out += ["", f"LMDB reads faster, but maps its file: every page it reads counts in the process's RSS "
                f"(below: {_mib(ltm['lmdb']['peak_minus_fixed_bytes'])} over the fixed overhead for a "
                f"{_mib(ltm['lmdb']['budget_bytes'])} budget, against "
                f"{_mib(ltm['rocksdb']['peak_minus_fixed_bytes'])} with RocksDB, whose reads go through a block "
                "cache of a set size)."]
    return out + [""]


def _dynamic_exactness(r: dict) -> list[str]:
    out = ["**Exactness** (tier 0 = 10% of the working set with tier 2, vs the whole table in memory; same "
           "stream):", "", "| optimizer | working set | tier 0 | rows back from tier 2 | max weight diff "
           "| max state diff | goal ≤ 1e-6 |", "|---|---|---|---|---|---|---|"]
    for x in r["exactness"]:
        worst = max(x["max_weight_diff"], x["max_state_diff"])
        out.append(f"| {x['optimizer']} | {x['working_set']:,} | {x['tier0_rows']:,} ({x['tier0_fraction']:.0%}) "
                   f"| {x['hits_tier2']:,} | {x['max_weight_diff']:.1g} | {x['max_state_diff']:.1g} "
                   f"| {_goal(worst <= 1e-6 and x['same_rows'])} |")
    return out + [""]


def _dynamic_remap(r: dict) -> list[str]:
    out = ["**Remap speed** (raw ID -> slot with admission and eviction, table filled before timing, Zipf(1.05) "
           "batches; TorchRec's MCH: LRU, eviction every batch):", "",
           "| slots | genrec (IDs/s) | MCH (IDs/s) | genrec / MCH | goal ≥ 2M IDs/s |", "|---|---|---|---|---|"]
    for x in r["remap"]:
        if "skipped" in x:
            out.append(f"| {x['capacity']:,} | skipped: {x['skipped']} | | | |")
            continue
        ratio = f"{x['genrec_ids_per_s'] / x['mch_ids_per_s']:.1f}x" if x["mch_ids_per_s"] else "–"
        out.append(f"| {x['capacity']:,} | {_rate(x['genrec_ids_per_s'])} | {_rate(x['mch_ids_per_s'])} | {ratio} "
                   f"| {_goal(x['genrec_ids_per_s'] >= 2e6)} |")
    return out + [""]


def _dynamic_zipf(r: dict) -> list[str]:
    z = r["zipf"]
    out = [f"**Training throughput and hit rate** (Zipf(1.05), {z['ids']:,} IDs, {z['distinct']:,} distinct, "
           f"D = {z['dim']}, row-wise Adagrad; IDs/s of lookup + fused update over the last batches; the static "
           f"table: FBGEMM's fused TBE (a TorchRec FUSED table's kernel) on IDs remapped offline, "
           f"{_rate(z['static_tbe_ids_per_s'])} IDs/s; MCH: its remap + the same TBE on its slots):", "",
           "| tier 0 | rows | genrec LRU | genrec LFU | MCH | LRU hit rate (exact) | LFU hit rate (exact) "
           "| goal: within 1 point |", "|---|---|---|---|---|---|---|---|"]
    for x in z["rows"]:
        gaps = [abs(x["genrec_lru_hit_rate"] - x["exact_lru_hit_rate"]),
                abs(x["genrec_lfu_hit_rate"] - x["exact_lfu_hit_rate"])]
        out.append(f"| {x['fraction']:.0%} | {x['capacity']:,} | {_rate(x['genrec_lru_ids_per_s'])} "
                   f"| {_rate(x['genrec_lfu_ids_per_s'])} | {_rate(x.get('mch_ids_per_s'))} "
                   f"| {x['genrec_lru_hit_rate']:.4f} ({x['exact_lru_hit_rate']:.4f}) "
                   f"| {x['genrec_lfu_hit_rate']:.4f} ({x['exact_lfu_hit_rate']:.4f}) | {_goal(max(gaps) <= 0.01)} |")
    return out + [""]


def _dynamic_prefetch_stores(stores: dict) -> list[str]:
    """The prefetch section run once per tier-2 store (``--stores``): one row per store."""
    first = next(iter(stores.values()))
    out = [f"**Prefetching, per tier-2 store** (a training step: lookup of 8192 IDs, an MLP {first['dim']}->"
           f"{first['hidden']}->1 over each row, fused update; {first['distinct']:,} distinct IDs, tier 0 = "
           f"{first['tier0_rows']:,} rows with tier 2; each store's variants timed side by side with an all-in-memory "
           "baseline of its own, the stores one after the other; goal: prefetched ≤ 1.2x all in memory). CPU per "
           "prefetched step by thread (RocksDB's pool: its total per step of a variant with a store); the floor: the "
           f"training thread's CPU or (training + background) / {first['cores']} cores, whichever is larger — the "
           "least a prefetched step can take however well the work overlaps — over the all-in-memory step's CPU:", "",
           "| store | all in memory | 10% tier 0 | prefetched | prefetched, numpy mapping | CPU: training / mapping "
           "/ write-back / RocksDB pool | floor | Python beside a tier-2 write | load (1 min) | goal |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in stores.items():
        ratios, steps = p["ratio_vs_all_in_memory"], p["median_step_s"]
        by_thread = p["cpu_s_per_step_by_thread"]["tier0_10pct_prefetch"]
        cpu = [by_thread.get("training", 0.0), by_thread.get("mapping", 0.0), by_thread.get("write_back", 0.0),
               p["rocksdb_cpu_s_per_store_step"]]
        floor = max(cpu[0], sum(cpu) / p["cores"]) / p["cpu_s_per_step_by_thread"]["all_in_memory"]["training"]
        load = p["load_average_1min"]
        out.append(f"| {name} | {steps['all_in_memory'] * 1e3:.1f} ms | {ratios['tier0_10pct']:.2f}x "
                   f"| **{ratios['tier0_10pct_prefetch']:.2f}x** | {ratios['tier0_10pct_prefetch_numpy']:.2f}x "
                   f"| {' / '.join(f'{c * 1e3:.1f}' for c in cpu)} ms | {floor:.2f}x "
                   f"| {p['store_write_gil']['python_speed_while_writing']:.2f} | {load['start']:.1f} to "
                   f"{load['end']:.1f} | {_goal(ratios['tier0_10pct_prefetch'] <= 1.2)} |")
    return out + ["", prose("dynamic", "python_beside_write"), ""]


def _dynamic_prefetch(r: dict) -> list[str]:
    p = r["prefetch"]
    if "stores" in p:
        return _dynamic_prefetch_stores(p["stores"])
    ratios, steps = p["ratio_vs_all_in_memory"], p["median_step_s"]
    met = ratios["tier0_10pct_prefetch"] <= 1.2
    out = [f"**Prefetching** (a training step: lookup of 8192 IDs, an MLP {p['dim']}->{p['hidden']}->1 over each "
           f"row, fused update; {p['distinct']:,} distinct IDs, tier 0 = {p['tier0_rows']:,} rows with tier 2; "
           f"goal: prefetched ≤ 1.2x all in memory, {'met in this run' if met else 'NOT met'}):", "",
           "| variant | median step | vs all in memory |", "|---|---|---|"]
    for name, seconds in steps.items():
        out.append(f"| {name} | {seconds * 1e3:.1f} ms | {ratios[name]:.2f}x |")
    if met:
        out += ["", prose("dynamic", "prefetch_timing")]
    else:
        how = ("its loops in compiled kernels that release the interpreter lock (`_numpy`: the same mapping in numpy)"
               if p.get("compiled_kernels") else "in numpy, which holds the interpreter lock")
        out += ["", f"The prefetcher maps the next batch in a Python thread, {how}, while the training step runs "
                "(docs/DYNAMIC_EMBEDDINGS.md)."]
    if "median_mapping_wait_s" in p:
        wait, cpu = p["median_mapping_wait_s"], p["median_training_thread_cpu_s"]
        gil = p["store_write_gil"]
        out += ["", "Where the prefetched step's time goes (medians per step): it waits "
                f"{wait['tier0_10pct_prefetch'] * 1e3:.1f} ms for its mapping (without prefetching "
                f"{wait['tier0_10pct'] * 1e3:.1f} ms) and its own thread's CPU time is "
                f"{cpu['tier0_10pct_prefetch'] * 1e3:.1f} ms against {cpu['all_in_memory'] * 1e3:.1f} ms all in "
                f"memory; the rest of its {steps['tier0_10pct_prefetch'] * 1e3:.1f} ms is time the training thread is "
                "held off: "
                "by the interpreter lock or the cores, which the mapping, the write-back and RocksDB's own threads "
                f"share with it. A tier-2 write of {gil['rows_per_write']:,} rows ({gil['ms_per_write']:.1f} ms) "
                f"slows Python in another thread to {gil['python_speed_while_writing']:.2f} of its speed alone: "
                "rocksdict's WriteBatch and write hold the interpreter lock."]
    if "cpu_s_per_step_by_thread" in p:
        by_thread = {**p["cpu_s_per_step_by_thread"]["tier0_10pct_prefetch"],
                     "rocksdb": p["rocksdb_cpu_s_per_store_step"]}
        background = sum(seconds for role, seconds in by_thread.items() if role != "training")
        floor = (by_thread["training"] + background) / p["cores"]
        parts = ", ".join(f"{role} {seconds * 1e3:.1f} ms" for role, seconds in by_thread.items() if seconds)
        load = p["load_average_1min"]
        out += ["", f"CPU per prefetched step, by thread (RocksDB's shared flush/compaction pool: its total over the "
                f"timed blocks per step of a variant with a store): {parts}. The background threads need "
                f"{background * 1e3:.1f} ms of CPU per step beside the training thread's, so on {p['cores']} cores a "
                f"step cannot take less than {floor * 1e3:.1f} ms ({floor / steps['all_in_memory']:.2f}x all in "
                "memory) however well the work overlaps: "
                + ("the goal needs that work to shrink, or more cores." if floor > 1.2 * steps["all_in_memory"]
                   else "that floor is under the goal, so the rest of the gap is the interpreter lock and the "
                   "scheduler, not the amount of work.") + " Load average (1 min) "
                f"{load['start']:.1f} at the start of the timed blocks, {load['end']:.1f} at the end."]
    return out + [""]


def _dynamic_sasrec(r: dict) -> list[str]:
    q = r["sasrec"]
    return [f"**SASRec step** ({q['num_items']:,} items, {q['batch_users']} users x {q['length']} positions, "
            f"{q['loss']}, everything in tier 0): static table {q['median_step_s']['static'] * 1e3:.1f} ms, "
            f"dynamic {q['median_step_s']['dynamic'] * 1e3:.1f} ms: overhead {q['overhead']:+.1%} "
            f"(goal ≤ 10%: {_goal(q['overhead'] <= 0.10)}).", ""]


def _dynamic_larger(r: dict) -> list[str]:
    out = ["**Larger than memory** (a child process per store; the budget covers tier 0, its bookkeeping and the "
           "store's memory: RocksDB's cache and memtables, the slab's ID index, sized for the rows; fixed overhead = "
           "the process's RSS before the table: Python, torch, the libraries):", "",
           "| store | budget | store memory | tier 0 rows | rows stored | table (weights + state) | fixed overhead "
           "| peak RSS - fixed | disk | IDs/s | hit rate tier 0 / tier 2 | within budget |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in r["larger_than_memory"]:
        memory = _mib(x["store_memory_bytes"]) if "store_memory_bytes" in x else "–"
        out.append(f"| {x['backend']} | {_mib(x['budget_bytes'])} | {memory} | {x['capacity']:,} | {x['rows']:,} "
                   f"| {_mib(x['table_bytes'])} ({x['table_over_budget']:.1f}x budget) "
                   f"| {_mib(x['fixed_overhead_bytes'])} | {_mib(x['peak_minus_fixed_bytes'])} "
                   f"| {_mib(x['disk_bytes'])} | {_rate(x['ids_per_s'])} "
                   f"| {x['hit_rate_tier0']:.3f} / {x['hit_rate_tier2']:.3f} "
                   f"| {'yes' if x['within_budget'] else 'NO'} |")
    return out + [""]


def tables(files: list[dict]) -> list[str]:
    """Dynamic embedding tables (scripts/bench/bench_dynamic.py): exactness, remap speed, hit rates, tiers, overheads; a
    file of some sections (``--sections``) renders those."""
    renderers = {"stores": _dynamic_stores, "exactness": _dynamic_exactness, "remap": _dynamic_remap,
                 "zipf": _dynamic_zipf, "prefetch": _dynamic_prefetch, "sasrec": _dynamic_sasrec,
                 "larger_than_memory": _dynamic_larger}
    out = []
    for r in files:
        if r.get("kind") != "bench_dynamic" or r.get("quick"):
            continue
        sections = r.get("sections", list(renderers))
        title = "" if len(sections) == len(renderers) else f" ({', '.join(sections)})"
        out += [f"## Dynamic embedding tables{title}", "",
                f"`results/{r['name']}.json` (`scripts/bench/bench_dynamic.py`, commit `{r['commit'][:12]}`): "
                f"{r['machine_note']}; batches of {r['batch']} IDs; every comparison measured side by side in this "
                "run (timed variants alternate in blocks, medians).", ""]
        for section in sections:
            out += renderers[section](r)
    return out
