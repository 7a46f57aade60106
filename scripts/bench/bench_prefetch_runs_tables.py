"""The docs table of scripts/bench/bench_prefetch_runs.py: genrec-train and genrec-stream with a small tier 0, with and
without prefetching.
"""
from __future__ import annotations


def tables(files: list[dict]) -> list[str]:
    """genrec-train and genrec-stream with a small tier 0, with and without prefetching, beside all in memory
    (scripts/bench/bench_prefetch_runs.py)."""
    out = []
    for r in files:
        if r.get("name") != "bench_prefetch_runs" or r.get("quick"):
            continue
        out += ["## Dynamic tables: prefetching in genrec-train and genrec-stream runs", "",
                f"`results/{r['name']}.json` (`python -m scripts.bench.bench_prefetch_runs`, commit "
                f"`{r['commit'][:12]}`): SASRec on a dynamic item table, sampled softmax, one thread; genrec-train "
                "for fixed epochs, genrec-stream over a replay of the dataset's events (prequential on, baselines "
                "off). The tiered runs hold a share of the items' rows in tier 0 and send the rest to the slab "
                "store. The prefetched run must give the metrics and table counters of the run without prefetching "
                "(the bench fails otherwise). The runs last tens of seconds on a shared machine: their times are "
                "noisy.", "",
                "| program | dataset | tier 0 rows | run | steps/s (stream: records/s) | time vs all in memory | "
                "NDCG@10 (train: test; stream: prequential) | identical |",
                "|---|---|---|---|---|---|---|---|"]
        for program, key, unit in (("genrec-train", "datasets", "steps_per_s"),
                                   ("genrec-stream", "streams", "records_per_s")):
            for name, d in (r.get(key) or {}).items():
                for run, x in d["runs"].items():
                    same = "" if run == "all_in_memory" else ("yes" if d["identical_with_prefetch"] else "**no**")
                    ndcg = (x["metrics"]["test"] if key == "datasets" else x["metrics"]["all"]["sasrec"])["ndcg@10"]
                    rows = "all" if run == "all_in_memory" else f"{d['tier0_rows']:,} of {d['num_items']:,}"
                    out.append(f"| {program} | {name} | {rows} | {run.replace('_10pct', '')} | {x[unit]:.1f} | "
                               f"{d['step_time_vs_all_in_memory'][run]:.2f} | {ndcg:.4f} | {same} |")
        out.append("")
    return out
