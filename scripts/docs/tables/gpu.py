"""``recipe=gpu`` runs (genrec-train on a lent GPU, scripts/gpu/gpu_recipe_check.sh) beside the same models on CPU and
the baselines, and what they say: docs/results/generative.md.
"""
from __future__ import annotations

import statistics

from scripts.docs.tables.common import COLUMNS, PUBLISHED, _budget, _cell, _commits, _on_gpu, prose


#: the CPU runs each GPU recipe run is set beside: results-name prefix of the same model trained on the 2-core
#: machine, and the ranking its test metrics were read under (None: the file's own test metrics)
GPU_CPU_REFERENCES = {
    "sid_gpt": ("beauty_post_sft_items_tied_hdistill_seed", {"rank": "guided", "code_weight": 0},
                "the same generator on CPU (batch 256, lr 1e-3, 10 epochs, rank=hybrid validation; test re-ranked "
                "guided at code weight 0 by compare_rankings.py)"),
    "tiger": ("beauty_tiger_seed", None, "TIGER on CPU (text semantic IDs, batch 256, 2-epoch / 24-min cap)"),
    "sasrec": ("beauty_sasrec_seed", None, "SASRec on CPU (the preset)"),
}


def _gpu_row(label: str, runs: list[dict], budget: str, speed: str, memory: str, source: str) -> str:
    cells = [_cell([r[c] for r in runs if c in r]) for c in COLUMNS + ["invalid_rate"]]
    return f"| {label} | " + " | ".join(cells) + f" | {budget} | {speed} | {memory} | {source} |"


def _cpu_reference(files: list[dict], model: str) -> str | None:
    """The table row of the CPU runs GPU_CPU_REFERENCES names for ``model`` (mean ± std over their seeds)."""
    prefix, decoding, label = GPU_CPU_REFERENCES[model]
    runs = [r for r in files if r["name"].startswith(prefix) and "metrics" in r and not _on_gpu(r)]
    if not runs:
        return None
    names = {r["name"] for r in runs}
    if decoding is None:
        metrics, sources = [r["metrics"]["test"] for r in runs], sorted(names)
    else:
        rows = {row["results_name"]: (row, f["name"]) for f in files if f.get("kind") == "ranking_comparison"
                for row in f["runs"] if row["results_name"] in names and row["decoding"] == decoding}
        metrics, sources = [row["metrics"]["test"] for row, _ in rows.values()], sorted(
            {name for _, name in rows.values()} | names)
    step = [r["telemetry"]["step_ms"]["median"] for r in runs if "telemetry" in r]
    speed = f"{statistics.mean(step):.0f} ms" if step else "–"
    cells = [_cell([m[c] for m in metrics if c in m]) for c in COLUMNS + ["invalid_rate"]]
    return (f"| {label}, seeds {', '.join(str(r['seed']) for r in runs)} | " + " | ".join(cells) +
            f" | {_budget(runs)} | {speed} | – | {', '.join(f'`results/{n}.json`' for n in sources)} |")


def tables(files: list[dict]) -> list[str]:
    """recipe=gpu runs (scripts/gpu/gpu_recipe_check.sh) beside the same models on CPU and the baselines."""
    gpu = [r for r in files if _on_gpu(r)]
    if not gpu:
        return []
    first, c = gpu[0], gpu[0]["config"]
    out = [f"## GPU recipe (`recipe=gpu`) on one {first['environment']['cuda']}: {first['dataset']['dataset']}", "",
           f"`scripts/gpu/gpu_recipe_check.sh`, seed 0, torch {first['environment']['torch']}: "
           f"{c['trainer']['precision']}, batches of {c['data']['batch_size']} sequences bucketed by length, "
           f"lr {c['optim']['lr']:g} after {c['optim']['warmup_steps']} warm-up steps, validation every "
           f"{c['trainer']['check_val_every_n_epoch']} epochs, the time cap in each row (early stopping "
           f"after {c['callbacks']['early_stopping']['patience']} validations without gain). The runs of one commit "
           "trained side by side on the one GPU, each slowed by the others, so their times are upper bounds. Test "
           "split, best validation checkpoint; the baselines are genrec's, in the same protocol.", "",
           "| run | " + " | ".join(COLUMNS) + " | invalid | epochs (best), train time of the cap | step (median) | "
           "GPU use | source |", "|---|" + "---|" * (len(COLUMNS) + 5)]
    for r in sorted(gpu, key=lambda r: r["name"]):
        t, g, sids = r["telemetry"], r["telemetry"].get("gpu", {}), r["sid_table"]
        label = (f"**{r['model']}** ({sids['tokenizer']['encoder']['name']} semantic IDs "
                 f"{'x'.join(str(k) for k in sids['codebook_sizes'])}), {r['decoding'].get('rank', 'codes')} ranking"
                 + (f" (code weight {r['decoding']['code_weight']:g})" if "code_weight" in r["decoding"] else "")
                 + (", distilled from SASRec" if r.get("distill") else "")
                 + f", compile={str(r['config']['compile']).lower()}, {r['steps_run']} steps")
        speed = f"{t['step_ms']['median']:.0f} ms (mean {t['step_ms']['mean']:.0f})"
        memory = (f"{g['util_pct_mean']:.0f}% util, {g['cuda_max_allocated_gib']:.1f} GiB peak"
                  if g else "–")
        hours, minutes = (int(part) for part in r["config"]["trainer"]["max_time"].split(":")[1:3])
        budget = f"{r['epochs_run']} ({r['best_epoch']}), {r['train_seconds']:.0f} s of {60 * hours + minutes} min"
        out.append(_gpu_row(label, [r["metrics"]["test"]], budget, speed, memory, f"`results/{r['name']}.json`"))
    for model in GPU_CPU_REFERENCES:
        row = _cpu_reference(files, model)
        if row:
            out.append(row)
    for name, metrics in first["baselines"].items():
        source = f"`results/{first['name']}.json`"
        out.append(_gpu_row(f"{name} (baseline)", [metrics["test"]], "–", "–", "–", source))
    for name, metrics in PUBLISHED.get(first["dataset"]["dataset"], {}).items():
        out.append(f"| *{name}* | " + " | ".join(_cell([metrics[k]]) if k in metrics else "–"
                                                 for k in COLUMNS + ["invalid_rate"]) +
                   " | – | – | – | published, not measured here |")
    notes = sorted({r["commit_note"] for r in gpu if "commit_note" in r})
    out += ["", f"Commits: {_commits(gpu)}" + (f" ({'; '.join(notes)})" if notes else "") + ".", ""]
    return out + _gpu_findings(gpu, files)


