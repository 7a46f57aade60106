"""The docs table of scripts/bench/bench_fsdp.py: memory per process of fully sharded training."""
from __future__ import annotations


def tables(files: list[dict]) -> list[str]:
    """Memory per process of fully sharded training (scripts/bench/bench_fsdp.py)."""
    out = []
    for r in files:
        if r.get("kind") != "bench_fsdp":
            continue
        llama = r["model"]["llama"]
        out += [f"## Benchmark: fully sharded training (fsdp=full), memory per process (`results/{r['name']}.json`)",
                "", f"The SID generator on a random-initialised llama ({llama['num_hidden_layers']} layers, width "
                f"{llama['hidden_size']}, text vocabulary {llama['vocab_size']:,} + the SID tokens), {r['steps']} Adam "
                f"steps on a global batch of {r['global_batch']['sequences']} sequences of "
                f"{r['global_batch']['length']} items; 1 process unsharded vs 2 gloo processes with FSDP2, alternated, "
                f"median of {r['rounds']} round(s); {r['machine_note']}.", "",
                "| processes | parameters | params + grads + Adam per process, MiB | peak RSS above start, MiB |",
                "|---|---|---|---|"]
        for row in r["rows"]:
            out.append(f"| {row['processes']} | {row['parameters']:,} | {row['state_mib']:.1f} | "
                       f"{row['peak_rss_above_start_mib']:.1f} |")
        out += ["", f"2 processes / 1: model state {r['state_ratio']:.2f}x, peak RSS {r['peak_ratio']:.2f}x "
                "(activations and the gathered layer are not sharded); final loss difference "
                f"{r['max_loss_difference']:.1e} (tests/distributed/test_fsdp.py checks losses and weights to 1e-5). "
                f"Commit `{r['commit'][:12]}`.", ""]
    return out
