"""Generate docs/results.md from results/*.json (every figure in the doc comes from one of those files):
dataset statistics (scripts/data_stats.py), training runs (genrec-train results_name=...; generative models over
semantic IDs included), export checks (scripts/check_export.py), benchmarks (scripts/bench_hstu.py,
scripts/bench_kernels.py, scripts/bench_beam.py, scripts/bench_dynamic.py) and tokenizer runs (genrec-tokenize).

Usage: python scripts/make_results_doc.py  (or `make results`)
"""
from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS, DOC = ROOT / "results", ROOT / "docs" / "results.md"

#: Published numbers quoted for comparison (not measured here); see ../shared/notes/anchors.md.
PUBLISHED = {
    "beauty": {
        "SASRec (TIGER paper)": {"recall@5": .0387, "ndcg@5": .0249, "recall@10": .0605, "ndcg@10": .0318},
        "TIGER (TIGER paper)": {"recall@5": .0454, "ndcg@5": .0321, "recall@10": .0648, "ndcg@10": .0384},
    },
    "ml1m": {
        "SASRec (Meta HSTU README)": {"recall@10": .2853, "ndcg@10": .1603},
        "HSTU (Meta HSTU README)": {"recall@10": .3097, "ndcg@10": .1720},
        "HSTU-large (Meta HSTU README)": {"recall@10": .3294, "ndcg@10": .1893},
    },
    "ml20m": {
        "SASRec (Meta HSTU README)": {"recall@10": .2889, "ndcg@10": .1621},
        "HSTU-large (Meta HSTU README)": {"recall@10": .3556, "ndcg@10": .2098},
    },
}
#: Prose shown under a dataset's table: how its comparisons were run and what was tried.
NOTES: dict[str, list[str]] = {
    "ml100k": [
        "HSTU does not reach the published margin over SASRec here: the two are within the test set's noise "
        "(943 users). What was tried: the published MovieLens setup (`model=hstu`), the full softmax instead of 128 "
        "sampled negatives (which learned more slowly and overfitted lower in a first trial, see "
        "genrec/conf/experiment/ml100k_hstu.yaml), the same budget rules as SASRec, the published large configuration "
        "(`hstu_large`: 8 blocks of 2 heads, 25-dimensional attention), and SASRec with HSTU's cosine / 0.05 loss "
        "(`sasrec_cosine`, to tell the loss from the encoder). What we think closes the gap: the published gains "
        "come from MovieLens-1M/20M (6k-138k users, sequences up to thousands of events), where HSTU's depth, long "
        "context and time bias have data to learn from; ML-100K is too small to separate the two (the ML-1M/20M "
        "presets are ready for the GroupLens files; ../shared/data holds ML-1M without its ratings).",
        ""],
    "beauty": [
        "SASRec and HSTU: three seeds each; every run ended by its preset's early stopping on validation NDCG@10 "
        "(patience 5 for SASRec, 10 for HSTU) before its epoch cap (each file's `epochs_run`, `best_epoch` and "
        "`trainer.max_epochs`). The runs were trained in segments, interrupted by session changes or first capped "
        "at 20 and then 40 epochs, each segment resumed from the run's own last checkpoint (listed above), so the "
        "train time in the table is the last segment's. One CPU thread per run, two to four runs side by side: "
        "about 1 min per SASRec epoch and 35 s per HSTU epoch with two (HSTU's jagged attention skips the padding "
        "SASRec computes at length 50; Beauty's mean history is 8.9 items).",
        "",
        "HSTU does not beat SASRec on Beauty: the two are within the test set's noise. What was tried: Meta's encoder "
        "for Amazon data (4 blocks of 4 heads, 16-dimensional attention and values, dropout 0.5, cosine similarity "
        "at temperature 0.05, AdamW 1e-3), trained on the full softmax over the 12,101 items like SASRec. What we "
        "think would close the gap: Beauty has no timestamps (HSTU's time bias is off) and short histories, which "
        "leave HSTU's relative bias and depth little to work with; the published margins were measured on "
        "MovieLens-1M/20M and Amazon Books, with long, timestamped sequences. On Beauty the next things to try are "
        "HSTU's dropout and width, and Meta's sampled softmax with many negatives and larger batches.",
        "",
        "The generative models were stopped by a wall-time budget (`trainer.max_time`, below). A best validation "
        "epoch equal to the last epoch means the run was still improving: its figures are a lower bound of the "
        "preset's.",
        ""],
    "synthetic": [
        "The synthetic default was calibrated against the real datasets' statistics (the \"Data statistics\" "
        "section), not against these scores; the order of the models and baselines is what came out, and it is the "
        "order seen on Beauty and ML-100K: SASRec, then the transition table voted by the last three items, then "
        "the first-order table, with popularity far below. By construction (genrec/data/synthetic.py): half of the "
        "next items are related items of one of the last three items, which a first-order table sees only when they "
        "follow the last one; the other half are popular items of the session's cluster (one of the user's "
        "drifting tastes, which only a longer history reveals, or any cluster); and similar items have similar "
        "related items, which an embedding model shares across the sparse counts (about 20 interactions per item, "
        "as in the Amazon sets).",
        ""],
}
COLUMNS = ["recall@5", "ndcg@5", "recall@10", "ndcg@10", "mrr"]
#: the margin issue 3 asks of HSTU over a tuned SASRec in NDCG@10 (Meta's README, ML-1M: HSTU +7.3%,
#: HSTU-large +18%; ML-20M: HSTU-large +29%)
GOAL_OVER_SASREC = 0.08


