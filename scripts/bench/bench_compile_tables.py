"""The docs table of scripts/bench/bench_compile.py: compile=true vs eager training steps on CPU."""
from __future__ import annotations


def tables(files: list[dict]) -> list[str]:
    """compile=true vs eager training steps on CPU (scripts/bench/bench_compile.py)."""
    out = []
    for r in files:
        if r.get("benchmark") != "compile=true vs eager training steps on CPU":
            continue
        c = r["config"]
        out += [f"## Benchmark: compile=true vs eager training steps on CPU (`results/{r['name']}.json`)", "",
                "Each preset's model built once, copied, and the copy's sequence stacks compiled (`torch.compile`, "
                "dynamic shapes: what `compile=true` and `recipe=gpu` do); whole training steps (loss, backward, "
                f"AdamW) of both on the same {c['timed_steps']} real training batches, alternating for "
                f"{c['rounds']} rounds, {c['threads']} thread(s), torch {c['torch']}. The "
                "generative presets run on a random SID table of Beauty's items (3 x 256 codes). "
                f"{r['note'][0].upper() + r['note'][1:]}. Commit `{r['commit'][:12]}`.", "",
                "| model (experiment) | batch | eager s/step | compiled s/step | speed-up (eager s / compiled s) | "
                "first compiled call s |", "|---|---|---|---|---|---|"]
        for row in r["rows"]:
            t = row["s_per_step"]
            out.append(f"| {row['model']} (`{row['experiment']}`) | {row['batch_size']} | {t['eager']:.4f} | "
                       f"{t['compiled']:.4f} | {row['speedup']:.2f}x | {row['first_compiled_call_s']:.0f} |")
        out += [""] + [f"Skipped {m}: {why}." for m, why in r.get("skipped", {}).items()]
        out.append("")
    return out
