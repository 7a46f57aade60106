"""The docs table of scripts/bench/bench_pipeline.py: step time of pipelined sparse input."""
from __future__ import annotations


def tables(files: list[dict]) -> list[str]:
    """Step time of pipelined sparse input on 2 processes (scripts/bench/bench_pipeline.py)."""
    out = []
    for r in files:
        if r.get("kind") != "bench_pipeline":
            continue
        data, loads = r["data"], [x[k] for x in r["machine_load"] for k in ("load_before", "load_after")]
        out += [f"## Benchmark: pipelined sparse input (sharding.pipeline=sparse_dist), step time on "
                f"{r['processes']} processes (`results/{r['name']}.json`)", "",
                f"A {r['sharding']} item table of {data['items']:,} rows x {data['dim']}, {r['processes']} "
                f"{r['backend']} processes on {r['device']}, {data['sequences_per_process']} sequences of "
                f"{data['lengths'][0]}-{data['lengths'][1]} items per process and step; batches built inside the "
                f"timed loop in every mode; modes alternated, median over {r['rounds']} rounds of {r['steps']} steps "
                f"(after {r['warmup']} warm-up steps). plain: genrec's default step (negatives drawn in the step); "
                "unpipelined: the same step on SparseBatches (candidates and lookup KJT from the loader); "
                f"pipelined: TorchRec's TrainPipelineSparseDist. {r['machine_note']}; load average during the runs "
                f"{min(loads):.1f}-{max(loads):.1f}.", "",
                "| model | plain, s/step | unpipelined, s/step | pipelined, s/step | pipelined vs plain | "
                "pipelined vs unpipelined |", "|---|---|---|---|---|---|"]
        for row in r["rows"]:
            cells = []
            for mode in ("plain", "unpipelined", "pipelined"):
                rounds = [x[mode] for x in row["rounds_step_s"]]
                cells.append(f"{row['step_s'][mode]:.3f} ({min(rounds):.3f}-{max(rounds):.3f})")
            out.append(f"| {row['model']} | {' | '.join(cells)} | {row['pipelined_speedup_vs_plain']:.2f}x | "
                       f"{row['pipelined_speedup_vs_unpipelined']:.2f}x |")
        out += ["", "Median (range over rounds). Speed-ups above 1 mean the pipelined step is faster; where they lie "
                "inside the rounds' range the pipeline gave nothing measurable here. Equal losses and weights: "
                f"tests/distributed/test_pipeline.py. Commit `{r['commit'][:12]}`.", ""]
    return out