def _cell(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def _row(name: str, runs: list[dict], seeds: str, note: str = "", budget: str = "–") -> str:
    cells = [_cell([r[c] for r in runs if c in r]) for c in COLUMNS]
    return f"| {name} | " + " | ".join(cells) + f" | {seeds} | {budget} | {note} |"


def _budget(runs: list[dict]) -> str:
    """Epochs run (best epoch) and training wall time, averaged over a model's runs."""
    if not all("epochs_run" in r and "train_seconds" in r for r in runs):
        return "–"
    epochs = statistics.mean(r["epochs_run"] for r in runs)
    best = statistics.mean(r.get("best_epoch", 0) for r in runs)
    minutes = statistics.mean(r["train_seconds"] for r in runs) / 60
    return f"{epochs:.0f} ({best:.0f}), {minutes:.0f} min"


def _label(run: dict) -> str:
    """The model name, plus how its tables were trained when sharded (those runs are reported on their own row:
    a fused sparse optimizer and a per-process batch size make them a different training setup), or for a
    generative model the semantic IDs it generates and its beam."""
    if "sid_table" in run:
        sizes = "x".join(str(k) for k in run["sid_table"]["codebook_sizes"])
        tokenizer = run["sid_table"]["tokenizer"].get("tokenizer", {}).get("name", "?")
        return f"{run['model']} ({tokenizer} semantic IDs {sizes}, beam {run['decoding']['beam']})"
    sharding = (run.get("config", {}).get("sharding") or {})
    if not sharding.get("type"):
        return run["model"]
    processes, optimizer = run.get("processes", 1), sharding["optimizer"]
    return (f"{run['model']} ({sharding['type']} tables, {processes} process{'es' if processes > 1 else ''}, "
            f"{optimizer['name']} lr {optimizer['lr']:g})")


def training_tables(files: list[dict]) -> list[str]:
    """One table per dataset: models (mean ± std over seeds), genrec-measured baselines, published rows."""
    by_dataset = defaultdict(list)
    for r in files:
        if "metrics" in r and "test" in r.get("metrics", {}):
            by_dataset[r["dataset"]["dataset"]].append(r)
    out = []
    for dataset, runs in sorted(by_dataset.items()):
        summary = runs[0]["dataset"]
        out += [f"## {dataset}", "",
                f"{summary['users']:,} users, {summary['items']:,} items, {summary['interactions']:,} interactions. "
                "Leave-one-out (last item = test, second to last = validation), full-corpus ranking, "
                f"history items {'removed' if runs[0]['protocol']['exclude_history'] else 'kept'}; "
                "test split, best validation checkpoint.", "",
                "| model | " + " | ".join(COLUMNS) + " | seeds | epochs (best), train time | source |",
                "|---|" + "---|" * (len(COLUMNS) + 3)]
        by_model = defaultdict(list)
        for r in runs:
            by_model[_label(r)].append(r)
        for model, model_runs in sorted(by_model.items()):
            seeds = ", ".join(str(r["seed"]) for r in model_runs)
            names = ", ".join(sorted(f"`results/{r['name']}.json`" for r in model_runs))
            out.append(_row(f"**{model}**", [r["metrics"]["test"] for r in model_runs], seeds, names,
                            _budget(model_runs)))
        first = runs[0]
        for name, metrics in first["baselines"].items():
            out.append(_row(f"{name} (baseline)", [metrics["test"]], "–", f"`results/{first['name']}.json`"))
        for name, metrics in PUBLISHED.get(dataset, {}).items():
            out.append(_row(f"*{name}*", [metrics], "–", "published, not measured here"))
        commits = sorted({r["commit"] for r in runs})
        out += ["", f"Commits: {', '.join(f'`{c[:12]}`' for c in commits)}.", ""]
        resumed = sorted(r["name"] for r in runs if r.get("config", {}).get("resume_from"))
        if resumed:
            names = ", ".join(f"`results/{n}.json`" for n in resumed)
            out += [f"Resumed after an interruption (`resume_from=` the run's own `last.ckpt`, same run folder and "
                    f"seed, the config as recorded in the file): {names}; their train time counts the resumed part "
                    "only.", ""]
        out += below_baselines(by_model)
        out += comparison(dataset, by_model)
        out += NOTES.get(dataset, [])
        out += _generative_notes([r for r in runs if "sid_table" in r], files, PUBLISHED.get(dataset, {}))
    return out


def below_baselines(by_model: dict[str, list[dict]], metrics: tuple[str, ...] = ("recall@10", "ndcg@10")
                    ) -> list[str]:
    """Say plainly, per metric, which models do not beat the best genrec-measured baseline (mean test score over
    seeds)."""
    baselines = next(iter(by_model.values()))[0]["baselines"]
    out = []
    for metric in metrics:
        best_name, best = max(baselines.items(), key=lambda kv: kv[1]["test"][metric])
        below = [f"`{m}` ({_mean(runs, 'test', metric):.4f})" for m, runs in sorted(by_model.items())
                 if _mean(runs, "test", metric) <= best["test"][metric]]
        if below:
            out.append(f"**Not better than the best baseline on {metric}** (`{best_name}`, test "
                       f"{best['test'][metric]:.4f}): " + ", ".join(below) + ".")
        else:
            out.append(f"Every model beats the best baseline on {metric} (`{best_name}`, test "
                       f"{best['test'][metric]:.4f}).")
    return [" ".join(out), ""]


def _mean(runs: list[dict], split: str, metric: str) -> float:
    return statistics.mean(r["metrics"][split][metric] for r in runs)


def comparison(dataset: str, by_model: dict[str, list[dict]], metric: str = "ndcg@10",
               goal: float = GOAL_OVER_SASREC) -> list[str]:
    """HSTU-family models against the SASRec configuration with the best *validation* score on the dataset (the
    tuned one), on the mean test score over seeds; says whether the published margin (+8% NDCG@10) is reached."""
    sasrecs = {m: runs for m, runs in by_model.items() if m.startswith("sasrec")}
    hstus = {m: runs for m, runs in by_model.items() if m.startswith("hstu")}
    if not sasrecs or not hstus:
        return []
    reference = max(sasrecs, key=lambda m: _mean(sasrecs[m], "valid", metric))
    base = _mean(sasrecs[reference], "test", metric)
    best_baseline = max(by_model[reference][0]["baselines"].items(), key=lambda kv: kv[1]["test"][metric])
    users = by_model[reference][0]["dataset"]["users"]
    recall = _mean(sasrecs[reference], "test", "recall@10")
    out = [f"HSTU against `{reference}` (the SASRec configuration with the best validation {metric} here), "
           f"test {metric}, mean over seeds (goal: HSTU at least {goal:+.0%}). The test set has {users:,} users: the "
           f"binomial standard error of a recall@10 near {recall:.3f} is "
           f"{math.sqrt(recall * (1 - recall) / users):.4f}, whatever the seeds.", ""]
    for model, runs in sorted(hstus.items()):
        score = _mean(runs, "test", metric)
        change = score / base - 1
        verdict = "goal met" if change >= goal else "goal **not** met"
        beats = "beats" if score > best_baseline[1]["test"][metric] else "does **not** beat"
        out.append(f"- `{model}`: {score:.4f} vs {base:.4f} = **{change:+.1%}** ({verdict}); it {beats} the best "
                   f"baseline (`{best_baseline[0]}`, {best_baseline[1]['test'][metric]:.4f}).")
    return out + [""]


def benchmark_tables(files: list[dict]) -> list[str]:
    """The jagged vs padded HSTU benchmark (scripts/bench_hstu.py)."""
    out = []
    for r in files:
        if r.get("benchmark") != "hstu_attention":
            continue
        out += [f"## Benchmark: HSTU training step, jagged vs padded attention (`results/{r['name']}.json`)", "",
                f"`{r['model']}` preset with the `{r.get('loss', 'sampled')}` loss, batch {r['batch_size']} of real "
                f"{r['dataset']} training sequences, "
                f"{r['device']}, {r['steps']} timed steps per case (fastest step; the machine is shared), "
                f"each case in its own process. Memory: {r['memory']}.", "",
                "| max length | mean length | mean longest in batch | padded seq/s | jagged seq/s | speed-up | "
                "padded / jagged CPU s per step | padded peak MiB | jagged peak MiB | memory ratio |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for row in r["rows"]:
            pad, jag = row["padded"], row["jagged"]
            out.append(f"| {row['max_len']} | {pad['mean_length']:.1f} | {pad['mean_batch_longest']:.0f} | "
                       f"{pad['sequences_per_second']:.1f} | {jag['sequences_per_second']:.1f} | "
                       f"{row['speedup']:.2f}x | {min(pad['cpu_seconds']):.2f} / {min(jag['cpu_seconds']):.2f} | "
                       f"{pad['peak_memory_mib']:.0f} | {jag['peak_memory_mib']:.0f} | {row['memory_ratio']:.2f}x |")
        cases = [c for row in r["rows"] for c in (row["padded"], row["jagged"])]
        contention = statistics.mean(min(c["step_seconds"]) / min(c["cpu_seconds"]) for c in cases)
        out += ["", f"Commit `{r['commit'][:12]}`, torch {r['environment']['torch']}, "
                    f"{r['rows'][0]['padded']['threads']} thread(s) per case. The machine was shared while this ran: "
                    f"a step's wall time was on average {contention:.1f}x its CPU time, so the sequences/s are far "
                    "below what the same machine gives when idle; the ratios, measured side by side, are the result "
                    "(the CPU-time column gives the same picture without the wait).", ""]
    return out


def hstu_peer_tables(files: list[dict]) -> list[str]:
    """genrec's HSTU step vs Meta's reference on the same batches (scripts/bench_hstu.py --peer)."""
    out = []
    for r in files:
        if r.get("benchmark") != "hstu_peer":
            continue
        out += [f"## Benchmark: HSTU training step, genrec vs Meta's reference HSTU (`results/{r['name']}.json`)", "",
                f"{r['dataset']}: batch {r['batch_size']}, max length {r['max_len']}, {r['num_items']} items, seed "
                f"{r['seed']}; a step is feature preparation, loss over every position with 128 uniform negatives "
                f"(cosine, temperature 0.05), backward and AdamW. Peer: `{r['harness']}` at `{r['peer_rev'][:12]}`, "
                f"genrec: `experiment=<experiment>`. {r['threads']} threads each (OMP_WAIT_POLICY "
                f"{r.get('omp_wait_policy', 'unset: libgomp spins')}), {r['steps']} timed steps after "
                f"{r['warmup']} warm-up per run, the two alternating for {r['rounds']} rounds; figures are medians "
                f"over rounds of each run's median step. Memory: {r['memory']}. Goal (issue 17): >= 2x the peer's "
                "seq/s and <= 0.5x its peak memory.", "",
                "| preset | experiment | peer s/step | genrec s/step | peer seq/s | genrec seq/s | speed-up | "
                "peer peak MiB | genrec peak MiB | memory ratio | CPU s/step peer / genrec |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in r["rows"]:
            g, p = row["genrec"], row["peer"]
            out.append(f"| {row['config']} | `{row['experiment']}` | {p['step_s_median']:.3f} | "
                       f"{g['step_s_median']:.3f} | {p['seqs_per_s_at_median']:.1f} | {g['seqs_per_s_at_median']:.1f} "
                       f"| {row['speedup_seqs_per_s']:.2f}x | {p['peak_rss_mib']:.0f} | {g['peak_rss_mib']:.0f} | "
                       f"{row['memory_ratio']:.2f}x | {p['cpu_user_s_per_step'] + p['cpu_sys_s_per_step']:.2f} / "
                       f"{g['cpu_user_s_per_step'] + g['cpu_sys_s_per_step']:.2f} |")
        met = [row["speedup_seqs_per_s"] >= 2 and row["memory_ratio"] <= 0.5 for row in r["rows"]]
        out += ["", f"Commit `{r['commit'][:12]}`, torch {r['environment']['torch']}. {r.get('machine', '')} "
                    f"Goal met at {sum(met)} of {len(met)} presets.", ""]
    return out


def kernel_tables(files: list[dict]) -> list[str]:
    """genrec_kernels on a GPU (scripts/bench_kernels.py): HSTU attention, Triton vs the padded reference."""
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


#: Training length of the published generative models, for the notes (TIGER paper: 200k steps of batch 256).
PUBLISHED_STEPS = {"tiger": ("TIGER (TIGER paper)", 200_000, 256)}


def _validations(run: dict) -> str:
    """How many validation passes chose the reported checkpoint (from the run's epochs and best epoch)."""
    passes = max(run["epochs_run"], run["best_epoch"] + 1)
    if passes <= 1:
        return "one validation pass at the end (no checkpoint selection)"
    return f"best of {passes} validation passes (epoch {run['best_epoch'] + 1})"


def _generative_notes(runs: list[dict], files: list[dict], published: dict) -> list[str]:
    """What a generative run's numbers rest on: the SID table (and the tokenizer result that made it), decoding,
    invalid IDs, how long it trained, and how it compares with the published model."""
    if not runs:
        return []
    tables = {f["sid_table"]["content_hash"]: f["name"] for f in files if f.get("kind") == "tokenize"}
    out = ["Generative models (semantic IDs):", ""]
    for r in sorted(runs, key=lambda r: r["name"]):
        sid, dec, test = r["sid_table"], r["decoding"], r["metrics"]["test"]
        made_by = (f"the table of `results/{tables[sid['content_hash']]}.json`" if sid["content_hash"] in tables
                   else "a table with no tokenizer result in results/")
        trainer = r["config"]["trainer"]
        stop = (f"stopped by `trainer.max_time={trainer['max_time']}` or {trainer['max_epochs']} epochs"
                if trainer.get("max_time") else f"at most {trainer['max_epochs']} epochs")
        batch, optim = r["config"]["data"]["batch_size"], r["config"]["optim"]
        steps = r.get("steps_run")
        validations = _validations(r)
        line = (f"- `results/{r['name']}.json` ({r['model']}): SID table `{sid['content_hash']}` ({made_by}, "
                f"codebooks {' x '.join(str(k) for k in sid['codebook_sizes'])}); beam {dec['beam']}, "
                f"top-{dec['top_k']}, "
                f"{'constrained by the prefix trie' if dec['constrained'] else 'unconstrained'}; invalid IDs among "
                f"the decoded test lists: {test['invalid_rate']:.2%}. "
                f"{dec['ranking'][0].upper() + dec['ranking'][1:]}. "
                f"Trained on CPU ({stop}): {steps if steps is not None else '?'} steps of batch {batch} in "
                f"{r['train_seconds'] / 60:.0f} min with validation, {validations}.")
        weaker = [m for m in COLUMNS[:4] if test[m] < r["baselines"]["most_popular"]["test"][m]]
        if weaker:
            line += f" Below even the most-popular baseline on {', '.join(weaker)}."
        if r["epochs_run"] > 1 and r["best_epoch"] + 1 >= r["epochs_run"]:
            line += " Its last validation was its best: it was still improving when the budget ran out."
        line += (f" Nothing was tuned (the preset's AdamW, lr {optim['lr']:g}, warm-up {optim.get('warmup_steps', 0)} "
                 "steps, no decay).")
        if r["model"] in PUBLISHED_STEPS and PUBLISHED_STEPS[r["model"]][0] in published:
            name, paper_steps, paper_batch = PUBLISHED_STEPS[r["model"]]
            paper = published[name]
            gaps = ", ".join(f"{m} {test[m]:.4f} vs {paper[m]:.4f}" for m in paper)
            below = [m for m in paper if test[m] < paper[m]]
            if below:
                line += (f" **Below the paper** ({gaps}): this run trained {steps or '?'} steps of batch {batch}, "
                         f"the paper {paper_steps:,} steps of batch {paper_batch} (about "
                         f"{paper_steps * paper_batch / max((steps or 1) * batch, 1):.0f}x the examples), on a "
                         "2-core CPU shared with other runs; its semantic IDs come from a 384-d MiniLM text "
                         "encoder (the paper: 768-d Sentence-T5).")
            else:
                line += f" At or above the paper ({gaps})."
        out.append(line)
    return out + ["", "What we expect to close the gap to the baselines and the paper (not measured here): training "
                  "to convergence (the paper's TIGER: 200k steps; these runs: minutes of CPU), then a learning-rate "
                  "schedule and the paper's larger text encoder for the semantic IDs.", ""]


def _settings(params: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()) or "–"


def export_tables(files: list[dict]) -> list[str]:
    """One section per export check (scripts/check_export.py): top-10 parity, ANN recall, served metrics."""
    out = []
    for r in files:
        if r.get("kind") != "export_check":
            continue
        m, d = r["model"], r["dataset"]
        flat = r["indexes"]["index_flat"]["parity"]
        towers = "; ".join(f"{name}: max |diff| {p['max_abs_diff']:.2g} on {p['users']:,} users"
                           for name, p in r["tower_parity"].items() if "max_abs_diff" in p)
        skipped = "".join(f" Skipped: {name} ({why})." for name, why in r["skipped"].items())
        out += [f"## Export: {d['dataset']} ({m['name']}, dim {m['dim']}, {m['similarity']})", "",
                f"`results/{r['name']}.json`: the run's checkpoint (trained {r['config']['trainer']['max_epochs']} "
                f"epochs at most, seed {r['seed']}) exported by `genrec-export`, then served by "
                "`scripts/retrieval_example.py` (exported user tower + faiss index + ID map, no genrec code) for "
                f"every one of the {d['users']:,} test users, history items "
                f"{'removed' if r['exclude_history'] else 'kept'}. "
                f"Commit `{r['commit'][:12]}`.", "",
                f"- Flat index vs genrec's own ranking: identical top-10 for {flat['identical_top10']:,} of "
                f"{flat['users']:,} users, {flat['tie_order_differences']} differ only in the order of tied scores "
                f"(within {flat['tie_tolerance']:g}), {flat['other_differences']} differ otherwise; largest score "
                f"difference {flat['max_abs_score_diff']:.2g}.",
                f"- User tower vs the in-framework encoder ({towers}).{skipped}", "",
                "| served by | settings | recall@10 vs exact top-10 | test recall@10 | test ndcg@10 | ms / user |",
                "|---|---|---|---|---|---|"]
        for name, x in r["indexes"].items():
            out.append(f"| {name} | {_settings(x['params'])} | {x['recall_at_10_vs_exact']:.4f} | {x['recall@10']:.4f} "
                       f"| {x['ndcg@10']:.4f} | {x['ms_per_user']:.2f} |")
        f = r["framework_test"]
        out.append(f"| genrec ranking (in framework) | – | 1 | {f['recall@10']:.4f} | {f['ndcg@10']:.4f} | – |")
        for name, b in r["baselines"].items():
            out.append(f"| {name} (baseline) | – | – | {b['recall@10']:.4f} | {b['ndcg@10']:.4f} | – |")
        best_name, best = max(r["baselines"].items(), key=lambda kv: kv[1]["recall@10"])
        if f["recall@10"] < best["recall@10"]:
            out += ["", f"The model served here does not beat the {best_name} baseline (recall@10 "
                    f"{f['recall@10']:.4f} vs {best['recall@10']:.4f}): this check needs a trained checkpoint, not a "
                    f"tuned one, and its run was cut to {r['config']['trainer']['max_epochs']} epochs to fit a shared "
                    "2-core machine. Longer training (the default: 20 epochs with early stopping, `make run`) is "
                    "what we expect to close that gap (not measured here); the export reproduces whatever the "
                    "checkpoint ranks, good or bad."]
        worst = min(x["recall_at_10_vs_exact"] for x in r["indexes"].values())
        out += ["", f"Goal for the ANN indexes at default settings: recall@10 ≥ 0.95 against exact search "
                f"({'met' if worst >= 0.95 else 'NOT met'}: lowest {worst:.4f}). ms / user: batches of "
                f"{r['config']['data']['eval_batch_size']} users on this machine's CPU, user tower included.", ""]
    return out


def _levels(levels: list[dict], key: str, fmt: str) -> str:
    return " / ".join(format(level[key], fmt) for level in levels)


def tokenizer_tables(files: list[dict]) -> list[str]:
    """One table for every semantic-ID tokenizer run (files written by ``genrec-tokenize results_name=...``)."""
    runs = sorted((r for r in files if r.get("kind") == "tokenize"),
                  key=lambda r: (r["dataset"]["dataset"], r["tokenizer"], r["name"]))
    if not runs:
        return []
    out = ["## Semantic-ID tokenizers", "",
           "Health of each SID table (`genrec-tokenize`): code usage and normalised entropy (entropy / log2 K) per "
           "semantic level, items sharing a full code tuple before and after collision handling, and the "
           "reconstruction error of the embeddings from their codes (squared error over the embeddings' total "
           "variance). These describe the tokenizer, not a ranking, so the most-popular and transition baselines "
           "do not apply here; retrieval with the tables is measured by the generative models that use them.", "",
           "| dataset | items | encoder | method | collisions | codebook sizes | usage per level | entropy per level "
           "| colliding before | after | reconstruction error | seed | fit s | source |",
           "|---|" + "---|" * 13]
    for r in runs:
        h = r["health"]
        semantic = [level for level in h["levels"] if level["kind"] == "semantic"]
        before, after = h["collisions_before"], h["collisions_after"]
        encoder = r["encoder"]
        encoder_name = f"{encoder['name']} {encoder['dim']}-d" + (f" ({encoder['model']})" if "model" in encoder
                                                                  else "")
        out.append(f"| {r['dataset']['dataset']} | {h['items']:,} | {encoder_name} | {r['tokenizer']} | "
                   f"{r['collisions']} | {' x '.join(str(k) for k in r['sid_table']['codebook_sizes'])} | "
                   f"{_levels(semantic, 'usage', '.1%')} | {_levels(semantic, 'normalized_entropy', '.3f')} | "
                   f"{before['colliding_items']:,} ({before['collision_rate']:.2%}) | {after['colliding_items']} | "
                   f"{h['reconstruction']['relative']:.4f} | {r['seed']} | {r['seconds']['fit_and_resolve']:.0f} | "
                   f"`results/{r['name']}.json` |")
    notes = sorted({(r["dataset"]["dataset"], r["encoder"].get("items_without_text", 0)) for r in runs
                    if r["encoder"].get("items_without_text")})
    out.append("")
    for dataset, count in notes:
        out.append(f"{dataset}: {count} items have no text; their raw item IDs stand in as text "
                   "(`encoder.on_empty=raw_id`).")
    commits = sorted({r["commit"] for r in runs})
    out += ["", f"Commits: {', '.join(f'`{c[:12]}`' for c in commits)}.", ""]
    return out


def bench_beam_tables(files: list[dict]) -> list[str]:
    """The beam-search benchmark (scripts/bench_beam.py): users/s per decoder and the ratios of one run."""
    out = []
    for r in files:
        if r.get("kind") != "bench_beam":
            continue
        variants = list(dict.fromkeys(x["variant"] for x in r["rows"]))
        speed = {(x["model"], x["beam"], x["variant"]): x for x in r["rows"]}
        env = r["environment"]
        out += ["## Beam search speed", "",
                f"`results/{r['name']}.json` (`scripts/bench_beam.py`, commit `{r['commit'][:12]}`): users/s decoding "
                f"{r['rows'][0]['users']} {r['dataset']} test users (real histories, batches of "
                f"{r['args']['batch_size']}, top-k = beam; fastest of {r['args'].get('repeats', 1)} runs) on "
                f"{r['args']['threads']} CPU thread(s) of a shared "
                f"machine (torch {env['torch']}); randomly initialised models of the Beauty presets over the SID table "
                f"`{r['sid_table']}`. `naive`: no KV cache and the allowed codes found by comparing every beam's "
                "prefix with every semantic ID; `no_cache` / `brute_force`: one of the two; `genrec`: KV cache + "
                "tensor prefix trie; `unconstrained`: KV cache, no constraint.", "",
                "| model | beam | " + " | ".join(variants) + " | genrec / naive | cache alone | trie alone "
                "| constrained / unconstrained |",
                "|---|---|" + "---|" * (len(variants) + 4)]
        for q in r["ratios"]:
            cells = [f"{speed[(q['model'], q['beam'], v)]['users_per_s']:.1f}" for v in variants]
            out.append(f"| {q['model']} | {q['beam']} | " + " | ".join(cells) + f" | {q['genrec_vs_naive']:.1f}x | "
                       f"{q['cache_alone']:.1f}x | {q['trie_alone']:.1f}x | {q['constrained_vs_unconstrained']:.2f}x |")
        prefill = [f"{m} {x['prefill_users_per_s']:.1f} users/s "
                   f"({speed[(m, 20, 'genrec')]['users_per_s'] / x['prefill_users_per_s']:.0%} of genrec's decoding "
                   "time at beam 20)" for m, x in r["settings"].items()
                   if "prefill_users_per_s" in x and (m, 20, "genrec") in speed]
        longest = {m: x["max_len"] * len(x["codebook_sizes"]) + 1 for m, x in r["settings"].items()}
        if prefill:
            out += ["", "genrec's prefill alone (TIGER: the encoder and the cross-attention keys/values; decoder-only: "
                    "the history's keys/values), paid once per user whatever the beam: " + ", ".join(prefill)
                    + ". The naive TIGER decoder runs the encoder once per user too (as `transformers`' `generate` "
                    "does without a cache), so it pays the same prefill. TIGER's decoder is 4 tokens long: without a "
                    "cache it recomputes those few tokens and the "
                    "cross-attention keys/values at every step, while the feed-forward work of every beam stays the "
                    "same, so a cache saves less than on the decoder-only model, whose naive decoder re-runs the "
                    f"whole history (up to {longest.get('sid_gpt', '?')} tokens) at every step of every beam."]
        at20 = [q for q in r["ratios"] if q["beam"] == 20]
        if at20:
            met = ", ".join(f"{q['model']} {q['genrec_vs_naive']:.1f}x "
                            f"({'met' if q['genrec_vs_naive'] >= 10 else 'NOT met'})" for q in at20)
            out += ["", f"Goal: genrec ≥ 10x the naive decoder at beam 20: {met}."]
        compared = [x for x in r["rows"] if "same_items_as_genrec" in x]
        differ = [f"{x['model']} beam {x['beam']} {x['variant']}" for x in compared if not x["same_items_as_genrec"]]
        worst = max(x["max_score_diff_vs_genrec"] for x in compared)
        out += ["", "Every constrained variant decodes what genrec's does: "
                + (f"the same items, except {', '.join(differ)}, where items with near-equal scores swap places; "
                   if differ else "the same items; ")
                + f"the scores of the lists agree within {worst:.1g} (float32, cached vs uncached).", ""]
    return out


#: Rows of the data-statistics table: label, how to read it from a dataset's entry, format.
DATA_STAT_ROWS = [
    ("users", lambda d: d["users"], ","),
    ("items", lambda d: d["items"], ","),
    ("interactions", lambda d: d["interactions"], ","),
    ("interactions per item", lambda d: d["interactions"] / d["items"], ".1f"),
    ("length: mean", lambda d: d["length"]["mean"], ".1f"),
    ("length: median", lambda d: d["length"]["median"], ".0f"),
    ("length: p90", lambda d: d["length"]["p90"], ".0f"),
    ("length: max", lambda d: d["length"]["max"], ","),
    ("popularity: Gini of item counts", lambda d: d["popularity"]["gini"], ".3f"),
    ("popularity: share of the top 1% items", lambda d: d["popularity"]["top_1pct_share"], ".3f"),
    ("popularity: share of the top 10% items", lambda d: d["popularity"]["top_10pct_share"], ".3f"),
    ("popularity: fitted Zipf exponent", lambda d: d["popularity"]["zipf_exponent"], ".2f"),
    ("H(next item), bits", lambda d: d["transitions"]["next_entropy_bits"], ".2f"),
    ("H(next item given the previous one), bits", lambda d: d["transitions"]["transition_entropy_bits"], ".2f"),
] + [
    (f"top-successor share, {lag} step{'s' if lag != '1' else ''} back",
     lambda d, lag=lag: d["transitions"]["top_successor_share_by_lag"][lag], ".4f") for lag in ("1", "2", "3", "5", "8")
] + [
    ("repeat rate (before de-duplication)", lambda d: d["repeat_rate"], ".3f"),
    ("taste persistence (cosine, first vs second half)", lambda d: d["taste"]["taste_persistence"], ".3f"),
    ("taste chance (another user's second half)", lambda d: d["taste"]["taste_chance"], ".3f"),
    ("taste lift", lambda d: d["taste"]["taste_lift"], ".3f"),
]


#: Prose under the data-statistics table.
DATA_STATS_NOTES = [
    "The synthetic generator's related items come from the user's last three items only, so beyond three steps "
    "back only the session's cluster and the user's tastes link a single item to the next one, more weakly than in "
    "the real logs (whose items 5 and 8 steps back still predict the next one a fifth to a half as well as the last "
    "one does on MovieLens and Beauty). Longer related-item windows tried while calibrating raised those two rows "
    "only a little and pushed the taste lift above the real range; this is left as it is.",
    ""]


def _is_synthetic(entry: dict) -> bool:
    return entry["config"]["reader"]["_target_"].endswith("generate_synthetic")


def data_stats_tables(files: list[dict]) -> list[str]:
    """The datasets side by side (scripts/data_stats.py): one column per dataset, the range of the real ones, and
    whether each synthetic dataset falls inside it."""
    out = []
    for r in files:
        if r.get("kind") != "data_stats":
            continue
        datasets = r["datasets"]
        real = [n for n, d in datasets.items() if not _is_synthetic(d)]
        synthetic = [n for n, d in datasets.items() if _is_synthetic(d)]
        out += ["## Data statistics", "",
                f"`results/{r['name']}.json` (`scripts/data_stats.py`, commit `{r['commit'][:12]}`): every dataset "
                "read and preprocessed exactly as `genrec-train data=<name>` does; definitions in "
                f"`genrec/data/stats.py`. Item clusters for the taste rows: {r['clusters']} k-means clusters of item "
                "co-occurrence vectors fit on half of the users, measured on the other half (no item content used). "
                "H(next | previous) is a "
                "plug-in estimate that falls with fewer pairs per item (compare it between datasets of similar "
                "density); the top-successor shares are leave-one-out (what a first-order table gets right at rank 1, "
                "and the same from the item 2, 3, 5, 8 steps back)."
                + (f" Skipped (files absent): {', '.join(r['skipped'])}." if r.get("skipped") else ""), "",
                "| statistic | " + " | ".join(datasets) + " | range of the real datasets |"
                + "".join(f" {n} in range |" for n in synthetic),
                "|---|" + "---|" * (len(datasets) + 1 + len(synthetic))]
        outside = defaultdict(list)
        for label, get, fmt in DATA_STAT_ROWS:
            values = {n: get(d) for n, d in datasets.items()}
            low, high = (min(values[n] for n in real), max(values[n] for n in real)) if real else (None, None)
            cells = [format(values[n], fmt) for n in datasets]
            span = f"{format(low, fmt)} – {format(high, fmt)}" if real else "–"
            checks = []
            for n in synthetic:
                if low is None or label in ("users", "items", "interactions"):
                    checks.append("–")
                elif low <= values[n] <= high:
                    checks.append("yes")
                else:
                    checks.append("**no**")
                    outside[n].append(label)
            out.append(f"| {label} | " + " | ".join(cells) + f" | {span} |" + "".join(f" {c} |" for c in checks))
        out.append("")
        for n in synthetic if real else []:
            out.append(f"`{n}` lies outside the range of the real datasets on: {'; '.join(outside[n])}."
                       if outside[n] else f"Every statistic of `{n}` lies within the range of the real datasets.")
        out += ["", *DATA_STATS_NOTES]
    return out


def _rate(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:,.1f}K"


def _mib(num_bytes: float) -> str:
    return f"{num_bytes / 2**20:,.0f} MiB"


def bench_dynamic_tables(files: list[dict]) -> list[str]:
    """Dynamic embedding tables (scripts/bench_dynamic.py): exactness, remap speed, hit rates, tiers, overheads."""
    out = []
    for r in files:
        if r.get("kind") != "bench_dynamic" or r.get("quick"):
            continue
        goal = lambda ok: "met" if ok else "NOT met"  # noqa: E731
        out += ["## Dynamic embedding tables", "",
                f"`results/{r['name']}.json` (`scripts/bench_dynamic.py`, commit `{r['commit'][:12]}`): "
                f"{r['machine_note']}; batches of {r['batch']} IDs; every comparison measured side by side in this "
                "run (timed variants alternate in blocks, medians).", ""]
        st = r["stores"]
        out += [f"**Tier-2 store** ({st['rows']:,} rows of {st['record_bytes']} bytes, random multi-gets of 8192):", "",
                "| store | writes (rows/s) | random reads (rows/s) | disk |", "|---|---|---|---|"]
        for name, x in st["results"].items():
            out.append(f"| {name} | {x['put_rows_per_s']:,.0f} | {x['get_rows_per_s']:,.0f} | {_mib(x['disk_bytes'])} |")
        ltm = {x["backend"]: x for x in r["larger_than_memory"]}
        if "lmdb" in ltm:
            out += ["", f"LMDB reads faster, but maps its file: every page it reads counts in the process's RSS "
                    f"(below: {_mib(ltm['lmdb']['peak_minus_fixed_bytes'])} over the fixed overhead for a "
                    f"{_mib(ltm['lmdb']['budget_bytes'])} budget, against "
                    f"{_mib(ltm['rocksdb']['peak_minus_fixed_bytes'])} with RocksDB), so RocksDB, whose reads go "
                    "through a block cache of a set size, is the default."]
        out += ["", "**Exactness** (tier 0 = 10% of the working set with tier 2, vs the whole table in memory; same "
                "stream):", "", "| optimizer | working set | tier 0 | rows back from tier 2 | max weight diff "
                "| max state diff | goal ≤ 1e-6 |", "|---|---|---|---|---|---|---|"]
        for x in r["exactness"]:
            worst = max(x["max_weight_diff"], x["max_state_diff"])
            out.append(f"| {x['optimizer']} | {x['working_set']:,} | {x['tier0_rows']:,} ({x['tier0_fraction']:.0%}) "
                       f"| {x['hits_tier2']:,} | {x['max_weight_diff']:.1g} | {x['max_state_diff']:.1g} "
                       f"| {goal(worst <= 1e-6 and x['same_rows'])} |")
        out += ["", "**Remap speed** (raw ID -> slot with admission and eviction, table filled before timing, Zipf(1.05) "
                "batches; TorchRec's MCH: LRU, eviction every batch):", "",
                "| slots | genrec (IDs/s) | MCH (IDs/s) | genrec / MCH | goal ≥ 2M IDs/s |", "|---|---|---|---|---|"]
        for x in r["remap"]:
            if "skipped" in x:
                out.append(f"| {x['capacity']:,} | skipped: {x['skipped']} | | | |")
                continue
            ratio = f"{x['genrec_ids_per_s'] / x['mch_ids_per_s']:.1f}x" if x["mch_ids_per_s"] else "–"
            out.append(f"| {x['capacity']:,} | {_rate(x['genrec_ids_per_s'])} | {_rate(x['mch_ids_per_s'])} | {ratio} "
                       f"| {goal(x['genrec_ids_per_s'] >= 2e6)} |")
        z = r["zipf"]
        out += ["", f"**Training throughput and hit rate** (Zipf(1.05), {z['ids']:,} IDs, {z['distinct']:,} distinct, "
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
                       f"| {x['genrec_lfu_hit_rate']:.4f} ({x['exact_lfu_hit_rate']:.4f}) | {goal(max(gaps) <= 0.01)} |")
        p = r["prefetch"]
        ratios = p["ratio_vs_all_in_memory"]
        out += ["", f"**Prefetching** (a training step: lookup of 8192 IDs, an MLP {p['dim']}->{p['hidden']}->1 over each "
                f"row, fused update; {p['distinct']:,} distinct IDs, tier 0 = {p['tier0_rows']:,} rows with tier 2): "
                f"all in memory {p['median_step_s']['all_in_memory'] * 1e3:.1f} ms per step; 10% tier 0 "
                f"{ratios['tier0_10pct']:.2f}x that, with prefetching {ratios['tier0_10pct_prefetch']:.2f}x "
                f"(goal ≤ 1.2x: {goal(ratios['tier0_10pct_prefetch'] <= 1.2)})."
                + ("" if ratios["tier0_10pct_prefetch"] <= 1.2 else
                   " The prefetcher maps in a Python thread, which shares the interpreter lock with the training step "
                   "and the write-back thread (per-row store calls are Python calls), and here two cores busy with "
                   "other jobs: the mapping cannot run beside the step (docs/DYNAMIC_EMBEDDINGS.md)."), ""]
        q = r["sasrec"]
        out += [f"**SASRec step** ({q['num_items']:,} items, {q['batch_users']} users x {q['length']} positions, "
                f"{q['loss']}, everything in tier 0): static table {q['median_step_s']['static'] * 1e3:.1f} ms, "
                f"dynamic {q['median_step_s']['dynamic'] * 1e3:.1f} ms: overhead {q['overhead']:+.1%} "
                f"(goal ≤ 10%: {goal(q['overhead'] <= 0.10)}).", ""]
        out += ["**Larger than memory** (a child process per store; the budget covers tier 0, its bookkeeping and the "
                "store's caches; fixed overhead = the process's RSS before the table: Python, torch, the libraries):", "",
                "| store | budget | tier 0 rows | rows stored | table (weights + state) | fixed overhead "
                "| peak RSS - fixed | disk | IDs/s | hit rate tier 0 / tier 2 | within budget |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for x in r["larger_than_memory"]:
            out.append(f"| {x['backend']} | {_mib(x['budget_bytes'])} | {x['capacity']:,} | {x['rows']:,} "
                       f"| {_mib(x['table_bytes'])} ({x['table_over_budget']:.1f}x budget) "
                       f"| {_mib(x['fixed_overhead_bytes'])} | {_mib(x['peak_minus_fixed_bytes'])} "
                       f"| {_mib(x['disk_bytes'])} | {_rate(x['ids_per_s'])} "
                       f"| {x['hit_rate_tier0']:.3f} / {x['hit_rate_tier2']:.3f} | {'yes' if x['within_budget'] else 'NO'} |")
        out.append("")
    return out


def main() -> None:
    files = [json.loads(p.read_text()) | {"name": p.stem} for p in sorted(RESULTS.glob("*.json"))]
    lines = ["# Results", "", "Generated by `scripts/make_results_doc.py` from `results/*.json`; do not edit by hand.",
             "Every row links the file(s) it comes from; each file records the dataset, config, seed and commit.",
             "Metrics are fractions (recall@10 = 0.06 means 6% of test users have their item in the top 10).", ""]
    lines += data_stats_tables(files)
    lines += training_tables(files)
    lines += export_tables(files)
    lines += benchmark_tables(files)
    lines += hstu_peer_tables(files)
    lines += tokenizer_tables(files)
    lines += kernel_tables(files)
    lines += bench_beam_tables(files)
    lines += bench_dynamic_tables(files)
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(lines) + "\n")
    print(f"wrote {DOC} from {len(files)} result files")


if __name__ == "__main__":
    main()