def _gpu_findings(gpu: list[dict], files: list[dict]) -> list[str]:
    """What the GPU runs say, computed from them: compile against eager (same model and steps), each model against
    the best baseline, the published number and its CPU run."""
    ndcg = lambda r: r["metrics"]["test"]["ndcg@10"]  # noqa: E731
    best_name, best = max(((n, m["test"]["ndcg@10"]) for n, m in gpu[0]["baselines"].items()), key=lambda x: x[1])
    out = []
    by_compile = {}
    for r in gpu:
        key = (r["model"], bool(r.get("distill")), r["config"]["trainer"]["max_time"])
        by_compile.setdefault(key, {})[r["config"]["compile"]] = r
    pairs = {key: pair for key, pair in by_compile.items() if set(pair) == {True, False}}
    for (model, _, cap), pair in pairs.items():
        on, off = pair[True], pair[False]
        ratio = on["telemetry"]["step_ms"]["median"] / off["telemetry"]["step_ms"]["median"]
        if on["steps_run"] == off["steps_run"]:
            out.append(f"- **compile:** {model} with `compile=true` ran the same {on['steps_run']} steps in "
                       f"{on['train_seconds']:.0f} s against {off['train_seconds']:.0f} s eager "
                       f"({on['train_seconds'] / off['train_seconds']:.1f}x), its median step {ratio:.2f}x the "
                       f"eager one, for test NDCG@10 {ndcg(on):.4f} vs {ndcg(off):.4f} eager.")
        else:
            out.append(f"- **compile:** {model} under the same {cap} cap ran {on['steps_run']} steps with "
                       f"`compile=true` (commit {_commits([on])}) against {off['steps_run']} eager ({_commits([off])}),"
                       f" its median step {ratio:.2f}x the eager one, for test NDCG@10 {ndcg(on):.4f} vs "
                       f"{ndcg(off):.4f} eager.")
    if pairs:
        out.append(prose("gpu", "compile_off"))
    published = {name.split(" (")[0].lower(): m for name, m in PUBLISHED.get(gpu[0]["dataset"]["dataset"], {}).items()}
    for r in sorted(gpu, key=lambda r: r["name"]):
        if r["config"]["compile"] and any(not o["config"]["compile"] and o["model"] == r["model"] for o in gpu):
            continue  # one line per model: the eager run
        line = (f"- **{r['model']}** (`results/{r['name']}.json`): NDCG@10 {ndcg(r):.4f}, "
                f"{100 * (ndcg(r) / best - 1):+.1f}% against the best baseline ({best_name}, {best:.4f})")
        if r["model"] in published:
            paper = published[r["model"]]["ndcg@10"]
            line += f", {100 * ndcg(r) / paper:.0f}% of the published {paper:.4f}"
        prefix, decoding, _ = GPU_CPU_REFERENCES.get(r["model"], (None, None, None))
        cpu = [f for f in files if prefix and f["name"].startswith(prefix) and "metrics" in f and not _on_gpu(f)]
        if cpu:
            line += (f"; its CPU run trained {statistics.mean(f['train_seconds'] for f in cpu) / 60:.0f} min "
                     f"against {r['train_seconds']:.0f} s here")
        line += (f"; best epoch {r['best_epoch']} of {r['epochs_run']}: "
                 + ("early stopping ended it." if r["epochs_run"] - r["best_epoch"] > 1 else
                    "still improving when the time cap ended it."))
        out.append(line)
    return out + [""]
