"""The docs table of scripts/bench/bench_kernels.py: HSTU attention, Triton vs the padded reference."""
from __future__ import annotations


def tables(files: list[dict]) -> list[str]:
    """genrec_kernels on a GPU (scripts/bench/bench_kernels.py): HSTU attention, Triton vs the padded reference."""
    out = []
    for r in files:
        if r.get("benchmark") != "kernels":
            continue
        out += [f"## Benchmark: HSTU attention kernel (Triton) vs the padded PyTorch reference "
                f"(`results/{r['name']}.json`)", "",
                f"{r['environment']['cuda']}, torch {r['environment']['torch']}, Triton {r['triton']}; {r['heads']} "
                f"heads, d_qk {r['d_qk']}, d_v {r['d_v']}, {r['dtype']}, position and time-bucket bias on; lengths "
                f"{r['dataset']} (max_len {r['max_len']}). Forward + backward, median of {r['steps']} calls: wall "
                "time (CUDA events, host launch overhead included) and GPU time (the kernels' summed durations, "
                "torch profiler). TFLOP/s on GPU time, counting the useful work of the jagged batch for every "
                "implementation. `sdpa` is softmax attention (torch SDPA, flash backend, no bias) on the padded "
                "batch, padding not timed.", "",
                "| N | sequences | longest | implementation | wall ms | GPU ms | TFLOP/s | padded / impl (wall) | "
                "padded / impl (GPU) | peak MiB |", "|---|---|---|---|---|---|---|---|---|---|"]
        for case in r["attention"]:
            for name, x in case["results"].items():
                if "skipped" in x:
                    out.append(f"| {case['tokens']} | {case['sequences']} | {case['longest']} | {name} | "
                               f"skipped: {x['skipped']} | | | | | |")
                    continue
                ratio = case["ratios"].get(f"{name}_vs_padded", {})
                out.append(f"| {case['tokens']} | {case['sequences']} | {case['longest']} | {name} | "
                           f"{x['forward_backward_ms']:.3f} | {x['forward_backward_kernel_ms']:.3f} | "
                           f"{x['forward_backward_kernel_tflops']:.2f} | "
                           f"{ratio.get('forward_backward_ms', 1.0):.2f}x | "
                           f"{ratio.get('forward_backward_kernel_ms', 1.0):.2f}x | {x['peak_memory_mib']:.1f} |")
        ops = "; ".join(f"{x['op']} {x['backend']} {x['forward_backward_kernel_ms'] * 1000:.0f} µs"
                        for x in r["other_ops"] if "forward_backward_kernel_ms" in x)
        at_4096 = next(c for c in r["attention"] if c["tokens"] == 4096)["ratios"]["triton_vs_padded"]
        out += ["", f"Goal: ≥ 5x the padded reference at N = 4096 — "
                f"{'met' if at_4096['forward_backward_ms'] >= 5 else 'NOT met'} "
                f"({at_4096['forward_backward_ms']:.1f}x wall, {at_4096['forward_backward_kernel_ms']:.1f}x GPU time). "
                f"Other ops, GPU time of forward + backward at N = {r['other_ops'][0]['shape'][0]}, width "
                f"{r['other_ops'][0]['shape'][1]}: {ops}. Commit `{r['commit'][:12]}`. {r.get('commit_note', '')}",
                ""]
    return out
