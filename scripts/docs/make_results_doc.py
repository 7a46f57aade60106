"""Generate docs/results.md from results/*.json (every figure in the doc comes from one of those files):
dataset statistics (scripts/analysis/data_stats.py), training runs (genrec-train results_name=...; generative models
over semantic IDs included), export checks (scripts/check_export.py), benchmarks (scripts/bench/bench_hstu.py,
scripts/bench/bench_kernels.py, scripts/bench/bench_beam.py, scripts/bench/bench_dynamic.py,
scripts/bench/bench_telemetry.py, scripts/bench/bench_fsdp.py, scripts/bench/bench_pipeline.py,
scripts/bench/bench_preprocess.py, scripts/bench/bench_stream.py), tokenizer runs (genrec-tokenize), the dynamic tables'
quality (scripts/recipes/reproduce_dynamic_quality.py), post-training (scripts/recipes/reproduce_post_training.sh),
streaming against offline training (scripts/analysis/stream_vs_offline.py), hyperparameter searches (genrec-train -m
hparams_search=...) and quality against CPU time (scripts/bench/bench_budget.py).

Usage: python -m scripts.docs.make_results_doc  (or `make results`)
"""
from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from genrec.utils.results import load_result  # noqa: E402
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
    "scientific": [
        "On item IDs alone neither model beats the item-to-item transitions voted by the last three items "
        "(`transitions_last3_skip`) in NDCG@10: SASRec is level with it within the test set's noise, HSTU below. "
        "What was tried: the Amazon presets of Beauty (SASRec 2 blocks, dropout 0.5; Meta's HSTU for Amazon data) "
        "with at most 100 epochs and early stopping, 3 seeds each. With the items' brand and category path as side "
        "features both beat it (SASRec 0.0862, HSTU 0.0822: the \"Side features and actions: scientific\" table "
        "below). What we think closes the rest: Scientific is small and short (8,317 users, 5-core), the regime "
        "where a transition table is strong; the next things to try are the two encoders' dropout and width and a "
        "sampled softmax with many negatives. HSTU has no timestamps here (its time bias is off).",
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
#: what the features tables rest on and what was tried (prose; the figures are in the files)
FEATURE_NOTES: dict[str, list[str]] = {
    "ml100k": [
        "The large HSTU (`hstu_large`: 8 blocks of 2 heads, 25-dimensional attention) with every feature was the "
        "next try at the +8% goal; it lands level with the published-size HSTU with features, not above it. Its "
        "three runs were stopped part-way (up to the epoch of each file's `resumes` entry, 24, 23 and 17, they ran "
        "with two torch threads per process, three processes on the 2 cores) and resumed from their last "
        "checkpoints with one thread; "
        "the other rows ran with one thread throughout.",
        "",
        "The last try was regularisation, the same change for both models: dropout 0.4 instead of the presets' 0.2 "
        "(parts `ml100k_{sasrec,hstu}_features_drop4`). It raises HSTU's validation NDCG@10 (0.1178 vs 0.1133) but "
        "lowers its test score (0.1020 vs 0.1062), and leaves SASRec's validation score level while lowering its "
        "test score (0.0954 vs 0.1011). Picking each model's configuration by validation NDCG@10, as a user would "
        "(before this table picked the best test mean), the best HSTU is the large one with every feature and the "
        "gap is +3.7%. What was tried for the +8% goal: the features (+8.5% for HSTU, +0.7% for SASRec), the large "
        "HSTU, dropout 0.4; on Beauty and Scientific HSTU stays below SASRec with and without features. What we think "
        "would close it: more data per user than ML-100K's 943 users (the published gains are on ML-1M/20M and "
        "Amazon Books, with far longer histories), and tuning both models with the same search "
        "(`hparams_search=ml100k_hstu` exists; it was not run at the presets' budget).",
        ""],
    "beauty": [
        "The Beauty 2014 copy here has titles only, so its side feature is the words of the item titles "
        "(`model.features.item=[title_terms]`: 5,504 words that at least 2 items share, 9.4 per item), under the "
        "same presets and the 40-epoch cap of the recorded Beauty runs, three seeds each. "
        "The title words lift both models and leave HSTU below SASRec, as without them. HSTU's seeds 0 and 1 "
        "reached the 40-epoch cap still improving (best epoch 39); seed 2, run in a later session, stopped early at "
        "27 epochs (best 16) with a test score between theirs (0.0565; seeds 0 and 1: 0.0573, 0.0541), so "
        "the cap is not what keeps HSTU below SASRec here.",
        ""],
}
COLUMNS = ["recall@5", "ndcg@5", "recall@10", "ndcg@10", "mrr"]
#: the margin issue 3 asks of HSTU over a tuned SASRec in NDCG@10 (Meta's README, ML-1M: HSTU +7.3%,
#: HSTU-large +18%; ML-20M: HSTU-large +29%)
GOAL_OVER_SASREC = 0.08


def _commits(runs: list[dict]) -> str:
    """The runs' commits (12 characters), ``+dirty`` where tracked files differed from the commit when the run
    started (until 2026-12-01 that included the regenerated results/ files themselves)."""
    commits = sorted({r["commit"] for r in runs})
    return ", ".join(f"`{c[:12]}{'+dirty' if c.endswith('+dirty') else ''}`" for c in commits)


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
    resumed = any(r.get("resumes") for r in runs)  # train_seconds is the last process's time only
    return f"{epochs:.0f} ({best:.0f}), {minutes:.0f} min" + (" after a resume" if resumed else "")


def _features(run: dict) -> str:
    """The side features and actions a run's model used (``model.features``), or ``"none"``."""
    features = (run.get("config", {}).get("model") or {}).get("features") or {}
    parts = (["actions"] if features.get("actions") else []) + [
        f"{kind}: {', '.join(features[kind])}" for kind in ("item", "user") if features.get(kind)]
    return " + ".join(parts) or "none"


def _label(run: dict) -> str:
    """The model name, plus how its tables were trained when sharded (those runs are reported on their own row:
    a fused sparse optimizer and a per-process batch size make them a different training setup), or for a
    generative model the semantic IDs it generates and its beam, or the side features it used."""
    if _features(run) != "none":
        return f"{run['model']} + features"
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


def _split(run: dict) -> dict:
    """The run's ``protocol.split_details`` (files written before data.split existed: leave-one-out)."""
    return run["protocol"].get("split_details", {"kind": "leave_one_out"})


def _split_sentence(run: dict) -> str:
    """How a run's data was split, and for a time split who was evaluated."""
    split = _split(run)
    if split["kind"] == "leave_one_out":
        return "Leave-one-out (last item = test, second to last = validation)"
    users, unseen = split["users_evaluated"], split["targets_not_in_training"]
    return (f"Global temporal split (`data.split.kind=time`; Sun et al., TOIS 2023): training on the "
            f"{split['training_events']:,} events before {split['valid_from_utc']} (valid_from={split['valid_from']}); "
            f"validation target: a user's first event from then to {split['test_from_utc']} "
            f"(test_from={split['test_from']}), test target: their first event from then on, each predicted from "
            f"everything before it; {users['test']:,} users tested and {users['valid']:,} validated (those with such "
            f"an event and an earlier one); {unseen['test']} test targets never occur in training (their items keep "
            "untrained rows: in effect misses)")


def _test_noise(run: dict) -> list[str]:
    """How far a time split's few test users let its recall@10 be trusted."""
    users, recall = _split(run)["users_evaluated"]["test"], run["metrics"]["test"]["recall@10"]
    return [f"Only {users} users have a test event: the binomial standard error of a recall@10 near {recall:.3f} is "
            f"{math.sqrt(recall * (1 - recall) / users):.4f}, so differences of that order are noise.", ""]


#: results of scripts/recipes/reproduce_generative_retrieval.sh, shown in their own sections (not the training tables)
GR_TAGS = ("_gr_", "_cold_", "beauty_codes_")


def _best_generative_runs(runs: list[dict], files: list[dict]) -> list[dict]:
    """``runs`` of one dataset's table with each generative model's runs replaced by a GPU run of the same model
    ranking the same way (``decoding.rank``), dataset and split (``recipe=gpu``, scripts/gpu/gpu_recipe_check.sh) where
    its validation NDCG@10 is higher than their mean: the table shows each generative model's best run, its budget
    in the row."""
    out = list(runs)
    for model in sorted({r["model"] for r in runs if "sid_table" in r}):
        cpu = [r for r in runs if r["model"] == model]
        mean = statistics.mean(r["metrics"]["valid"]["ndcg@10"] for r in cpu)
        rank = cpu[0]["decoding"].get("rank", "codes")
        gpu = [r for r in files if _on_gpu(r) and r.get("model") == model and not _post_prefix(r)
               and r["decoding"].get("rank", "codes") == rank
               and r["dataset"] == cpu[0]["dataset"] and _split(r)["kind"] == _split(cpu[0])["kind"]]
        best = max(gpu, key=lambda r: r["metrics"]["valid"]["ndcg@10"], default=None)
        if best is not None and best["metrics"]["valid"]["ndcg@10"] > mean:
            out = [r for r in out if r["model"] != model] + [best]
    return out


def _device_budget(runs: list[dict]) -> str:
    """:func:`_budget`, with the GPU and the time cap of a GPU run."""
    gpu = [r for r in runs if _on_gpu(r)]
    if not gpu:
        return _budget(runs)
    cap = gpu[0]["config"]["trainer"].get("max_time")
    return f"{_budget(runs)} on one {gpu[0]['environment']['cuda']}" + (f" (cap {cap})" if cap else "")


def training_tables(files: list[dict]) -> list[str]:
    """One table per dataset and split: models (mean ± std over seeds; a generative model by its best run, CPU or
    GPU, :func:`_best_generative_runs`), genrec-measured baselines in the same protocol, published rows
    (leave-one-out)."""
    by_dataset = defaultdict(list)
    for r in files:
        if ("metrics" in r and "test" in r.get("metrics", {}) and not _post_prefix(r)
                and SID_SOURCE_TAG not in r["name"] and not _on_gpu(r) and not any(t in r["name"] for t in GR_TAGS)):
            by_dataset[r["dataset"]["dataset"], _split(r)["kind"]].append(r)
    by_dataset = {key: _best_generative_runs(runs, files) for key, runs in by_dataset.items()}
    out = []
    for (dataset, kind), runs in sorted(by_dataset.items()):
        summary = runs[0]["dataset"]
        loo = kind == "leave_one_out"
        out += [f"## {dataset}" + ("" if loo else f", {kind} split"), "",
                f"{summary['users']:,} users, {summary['items']:,} items, {summary['interactions']:,} interactions. "
                f"{_split_sentence(runs[0])}, full-corpus ranking, "
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
                            _device_budget(model_runs)))
        first = runs[0]
        for name, metrics in first["baselines"].items():
            out.append(_row(f"{name} (baseline)", [metrics["test"]], "–", f"`results/{first['name']}.json`"))
        published = PUBLISHED.get(dataset, {}) if loo else {}
        for name, metrics in published.items():
            out.append(_row(f"*{name}*", [metrics], "–", "published, not measured here"))
        out += ["", f"Commits: {_commits(runs)}.", ""]
        resumed = sorted(r["name"] for r in runs if r.get("config", {}).get("resume_from"))
        if resumed:
            names = ", ".join(f"`results/{n}.json`" for n in resumed)
            out += [f"Resumed after an interruption (`resume_from=` the run's own `last.ckpt`, same run folder and "
                    f"seed, the config as recorded in the file): {names}; their train time counts the resumed part "
                    "only.", ""]
        out += below_baselines(by_model)
        out += comparison(dataset, by_model)
        out += NOTES.get(dataset, []) if loo else _test_noise(runs[0])
        out += _generative_notes([r for r in runs if "sid_table" in r], files, published)
    return out


#: the HSTU configurations the features tables compare with SASRec (model.name)
HSTU_MODELS = ("hstu", "hstu_large")


def _dropout(run: dict) -> float | None:
    """The run's ``model.encoder.dropout`` (the knob the features tables vary), None where not recorded."""
    return ((run.get("config", {}).get("model") or {}).get("encoder") or {}).get("dropout")


def _best_by_validation(configs: dict[str, list[dict]]) -> str | None:
    """The configuration whose runs have the best mean *validation* NDCG@10 (test scores never pick a model)."""
    return max(configs, key=lambda c: _mean(configs[c], "valid", "ndcg@10"), default=None)


def feature_tables(files: list[dict], metrics: tuple[str, ...] = ("ndcg@10", "recall@10"),
                   goal: float = GOAL_OVER_SASREC) -> list[str]:
    """SASRec and HSTU with and without side features and actions (scripts/recipes/reproduce_hstu.sh, parts *_features),
    per dataset where any run used features: test metrics (mean ± std over seeds), the baselines, and HSTU against
    SASRec given the same inputs. Where a model ran with several dropouts, each is its own row and each model's
    comparison uses its configuration with the best validation NDCG@10."""
    by_dataset = defaultdict(list)
    for r in files:
        sharded = ((r.get("config") or {}).get("sharding") or {}).get("type")
        if (r.get("model") in ("sasrec", *HSTU_MODELS) and "test" in r.get("metrics", {}) and not sharded
                and _split(r)["kind"] == "leave_one_out" and not _post_prefix(r)):
            by_dataset[r["dataset"]["dataset"]].append(r)
    out = []
    for dataset, runs in sorted(by_dataset.items()):
        if all(_features(r) == "none" for r in runs):
            continue
        dropouts = defaultdict(set)
        for r in runs:
            dropouts[r["model"]].add(_dropout(r))

        def label(r: dict) -> str:
            return r["model"] + (f", dropout {_dropout(r):g}" if len(dropouts[r["model"]]) > 1 else "")

        groups = defaultdict(list)
        for r in runs:
            groups[(_features(r), label(r))].append(r)
        kind_of = {lab: ("sasrec" if lab.split(",")[0] == "sasrec" else "hstu") for _, lab in groups}
        out += [f"## Side features and actions: {dataset}", "",
                f"SASRec and HSTU (genrec's `{dataset}_sasrec` / `{dataset}_hstu` presets, "
                "`scripts/recipes/reproduce_hstu.sh`) with and without side features (`model.features`: see README). "
                "Same protocol and budget rules as the table above; test split, best validation checkpoint, mean ± std "
                "over seeds. Train times are wall times on the 2-core machine, several runs side by side.", "",
                "| features | model | valid ndcg@10 | " + " | ".join(f"test {m}" for m in metrics) + " | seeds | "
                "epochs (best), train time | source |", "|---|---|" + "---|" * (len(metrics) + 4)]
        for (features, model), group in sorted(groups.items(), key=lambda kv: (kv[0][0] != "none", kv[0])):
            names = ", ".join(sorted(f"`results/{r['name']}.json`" for r in group))
            out.append(f"| {features} | **{model}** | {_cell([r['metrics']['valid']['ndcg@10'] for r in group])} | "
                       + " | ".join(_cell([r["metrics"]["test"][m] for r in group]) for m in metrics)
                       + f" | {', '.join(str(r['seed']) for r in group)} | {_budget(group)} | {names} |")
        first = runs[0]
        for name, b in first["baselines"].items():
            out.append(f"| – | {name} (baseline) | {b['valid']['ndcg@10']:.4f} | "
                       + " | ".join(f"{b['test'][m]:.4f}" for m in metrics)
                       + f" | – | – | `results/{first['name']}.json` |")
        out += ["", f"Commits: {_commits(runs)}.", ""]
        cut = [r for r in runs if _cut_by_budget(r)]
        if cut:
            out += ["**Stopped by an epoch budget before early stopping** (not the presets' budget of at most 100 "
                    "epochs; their scores may be low): " + ", ".join(
                        f"`results/{r['name']}.json` ({r['epochs_run']} epochs, best {r['best_epoch']})"
                        for r in sorted(cut, key=lambda r: r["name"])) + ".", ""]
        out += [f"HSTU against SASRec given the same inputs, test ndcg@10, mean over seeds (goal: the best HSTU at "
                f"least {goal:+.0%} over the best SASRec; where SASRec ran in several configurations, the one with "
                "the best validation ndcg@10):", ""]
        for features in sorted({f for f, _ in groups}, key=lambda f: (f != "none", f)):
            sasrec_key = _best_by_validation({m: g for (f, m), g in groups.items()
                                              if f == features and kind_of[m] == "sasrec"})
            hstus = sorted((m, g) for (f, m), g in groups.items() if f == features and kind_of[m] == "hstu")
            if not sasrec_key or not hstus:
                out.append(f"- {features}: not measured for both models.")
                continue
            sasrec = groups[(features, sasrec_key)]
            base = _mean(sasrec, "test", "ndcg@10")
            for model, hstu in hstus:
                score = _mean(hstu, "test", "ndcg@10")
                verdict = "goal met" if score / base - 1 >= goal else "goal **not** met"
                seeds = f"{len(hstu)} / {len(sasrec)} seed(s)"
                out.append(f"- {features}: {model} {score:.4f} vs {sasrec_key} {base:.4f} = "
                           f"**{score / base - 1:+.1%}** ({verdict}; {seeds}).")
        best = {kind: _best_by_validation({key: g for key, g in groups.items() if kind_of[key[1]] == kind})
                for kind in ("hstu", "sasrec")}
        if best["hstu"] and best["sasrec"]:
            (hf, hm), (sf, sm) = best["hstu"], best["sasrec"]
            hs, ss = _mean(groups[best["hstu"]], "test", "ndcg@10"), _mean(groups[best["sasrec"]], "test", "ndcg@10")
            verdict = "goal met" if hs / ss - 1 >= goal else "goal **not** met"
            out.append(f"- best HSTU by validation ({hm}, {hf}; {len(groups[best['hstu']])} seed(s)) {hs:.4f} vs best "
                       f"SASRec by validation ({sm}, {sf}; {len(groups[best['sasrec']])} seed(s)) {ss:.4f} = "
                       f"**{hs / ss - 1:+.1%}** ({verdict}).")
        out += ["", "Each model with features against itself without, on the seeds both have (test ndcg@10):", ""]
        for (features, model), group in sorted(groups.items()):
            plain = {r["seed"]: r for r in groups.get(("none", model), [])}
            shared = [r for r in group if r["seed"] in plain]
            if features == "none" or not shared:
                continue
            score = statistics.mean(r["metrics"]["test"]["ndcg@10"] for r in shared)
            base = statistics.mean(plain[r["seed"]]["metrics"]["test"]["ndcg@10"] for r in shared)
            out.append(f"- {model} + {features}: {score:.4f} vs {base:.4f} = **{score / base - 1:+.1%}** (seed(s) "
                       f"{', '.join(str(r['seed']) for r in shared)}).")
        out.append("")
        out += FEATURE_NOTES.get(dataset, [])
    return out


def _cut_by_budget(run: dict) -> bool:
    """Whether a run ended at ``trainer.max_epochs`` while early stopping would have let it go on."""
    config = run.get("config") or {}
    patience = ((config.get("callbacks") or {}).get("early_stopping") or {}).get("patience",
                                                                                config.get("early_stop_patience"))
    max_epochs = (config.get("trainer") or {}).get("max_epochs")
    if patience is None or max_epochs is None or "epochs_run" not in run:
        return False
    return run["epochs_run"] >= max_epochs and run["epochs_run"] - 1 - run.get("best_epoch", 0) < patience


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
    tuned one), on the mean test score over seeds; says whether the published margin (+8% NDCG@10) is reached.
    Item IDs only: runs with side features are compared in :func:`feature_tables`."""
    ids_only = {m: runs for m, runs in by_model.items() if all(_features(r) == "none" for r in runs)}  # features:
    sasrecs = {m: runs for m, runs in ids_only.items() if m.startswith("sasrec")}  # their own section
    hstus = {m: runs for m, runs in ids_only.items() if m.startswith("hstu")}
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


#: results of scripts/recipes/reproduce_post_training.sh (their own section: a reduced dataset, stages vs their control)
#: results of scripts/recipes/reproduce_beauty_sid_sources.sh (<dataset>_sidsrc_<source>_seed<S>): their own table
SID_SOURCE_TAG = "_sidsrc_"


#: what the SID-source comparison rests on (prose; the figures are in the files)
SID_SOURCE_NOTES = {"beauty": [
    "The budget is far below convergence (the decoder-only row of the Beauty table trained longer): compare the rows "
    "with each other, not with that row.", "",
    "Reading (one seed, 10 epochs = 1,750 steps each): semantic IDs from the SASRec item table beat text IDs by a "
    "third in NDCG@10 (0.0273 vs 0.0203) and the fused embedding falls between (0.0235), ahead of text at every "
    "validation epoch, so collaborative signal in the codes is worth more to this generator than item text. The text "
    "table is the one the decoder-only row of the table above trained on (same content hash, `b06a75b956ec184f`).",
    "",
    "Code layout (`LAYOUT=rkmeans_balanced`): balanced residual k-means caps every code at 48 items at every level, "
    "where RQ-VAE's first level holds up to 170 items per code on text and 109 on the collaborative table. On text "
    "it lifts NDCG@10 by a fifth (0.0245 against 0.0203), although it leaves more items to the collision level "
    "(17% against 5% of items collide); on the collaborative embedding it is level with RQ-VAE (0.0269 against "
    "0.0273; the Beauty post-training table's SFT rows, the same generator and budget on a second RQ-VAE table, "
    "reach 0.0266 and 0.0258 at seeds 1 and 2). So the layout matters where RQ-VAE spreads the items unevenly over "
    "its first-level codes, and collaborative IDs stay the best source with either layout. RQ-VAE with a learned "
    "fourth level instead of the collision level (`LAYOUT=rqvae4`, 4 x 256; the 35 items, 0.3%, that still "
    "collide move to the nearest free last-level code) is level too: 0.0277 / 0.0541 against 0.0273 / 0.0539. The "
    "collaborative balanced and 4-level tables were made from a SASRec re-trained with the same preset and seed in "
    "a later session (its test NDCG@10 equals the recorded teacher's to every digit).",
    "",
    "Defaults: the tokenizer's default encoder stays `text`, because `collaborative` needs a trained sequence model "
    "of the same data (`encoder.run_dir`); the Beauty generative recipes use collaborative RQ-VAE IDs on this "
    "evidence. For text embeddings balanced residual k-means is the better quantiser here, but on one seed at a "
    "budget far below convergence; the default quantiser stays RQ-VAE with TIGER's layout (3 x 256 + a collision "
    "level) until more seeds say otherwise. Not measured: more seeds, other fusion weights (`encoder.weights`), and "
    "any of these at convergence, where the generator is still below SASRec and the transition baselines.", ""],
    "scientific": [
        "Reading (one seed; at most 25 epochs with early stopping, patience 5: the text run stopped after 23 epochs, "
        "best 17). The collaborative table is the one the Scientific post-training section made from its SASRec "
        "teacher. Its SFT rows use the same preset and budget: at seed 0, 0.0546 NDCG@10 / 0.0826 recall@10, "
        "against 0.0500 / 0.0773 for text IDs (+9%). The mean over three seeds is 0.0556. Collaborative IDs win "
        "again, by less than Beauty's third (perhaps because Scientific's item text, with its title, brand, category "
        "path and description, says more about the item; not measured). Neither source reaches SASRec or the "
        "transition baselines.", ""]}


def _sid_source_label(tokenize: dict) -> str:
    """A SID table's item embedding, and its code layout where it is not the default RQ-VAE + collision level."""
    layout = f"{tokenize['tokenizer']['name']}, {tokenize['collisions']}"
    return tokenize["encoder"]["name"] + ("" if layout == "rqvae, extra_level" else f" ({layout})")


def sid_source_tables(files: list[dict]) -> list[str]:
    """The generator at one budget over SID tables made from different item embeddings (text, collaborative,
    fused; scripts/recipes/reproduce_beauty_sid_sources.sh), per dataset, beside the baselines and SASRec of the
    protocol."""
    by_dataset = defaultdict(list)
    for r in files:
        if SID_SOURCE_TAG in r.get("name", "") and "test" in r.get("metrics", {}):
            by_dataset[r["dataset"]["dataset"]].append(r)
    out = []
    for dataset, runs in sorted(by_dataset.items()):
        by_source = defaultdict(list)
        for r in sorted(runs, key=lambda r: r["seed"]):
            by_source[_sid_source_label(r["sid_table"]["tokenizer"])].append(r)
        first = runs[0]
        epochs = sorted({r["config"]["trainer"]["max_epochs"] for r in runs})
        out += [f"## Semantic-ID source for generative retrieval: {dataset}", "",
                f"`scripts/recipes/reproduce_beauty_sid_sources.sh`: the {first['model']} generator (its preset) "
                "trained with "
                f"the same budget (at most {', '.join(map(str, epochs))} epochs; best validation checkpoint) on "
                "semantic-ID tables that differ in the item embedding RQ-VAE quantises (3 x 256 codes + a "
                "collision level, seed 0): item text (MiniLM), the item table of a SASRec trained on the same "
                "split (collaborative), or both side by side (fused); a layout in brackets replaces RQ-VAE (its "
                "quantiser, collision handling and the codebook sizes in the row). Beam 20 constrained by the "
                "prefix trie. "
                "Leave-one-out, full-corpus ranking, history removed; test split.", "",
                "| SID source (codebooks) | " + " | ".join(COLUMNS) + " | seeds | epochs (best), train time | invalid "
                "| source |", "|---|" + "---|" * (len(COLUMNS) + 4)]
        for source, group in sorted(by_source.items()):
            sizes = "x".join(str(k) for k in group[0]["sid_table"]["codebook_sizes"])
            names = ", ".join(f"`results/{r['name']}.json`" for r in group)
            tests = [r["metrics"]["test"] for r in group]
            invalid = _cell([m["invalid_rate"] for m in tests if "invalid_rate" in m])
            out.append(_row(f"**{source}** ({sizes})", [r["metrics"]["test"] for r in group],
                            ", ".join(str(r["seed"]) for r in group), invalid, _budget(group)) + f" {names} |")
        sasrec = [r for r in files if r.get("model") == "sasrec" and "test" in r.get("metrics", {})
                  and r["dataset"]["dataset"] == dataset and _label(r) == "sasrec"
                  and _split(r)["kind"] == "leave_one_out" and not _post_prefix(r)]
        if sasrec:
            out.append(_row("SASRec (table above)", [r["metrics"]["test"] for r in sasrec],
                            ", ".join(str(r["seed"]) for r in sasrec), "–", _budget(sasrec))
                       + " " + ", ".join(f"`results/{r['name']}.json`" for r in sasrec) + " |")
        for name, metrics in first["baselines"].items():
            out.append(_row(f"{name} (baseline)", [metrics["test"]], "–", "–")
                       + f" `results/{first['name']}.json` |")
        out += ["", f"Commits: {_commits(runs)}.", ""]
        out += below_baselines({f"{s} SIDs": g for s, g in by_source.items()})
        out += SID_SOURCE_NOTES.get(dataset, [])
    return out


#: results-file prefix of scripts/recipes/reproduce_post_training.sh -> the data it ran on (DATASET=beauty:
#: beauty_post_)
POST_PREFIXES = {"post_": "synthetic", "beauty_post_": "beauty", "scientific_post_": "scientific"}
#: the Amazon datasets the script runs on (its DATASET) -> their names in prose
AMAZON_NAMES = {"beauty": "Amazon Beauty 2014", "scientific": "Amazon Industrial & Scientific 2018"}
POST_STAGES = {"sasrec": "SASRec (the teacher; its item table made the SIDs)", "sft": "SID-GPT, SFT",
               "sft_cosine": "SID-GPT, SFT with a cosine learning-rate decay",
               "sft_cosine_items": "SID-GPT with item-ID inputs, SFT with a cosine learning-rate decay",
               "sft_conv": "SID-GPT, SFT to early stopping",
               "sft_distill": "SID-GPT, SFT with distillation from SASRec from the first step",
               "sft_items": "SID-GPT with an item head re-ranking its beam, SFT",
               "sft_items_distill": "SID-GPT with an item head re-ranking its beam, SFT with distillation from SASRec "
                                    "from the first step",
               "sft_items_tied": "SID-GPT with item-ID inputs and an item head tied to them, re-ranking its beam, SFT",
               "sft_items_tied_distill": "SID-GPT with item-ID inputs and an item head tied to them, re-ranking its "
                                         "beam, SFT with distillation from SASRec from the first step",
               "sft_items_tied_hdistill": "SID-GPT with item-ID inputs and an item head tied to them, re-ranking its "
                                          "beam, SFT with distillation from SASRec into the codes and the item head "
                                          "from the first step",
               "sft_items_tied_hdistill_cosine": "SID-GPT with item-ID inputs and an item head tied to them, "
                                                 "re-ranking its beam, SFT with distillation from SASRec into the "
                                                 "codes and the item head from the first step, cosine learning-rate "
                                                 "decay",
               "sft_more": "SFT + continued SFT (control)", "dpo": "SFT + DPO (1 negative)",
               "sdpo": "SFT + S-DPO", "sdpo_sft": "SFT + S-DPO with the next-token loss (sft_weight 1)",
               "sdpo_sft_beam": "SFT + S-DPO with the next-token loss, beam (hard) negatives",
               "sdpo_beam": "SFT + S-DPO, beam (hard) negatives",
               "sdpo_seq_beam": "SFT + S-DPO + the control's next-token loss, beam (hard) negatives",
               "sdpo_seq": "SFT + S-DPO + the control's next-token loss",
               "sdpo_seq_dropout": "SFT + S-DPO + the control's next-token loss, dropout on as in the control",
               "sdpo_seq_beta1": "SFT + S-DPO (beta 1) + the control's next-token loss",
               "sdpo_all": "SFT + S-DPO, preference examples at every position",
               "sdpo_seq_all": "SFT + S-DPO with preference examples at every position + the control's next-token "
                               "loss",
               "sdpo_sampled": "SFT + S-DPO, negatives sampled from the SFT model",
               "sdpo_seq_sampled": "SFT + S-DPO + the control's next-token loss, negatives sampled from the SFT model",
               "sdpo_seq_rank": "SFT + S-DPO on the ranking scores + the control's next-token loss",
               "sdpo_seq_rank_beam": "SFT + S-DPO on the ranking scores + the control's next-token loss, the "
                                     "model's own top recommended wrong items as negatives",
               "sdpo_seq_rank_beam_skip10": "SFT + S-DPO on the ranking scores + the control's next-token loss, the "
                                            "model's own recommended wrong items ranked 11-18 as negatives",
               "sft_more_nodrop": "SFT + continued SFT without dropout (as the alignment stages train)",
               "distill": "SFT + distillation from SASRec",
               "llm_full": "LLM backbone (llama, random init), full fine-tuning",
               "llm_lora": "LLM backbone (llama, random init), LoRA"}
#: the preference-alignment stages (POST_STAGES keys), in table order
ALIGN_STAGES = ("dpo", "sdpo", "sdpo_beam", "sdpo_sft", "sdpo_sft_beam", "sdpo_seq", "sdpo_seq_beam",
                "sdpo_seq_dropout", "sdpo_seq_beta1", "sdpo_all", "sdpo_seq_all", "sdpo_sampled", "sdpo_seq_sampled",
                "sdpo_seq_rank", "sdpo_seq_rank_beam", "sdpo_seq_rank_beam_skip10")
#: run-name suffixes of the script's variants (its SFT_TAG and STAGE_TAG) after a POST_STAGES name -> what they change
POST_TAGS = {"_conv": "from an SFT run trained to early stopping", "_lr5e-5": "lr 5e-5", "_ep12": "12 epochs",
             "_distill": "from SFT with distillation",
             "_items_tied_hdistill": "from the tied item-head SFT run distilled into codes and head",
             "_guided05": "trained and selected under the beam steered by the item head at code weight 0.5",
             "_guided0": "trained and selected under the beam steered by the item head at code weight 0"}
#: what the post-training figures rest on, and what we would try next (prose; the figures are in the files)
POST_NOTES = {
    "scientific": [
        "Reading (3 seeds; `DATASET=scientific SFT_EPOCHS=25 STAGE_EPOCHS=5 STAGE_LR=5e-4`, 5 stage epochs = 325 "
        "steps of batch 128). Unlike the Beauty runs, SFT here stopped early (patience 5, after 21-24 epochs), so it "
        "is trained to convergence. It reaches 0.0556 ± 0.0010 NDCG@10, 70% of the best baseline "
        "(`transitions_last3_skip`, 0.0793). Continuing next-token training no longer helps: the matched control "
        "(no dropout) picks its first epoch and ends at 0.0544. Distillation from the SASRec teacher is the one "
        "stage that gains. It beats that control on every seed (+10.4%; +7.9% over the SFT checkpoint), reaching "
        "0.0600 / recall@10 0.0900, and its best epoch is the fourth of five, so it was still improving. It still "
        "stays below the transition baseline and SASRec (0.0802). DPO and S-DPO on popularity negatives fall below "
        "the control (-16.8% and -21.5%), with a negative chosen log-ratio (-1.9 and -2.9 nats): the failure seen on "
        "Beauty and the synthetic log. S-DPO plus the control's loss keeps the chosen item's likelihood up (+0.75 "
        "nats), yet it is still -2.7% (-4.9%, -2.8%, -0.4%). So the +5% goal is not met on Scientific either. "
        "Longer distillation (`STAGE_TAG=_ep12 STAGE_EPOCHS=12`, seed 0) keeps improving on validation (best epoch "
        "10 of 12) but not on test: 0.0605 against 0.0603 after 5 epochs. Its control stops early at its first "
        "epoch, 0.0529 as before. So the distillation gain is about +8% over SFT and levels off well below the "
        "teacher it learns from. Not run here, for lack of time: the beam, sampled and every-position arms, and the "
        "control with dropout.", "",
        "Distillation from the first step of SFT (`SFT_TAG=_distill SFT_OVERRIDES=\"distill=teacher "
        "distill.teacher=<teacher run>\"`, the same 25-epoch cap and patience; four runs side by side, so its train "
        "times are twice the others') learns faster: validation NDCG@10 0.044-0.045 after two epochs against 0.031 "
        "for plain SFT (seed 0). It ends at 0.0595 ± 0.0028 (+11.9%, +8.5%, +1.0% over SFT of the same seed). Seeds "
        "0 and 1 were still improving at the cap (best epoch 23 of 25). Seed 2 was stopped by patience after a noisy "
        "validation peak at epoch 8. So distilling from the start and distilling after SFT reach the same level, "
        "about 0.060. From the distilled checkpoints, the three stages move little. The matched control (continued "
        "SFT, no dropout) reaches 0.0591 ± 0.0008. Another 5 epochs of distillation reach 0.0599 ± 0.0033 (+1.3% "
        "over that control). S-DPO plus the control's loss reaches 0.0573 ± 0.0009 (-4.2%, -3.9%, -0.9%; mean "
        "-3.0%). As from plain SFT, it keeps the chosen item's likelihood up (+0.82 nats) and lowers the held-out "
        "target's (test log p(target) -10.98 against -9.68). A stronger SFT model does not change the S-DPO "
        "reading. Re-running the teacher and SFT seed 0 on a fresh machine reproduced their recorded "
        "validation and test metrics exactly.", "",
        "An item head beside the codes (`SFT_TAG=_items SFT_OVERRIDES=\"model.generator.item_head=true "
        "model.decoding.rank=hybrid\"`, and `SFT_TAG=_items_distill` with the distillation overrides added; the same "
        "25-epoch cap and patience; up to six runs side by side, so their train times are inflated): a full softmax "
        "over the 4,344 items from the state before an item's first code, trained with the next-token loss (LIGER's "
        "idea of scoring items as well as codes), and the beam of 20 re-ranked by the sum of the code and item-head "
        "log-probabilities. With distillation it is the best generative model on Scientific so far: 0.0626 ± 0.0013 "
        "(+2.2%, +4.3%, +9.0% over distillation without the head, mean +5.2%). Without distillation the gain is "
        "smaller and not consistent (+6.5%, -2.6%, +3.2%). The head costs 556,160 parameters (one row per item). "
        "Both stay below the best baseline (`transitions_last3_skip`, 0.0793) and the teacher (0.0802): the best "
        "row reaches 79% of the baseline. The next section ranks the same checkpoints other ways.", ""],
    "synthetic": [
        "Reading: the SFT runs were cut at 8 epochs while still improving, so continuing next-token training is a "
        "strong control (+6% NDCG@10 over the SFT checkpoint in 3 epochs). Distillation from SASRec beats it on every "
        "seed. DPO and S-DPO (β 0.1, popularity negatives, no next-token term: `align.sft_weight` 0) do not: their "
        "best validation epoch was the first of three, and they end slightly below the SFT checkpoint they started "
        "from. The table below shows why: the rejected items' likelihood fell, but so did the chosen item's (a "
        "negative chosen log-ratio) and the held-out target's (test log p(target)), the known DPO failure. Two fixes "
        "were tried against the same control (re-run from the same SFT checkpoints, which a re-run reproduced bit for "
        "bit): adding the chosen item's next-token loss (`align.sft_weight` 1) stops the chosen item's likelihood "
        "falling (its log-ratio turns positive) and halves the loss against the control (-4.9% instead of -8.1%), "
        "still below it; taking the negatives from the SFT model's own beam (hard negatives) makes it far worse "
        "(-15.5%), with the largest reward margins of all: it pushes down exactly the items the model ranks highest "
        "after the chosen one (whether those are items the user takes later was not measured). A stage has one "
        "preference example per user (the last training item), where continued SFT learns from every position of "
        "every training sequence, so the next attempt kept the control's own loss and added S-DPO to it "
        "(`align.sft_target=sequence`: the stage's loss is exactly the control's plus the S-DPO term, a test checks "
        "it). That arm beat the control on every seed (+3.3%), but it also trains without dropout, as every alignment "
        "stage does by default (TRL's setting, so that policy and reference log-probabilities compare), and the "
        "control does not. Two more arms separated the two: continued SFT without dropout alone gains +4.2%, and the "
        "S-DPO term with dropout kept on gains +0.5% (+2.3%, -0.2%, -0.6%); against the matched control (no dropout) "
        "S-DPO plus the control's loss is -0.9% and at β 1 -6.5%. So on this data the S-DPO term adds nothing "
        "measurable to next-token training, and every earlier alignment figure above flattered alignment: its matched "
        "control is 4% stronger. On Beauty: the next section.", "",
        "Four more attempts, in a later session, from SFT checkpoints re-trained there (SFT at every seed, and the "
        "matched control and S-DPO plus the control's loss at seed 0, reproduced the recorded test metrics bit for "
        "bit, so the new stages compare with the recorded controls). (1) Preference examples at every position "
        "(`align.positions=all`): every prefix of every training sequence is a prompt and its next item the chosen "
        "one, 8 popularity "
        "negatives each, 30,874 examples instead of 2,000, each with its cached reference log-probabilities; "
        "genrec's SASRec stack scores them in one pass per sequence by branching its KV cache (tests check it "
        "against one prompt per prefix), about 2.5 min a stage against 40-80 s. S-DPO alone at every position stays "
        "below the matched control (-10.2%, against -11.8% with the last position only; its chosen log-ratio is "
        "negative again), and with the control's loss it is level (+0.1%: +0.9%, -0.0%, -0.7%). (2) A learning rate "
        "of 1/40 of SFT's (5e-5 after 2e-3, the ratio of LLM recipes; `STAGE_TAG=_lr5e-5`): there the control "
        "itself ends 6-8% below the control at 5e-4, and S-DPO plus the control's loss is level with its own "
        "control (+0.8%; at every position -0.1%), so a lower rate only slows both. (3) Alignment after SFT to "
        "early stopping (`SFT_TAG=_conv SFT_EPOCHS=100`, patience 5: 25 to 31 epochs): SFT reaches 0.1140 ± 0.0025 "
        "(0.0927 after 8 epochs), level with the best baseline (0.1155, within the test set's noise; its recall@10 "
        "0.228-0.232 against 0.225); three more epochs without dropout still add +1.9% (0.1161), and S-DPO plus the "
        "control's loss falls below them (-3.6%; at every position -2.7%). (4) Negatives sampled from the SFT model "
        "(`align.negatives=sampled`: ancestral sampling constrained to valid semantic IDs, 32 draws per example, "
        "the first 8 distinct items that are not the user's training items): S-DPO alone falls further than with "
        "popularity negatives (-18.5% against -11.8%), and with the control's loss it is level (+0.7%: +1.6%, "
        "+2.6%, -2.1%). The samples hold the user's own validation or test target in 12-13% of the examples "
        "(popularity negatives: 1.9%; the table at the end of this section), the kind of false negatives the beam "
        "showed on Beauty. None of the S-DPO arms reaches the +5% goal: on this data the S-DPO term, with "
        "popularity, beam or sampled negatives, its examples at the last position or at every one, at either "
        "learning rate, before or after convergence, adds nothing measurable to next-token training over the full "
        "code softmax.", "",
        "The generator on a small random-initialised llama (`backbone=hf_vocab`, full fine-tuning, one seed, 5 "
        "epochs, still improving) is level with the best baseline within the test set's noise (standard error "
        "above), as the GPT stack is once trained to early stopping (previous paragraph); it also beats the GPT-stack "
        "SFT runs cut at 8 epochs, which differ in the stack (dropout 0.1, learned positions, GELU vs llama's "
        "RMSNorm, rotary positions, SwiGLU, no dropout), not only in the epochs. LoRA on the same random base "
        "(rank-8 adapters + the SID token rows: 14,656 trainable parameters of 216,512, 7%), same data, SIDs and "
        "epochs (stopped after epoch 1 in an earlier session, resumed from its last checkpoint at a later commit), "
        "reaches NDCG@10 0.1003 against full fine-tuning's 0.1164 (-14%; one seed), below the best baseline "
        "(transitions_last3_skip, 0.1155). On a random base the adapters have no pretrained knowledge to steer, so "
        "this measures what LoRA's capacity costs, not what it costs on a pretrained LLM (no weights can be "
        "downloaded here).", ""],
    "beauty": [
        "Reading (three seeds of SFT, the matched control, distillation, S-DPO and S-DPO with the control's loss; DPO "
        "and the beam-negative arms at seeds 1 and 2; lr 5e-5 at seed 1; the dropout-on control and the cosine runs "
        "at seed 0). Seed 0's teacher and SID table are "
        "the SID-source table's (hash f08ea13651cddc01; its SFT run reproduces that table's collaborative row bit "
        "for bit). Seeds 1 and 2 ran in a later session on a fresh machine: the teacher, re-trained there with the "
        "same preset and seed, reached the same test NDCG@10 to every digit (its MRR differs by 7e-9), but RQ-VAE's "
        "100 epochs turned that difference into another table (hash 1368ffed5aa1be33, 16 collision codes against 17, "
        "hence 128 fewer parameters), so seeds 1 and 2 vary the SID table as well as the generator's seed. Three more "
        "epochs of next-token training lift SFT by +11% (0.0304, seed 0) and by +11% to +13% without dropout (every "
        "seed), so on Beauty too the SFT checkpoint was far from converged.", "",
        "Distillation from SASRec (weight 1, the teacher's top 100 items per position, dropout on as in SFT) is level "
        "with continued next-token training: 0.0296 ± 0.0010 over three seeds, +0.9% over its dropout-matched "
        "control at seed 0 and -0.3%, -0.4%, -0.7% against the control without dropout; its test log p(target) is "
        "lower (-11.0 to -11.1 against -10.5), the teacher's flatter distribution. The synthetic log's +3.1% does not "
        "carry over to Beauty at this budget.", "",
        "Preference alignment without a next-token term collapses, with one negative as with eight: DPO (one "
        "popularity negative, seeds 1 and 2) reaches 0.0194 (-31.9%, -35.2% against the matched control), S-DPO "
        "(eight) 0.0203 ± 0.0008 (-36.8%, -29.6%, -28.2%, mean -31.5%); both are best after their first epoch at "
        "every seed. The chosen item's log-ratio is negative (DPO -5.4 nats, S-DPO -8.1, mean over seeds: the known "
        "DPO failure, the chosen item becomes far less likely, the rejected ones even more so) and the test target's "
        "log-probability falls to -18.2 and -22.7 (the control: -10.5). S-DPO plus the control's own loss "
        "(`align.sft_target=sequence`, the best arm of the synthetic study) no longer collapses but stays below its "
        "matched control at every seed: 0.0286 ± 0.0013, -2.2%, -5.2%, -4.5% (mean -4.0%). On the training examples "
        "it does what it is built to do (chosen log-ratio +0.83 nats, rejected -7.7, reward accuracy 0.69), while the "
        "held-out target becomes less likely (test log p(target) -12.7 against -10.5): pushing popular items down "
        "also pushes down the items users take next.", "",
        "Negatives from the SFT model's own beam (hard negatives; seeds 1 and 2, S-DPO alone at seed 1) are far worse "
        "than popularity negatives: S-DPO alone collapses (0.0006; chosen log-ratio -19.8 nats) and S-DPO plus the "
        "control's loss reaches 0.0160 and 0.0195 (-46%, -33% against the matched control) although its test log "
        "p(target), -12.4 and -12.2, stays near the popularity arm's -12.7. The last table of this section says why: "
        "the beam's top wrong items for the training prompt contain the user's own validation or test target in 7.4% "
        "and 7.2% of the examples (popularity negatives: 0.3% and 0.4%), more users than the SFT model finds in its "
        "top 10 at all (test recall@10 0.052). A model's top wrong guesses for one position are largely the items "
        "that user takes next, so in next-item data beam negatives are false negatives by construction, and the stage "
        "cannot drop them without reading the held-out split. At a tenth of the stages' learning rate (5e-5, seed 1, "
        "`STAGE_TAG=_lr5e-5`) continued SFT without dropout reaches the same test NDCG@10 as at 5e-4 (0.0297 and "
        "0.0296), and S-DPO plus its loss is level with it (0.0297, +0.0%): at that rate the S-DPO term barely moves "
        "the preferences (reward accuracy 0.43, rejected log-ratio -1.9 nats against -7.8 at 5e-4) and still lowers "
        "the held-out target's likelihood (test log p(target) -11.2 against -10.6).", "",
        "Why we do not expect S-DPO to beat this control here (a reading, not measured beyond the rows above): the "
        "generator's next-token loss is already a full softmax over every code at every position of every training "
        "sequence, the objective S-DPO approximates with a few sampled negatives for one position per user; in the "
        "S-DPO paper the SFT baseline is an LLM tuned on prompts with a candidate list, which never saw a softmax "
        "over the items. A learning rate at 1/40 of SFT's (LLM recipes run DPO there, e.g. Zephyr's 5e-7 after 2e-5), "
        "preference examples at every position and alignment after SFT to early stopping were tried on the synthetic "
        "log only (previous section: none helps), as were negatives sampled from the model's distribution (level "
        "with the control when added to its loss; they hold the user's held-out target far more often than "
        "popularity negatives). Every generative row stays far below "
        "SASRec (0.0555) and the best baseline (transitions_last3_skip, 0.0500); the next sections measure why. Not "
        "run on Beauty (time): the dropout-on control at seeds 1 and 2, the beam-negative arms at seed 0 (its SFT "
        "checkpoint was not kept), lr 5e-5 at seeds 0 and 2.", "",
        "An item head re-ranking the beam (seed 0, 10 epochs as plain SFT) is the largest gain measured on Beauty. "
        "Alone (`SFT_TAG=_items`, best after epoch 9, 40 min) it reaches test NDCG@10 0.0308, +12.8% over plain SFT "
        "at the same seed and epoch cap; trained with distillation from SASRec from the first step "
        "(`SFT_TAG=_items_distill`, best after epoch 8, 43-45 min) 0.0332, +21.6%, the best generative row on "
        "Beauty, above the cosine-schedule runs at twice the epochs (0.0320). Between the two, on the same SID table "
        "and seed, distillation adds +7.7% (without a head, as a 3-epoch stage after SFT, it was level with continued "
        "SFT). Their teacher was "
        "re-trained on a fresh machine (the same test NDCG@10 to every digit again) and RQ-VAE made the seed 1-2 "
        "table from it (hash 1368ffed5aa1be33), not seed 0's, so against plain SFT on that table (seeds 1 and 2: "
        "0.0266, 0.0258) the gains are +16% and +19% (head) and +25% and +29% (head and distillation). The distilled "
        "run was trained twice, in two sessions on fresh machines, teacher and SID table included: every test metric "
        "came out the same to every digit. The head adds 1,549,056 parameters (one 128-wide row per item). One seed "
        "each; both rows are still far below the best baseline (0.0500) and SASRec (0.0555).", "",
        "Tying the item head to item-ID inputs (`SFT_TAG=_items_tied`: `model.generator.item_inputs=true "
        "model.generator.tie_item_tables=true`, each history item's own row, added at its last code token, is also "
        "the row the item head scores it with, as SASRec ties its input and output item embeddings) is the largest "
        "step measured on Beauty: alone 0.0370 (+20.2% over the head with a table of its own), with distillation "
        "0.0412 (+24.4%); best after epoch 9 of 10 each, at the same parameter count (the "
        "input rows replace the head's). Untied, item-ID inputs ended level with the run without them (0.0320 both, "
        "above) and their rows over-fitted the first code; tied, the head's full softmax trains every row at every "
        "position. Distilling the teacher's top 100 items into the item head as well "
        "(`SFT_TAG=_items_tied_hdistill`: `distill.item_head_weight=1`) adds +5.6% at seed 0: 0.0435, recall@10 "
        "0.0725; over 3 seeds 0.0430 ± 0.0004 (recall@10 0.0723 ± 0.0004), the best row ranked by its own beam, "
        "14% below the best baseline (its item head steering the beam is above it: the ranking comparison below). "
        "A cosine learning-rate decay over the same 10 epochs (`_items_tied_hdistill_cosine`) does not help: 0.0418 "
        "(-3.9%). All on the seed 1-2 SID table as the other item-head rows; seed 0 only except `_items_tied_hdistill`. "
        "The four seed-0 runs trained two at a time beside rankings and a CI run, so their train times are "
        "inflated; seeds 1 and 2 of `_items_tied_hdistill` trained side by side in a later session (47 min each).",
        "",
        "S-DPO on the scores the model ranks by (`sdpo_seq_rank`: `align.score=ranking`, S-DPO plus the control's "
        "loss, 8 popularity negatives, beta 0.1; 3 seeds from the `_items_tied_hdistill` checkpoints, "
        "`STAGE_EPOCHS=2 STAGE_LR=5e-4`). Both arms rank with the beam steered by the item head at code weight 0.5, "
        "where the codes still count, and pick their epoch on validation under that ranking; the rewards compare "
        "0.5 x code plus item-head log-probability, the order the model recommends in, where the earlier arms "
        "compared the codes alone. It stays level with its matched control: test NDCG@10 0.0526 ± 0.0001 against "
        "0.0527 ± 0.0004 (per seed +0.1%, -1.4%, +0.7%), and both are level with their starting checkpoints under "
        "the same ranking (0.0524 ± 0.0011, ranking comparison below); both took their first stage epoch as best. "
        "The S-DPO term does move the training preferences, without DPO's failure: the chosen item's score rises "
        "(log-ratio +1.28 nats), the rejected ones fall (-0.35), while the held-out target's code log-probability "
        "falls (test log p(target) -12.15 against -11.68). Ranked by the item head alone (`rank=guided`, code weight "
        "0, below) S-DPO is +1.2% over the control (0.0553 ± 0.0008 against 0.0547 ± 0.0006; per seed -0.3%, "
        "+2.6%, +1.5%; recall@10 +2.1%), but both are below the SFT checkpoints they started from (0.0569 ± 0.0004): "
        "the epoch that validation at code weight 0.5 picks costs the head's own ranking about 3%. So on Beauty "
        "S-DPO does not reach +5% over continued SFT whichever score it aligns; the item head's full softmax "
        "already trains on every item at every position, which a few sampled negatives per user cannot add to. "
        "S-DPO took 22 min per seed (about 8 of them the reference pass over 22,363 examples), the control 8 min, "
        "two processes side by side. One more pair at seed 0, trained and selected at code weight 0 (the item head "
        "alone) with a tenth of the learning rate (`STAGE_TAG=_guided0_lr5e-5`): S-DPO 0.0569 against its control's "
        "0.0563 (+1.1%; the SFT checkpoint under that ranking: 0.0566), but its reward margin on the training "
        "examples stays at 0.00002: at that rate the S-DPO term barely acts, and the difference is of the size the "
        "seeds above differ by. Not run at seeds 1 and 2 (time).",
        "",
        "Hard negatives on the ranking scores (`sdpo_seq_rank_beam`: the same stage with `align.negatives=beam`, "
        "which under `score=ranking` takes the first 8 items of the list the model recommends, its beam steered by "
        "the item head at code weight 0.5, that are not the user's training items), 3 seeds: test NDCG@10 0.0491 ± "
        "0.0002 against its control's 0.0527 ± 0.0004 (per seed -6.5%, -8.1%, -5.9%), and below the S-DPO arm "
        "with popularity negatives (0.0526). Re-ranked by the item head alone (code weight 0) seed 0 stays below "
        "its control too (0.0517 against 0.0552). The S-DPO term acts strongly here, unlike with popularity "
        "negatives: on the training examples its reward accuracy is 0.77 (0.41-0.47 with popularity negatives) and "
        "the rejected items' log-ratio -2.0 to -2.15 nats (-0.26 to -0.48). But what it pushes down is often what "
        "the user does next: 10.7-10.9% of the examples reject the user's own validation or test target (4.6-4.7% "
        "the test target), against 0.4% with popularity negatives (the held-out table below). The stage cannot "
        "exclude those items without reading held-out data, so hard negatives from the model's own ranking hurt "
        "more than they teach here. 46-54 min a seed, three stages sharing the 2 cores.",
        ""]}
#: SFT variants against the training they change one thing of: (the paragraph's intro, [(control, variant), ...])
SFT_COMPARISONS = [
    ("Distillation from the first step against plain SFT (same seed, learning rate and epoch cap; early stopping may "
     "end either first; the student's compute per step is the same):", [("sft", "sft_distill")]),
    ("The item head tied to item-ID inputs (`model.generator.item_inputs=true model.generator.tie_item_tables=true`) "
     "against the item head with a table of its own (same seed, learning rate, epoch cap and SID table):",
     [("sft_items", "sft_items_tied"), ("sft_items_distill", "sft_items_tied_distill")]),
    ("Distillation into the item head as well (`distill.item_head_weight=1`) against distillation into the codes "
     "alone, and a cosine learning-rate decay against the constant rate (same seed, epoch cap and SID table):",
     [("sft_items_tied_distill", "sft_items_tied_hdistill"),
      ("sft_items_tied_hdistill", "sft_items_tied_hdistill_cosine")]),
]
#: the margin issue 16 asks of S-DPO over continued SFT in NDCG@10
GOAL_SDPO = 0.05


def _post_prefix(run: dict) -> str | None:
    """The post-training prefix of a results file's name (longest match), None for other files."""
    return max((p for p in POST_PREFIXES if run.get("name", "").startswith(p)), key=len, default=None)


def _stage(run: dict) -> str:
    return run["name"][len(_post_prefix(run)):run["name"].rindex("_seed")]


def _split_tags(stage: str) -> tuple[str, list[str]]:
    """A stage's name -> its POST_STAGES name and the POST_TAGS suffixes after it (``sdpo_seq_conv_lr5e-5`` ->
    ``sdpo_seq``, ``[_conv, _lr5e-5]``); an unknown name comes back whole."""
    base, tags = stage, []
    while base not in POST_STAGES:
        tag = next((t for t in POST_TAGS if base.endswith(t)), None)
        if tag is None:
            return stage, []
        base, tags = base[:-len(tag)], [tag, *tags]
    return base, tags


def _stage_label(stage: str) -> str:
    base, tags = _split_tags(stage)
    return POST_STAGES.get(base, stage) + "".join(f", {POST_TAGS[t]}" for t in tags)


def _stage_order(stage: str) -> tuple[int, list[str]]:
    """Table order: by POST_STAGES, each stage's tagged variants after it."""
    base, tags = _split_tags(stage)
    return list(POST_STAGES).index(base) if base in POST_STAGES else len(POST_STAGES), tags


def _stages_of(by_stage: dict[str, list[dict]], bases) -> list[str]:
    """The stages of ``by_stage`` whose POST_STAGES name is one of ``bases``, in table order."""
    return sorted((s for s in by_stage if _split_tags(s)[0] in bases), key=_stage_order)


def _dropout_off(run: dict) -> bool:
    """Whether a post-training run trained without dropout (an alignment stage's default, or the control
    ``sft_more_nodrop``)."""
    return bool((run.get("align") or {}).get("disable_dropout")) or _stage(run).startswith("sft_more_nodrop")


def _add_comparisons(out: list[str], by_stage: dict[str, list[dict]], comparisons: list) -> None:
    """Append each of ``comparisons`` (:data:`SFT_COMPARISONS` entries) that has a pair of runs to ``out``."""
    for intro, pairs in comparisons:
        lines = [line for control, stage in pairs for line in _against_control(by_stage, control, stages=(stage,))]
        if lines:
            out += [intro, ""] + lines + [""]


def _against_control(by_stage: dict[str, list[dict]], control_stage: str,
                     stages=(*ALIGN_STAGES, "sft_more_nodrop", "distill")) -> list[str]:
    """One line per stage of ``stages`` (POST_STAGES names): its test NDCG@10 against ``control_stage``'s run from
    the same SFT run (its folder's name without the seed; none for runs from scratch), seed, learning rate and
    epoch cap; the S-DPO goal is judged against the matched control only (the one that trains with or without
    dropout as the stage does)."""
    def start(run: dict) -> tuple:
        checkpoint = (run.get("init_from") or {}).get("checkpoint")
        sft = Path(checkpoint).parent.parent.name.rsplit("-", 1)[0] if checkpoint else None
        epochs = run["config"].get("trainer", {}).get("max_epochs")
        return sft, run["seed"], run["config"]["optim"]["lr"], epochs

    control = {start(r): r for r in by_stage.get(control_stage, [])}
    lines = []
    for stage in _stages_of(by_stage, stages):
        paired = [(r, control[start(r)]) for r in by_stage[stage] if start(r) in control]
        if not paired or stage == control_stage:
            continue
        changes = [r["metrics"]["test"]["ndcg@10"] / c["metrics"]["test"]["ndcg@10"] - 1 for r, c in paired]
        matched = all(_dropout_off(r) == _dropout_off(c) for r, c in paired)
        verdict = ""
        if stage.startswith("sdpo") and matched:
            verdict = (" — goal (+{:.0%}) {}".format(GOAL_SDPO, "met" if statistics.mean(changes) >= GOAL_SDPO
                                                        else "**not** met"))
        lines.append(f"- `{_stage_label(stage)}`{'' if matched else ' (dropout differs)'} vs "
                     f"`{_stage_label(control_stage)}`, test NDCG@10 per seed "
                     f"({', '.join(f'{c:+.1%}' for c in changes)}): mean **{statistics.mean(changes):+.1%}**"
                     f"{verdict}.")
    return lines


def _runs_by_stage(runs: list[dict]) -> dict[str, list[dict]]:
    """Post-training results -> their stage name (with its tags) -> its runs, by seed."""
    by_stage = defaultdict(list)
    for r in sorted(runs, key=lambda r: r["seed"]):
        by_stage[_stage(r)].append(r)
    return by_stage


def post_training_tables(files: list[dict]) -> list[str]:
    """Post-training stages of the SID generator against their control (scripts/recipes/reproduce_post_training.sh), one
    section per dataset it ran on."""
    out = []
    for prefix in POST_PREFIXES:
        runs = [r for r in files if _post_prefix(r) == prefix and "metrics" in r]
        if runs:
            out += _post_training_table(runs, prefix)
            out += skipped_negatives_reading(runs, files, POST_PREFIXES[prefix])
            out += heldout_negatives_table(files, POST_PREFIXES[prefix])
    return out


def skipped_negatives_reading(runs: list[dict], files: list[dict], dataset: str,
                              tags: str = "_items_tied_hdistill_guided05") -> list[str]:
    """What passing over the model's top wrong items did (``sdpo_seq_rank_beam_skip10`` against the same stage
    with the top 8, ``sdpo_seq_rank_beam``, and their control), every figure from the results files."""
    by_stage = _runs_by_stage(runs)
    skipped, top, control = (by_stage.get(s + tags) for s in ("sdpo_seq_rank_beam_skip10", "sdpo_seq_rank_beam",
                                                              "sft_more_nodrop"))
    if not (skipped and top and control):
        return []
    control_of = {r["seed"]: r for r in control}
    if any(r["seed"] not in control_of for r in skipped):
        return []

    def ndcg(stage_runs: list[dict]) -> str:
        return _cell([r["metrics"]["test"]["ndcg@10"] for r in stage_runs])

    def stat(stage_runs: list[dict], key: str) -> float:
        return statistics.mean(r["align"]["tested_weights_on_training_examples"][key] for r in stage_runs)

    def heldout(stage_runs: list[dict]) -> str:
        names = {f"{_stage(r)}-{r['seed']}" for r in stage_runs}
        shares = [row["examples_rejecting_either"] for f in files if f.get("kind") == "negatives_heldout"
                  for row in f["runs"] if Path(row["run"]).name in names and row["dataset"]["dataset"] == dataset]
        return f"{min(shares):.1%}-{max(shares):.1%}" if shares else "not measured"

    changes = [r["metrics"]["test"]["ndcg@10"] / control_of[r["seed"]]["metrics"]["test"]["ndcg@10"] - 1
               for r in skipped]
    mean = statistics.mean(changes)
    skip = skipped[0]["config"]["align"]["beam_skip"]
    k = skipped[0]["config"]["align"]["num_negatives"]
    return [f"Passing over the model's top wrong items (`sdpo_seq_rank_beam_skip10`: `align.beam_skip={skip}`, the "
            f"wrong items it ranks {skip + 1}-{skip + k} rejected instead of 1-{k}, everything else as "
            f"`sdpo_seq_rank_beam`), {len(skipped)} seeds: test NDCG@10 {ndcg(skipped)} against its control's "
            f"{ndcg(control)} (per seed {', '.join(f'{c:+.1%}' for c in changes)}; mean {mean:+.1%}, "
            f"{'at or above' if mean >= GOAL_SDPO else 'below'} the {GOAL_SDPO:+.0%} goal), and {ndcg(top)} with "
            f"the top {k}. On the training examples its reward accuracy is {stat(skipped, 'reward_accuracy'):.2f} "
            f"(top {k}: {stat(top, 'reward_accuracy'):.2f}) and the rejected items' log-ratio "
            f"{stat(skipped, 'rejected_log_ratio'):+.2f} nats ({stat(top, 'rejected_log_ratio'):+.2f}); "
            f"{heldout(skipped)} of its examples reject the user's own validation or test target "
            f"({heldout(top)} with the top {k}; the held-out table below).{_skip_verdict(skipped, top, mean)}", ""]


def _skip_verdict(skipped: list[dict], top: list[dict], change: float) -> str:
    """The reading of :func:`skipped_negatives_reading`'s figures, where they say it (``change``: the mean change
    against the control)."""
    def mean(runs: list[dict]) -> float:
        return statistics.mean(r["metrics"]["test"]["ndcg@10"] for r in runs)
    if mean(skipped) > mean(top) and abs(change) < 0.02:
        return (" Passing over the top wrong items recovers what the top ones cost, but the stage is then level "
                "with its control, as with popularity negatives: the control's full softmax already trains "
                "against these items.")
    return ""


def heldout_negatives_table(files: list[dict], dataset: str) -> list[str]:
    """How often an alignment stage's rejected items were the user's own validation or test target
    (scripts/analysis/negatives_heldout.py), for the stages that ran on ``dataset``."""
    rows = [row for f in files if f.get("kind") == "negatives_heldout" for row in f["runs"]
            if row["dataset"]["dataset"] == dataset]
    if not rows:
        return []
    out = ["How often the rejected items were the user's own held-out items (`scripts/analysis/negatives_heldout.py` "
           "on the "
           "stages' cached negatives; the stages cannot see those items, and excluding them would leak them): share "
           "of preference examples whose rejected items contain the user's validation target, test target, either, "
           "and share of all rejected items that are one of them.", "",
           "| stage run | negatives | seed | examples | validation target | test target | either | of rejected items |",
           "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        source = {"num_negatives": row["negatives_per_example"], "negatives": row["negatives"],
                  "beam_skip": row.get("beam_skip", 0)}
        out.append(f"| `{Path(row['run']).name}` | {_negatives_label(source)} | {row['seed']} | "
                   f"{row['examples']:,} | {row['examples_rejecting_valid_target']:.2%} | "
                   f"{row['examples_rejecting_test_target']:.2%} | {row['examples_rejecting_either']:.2%} | "
                   f"{row['rejected_items_that_are_heldout_targets']:.3%} |")
    return out + [""]


def _negatives_label(align: dict) -> str:
    """An alignment stage's ``align`` settings -> its negatives in words: ``8 beam``, ``8 beam from rank 11``."""
    skip = align.get("beam_skip", 0)
    return f"{align['num_negatives']} {align['negatives']}" + (f" from rank {skip + 1}" if skip else "")


def _post_training_table(runs: list[dict], prefix: str) -> list[str]:
    by_stage = _runs_by_stage(runs)
    first = (by_stage.get("sft") or runs)[0]
    summary, config = first["dataset"], first["config"]
    if any(r["dataset"] != summary for r in runs):
        raise ValueError("post-training results on different datasets: " + ", ".join(r["name"] for r in runs))
    reader = config["data"]["reader"]
    columns = ["recall@5", "ndcg@5", "recall@10", "ndcg@10"]
    dataset = POST_PREFIXES[prefix]
    if dataset in AMAZON_NAMES:
        heading = [f"## Post-training of the SID generator: stages against their control, {summary['dataset']}", "",
                 f"`DATASET={dataset} scripts/recipes/reproduce_post_training.sh`: {AMAZON_NAMES[dataset]} "
                 f"({summary['users']:,} users, {summary['items']:,} items, {summary['interactions']:,} "
                 "interactions), leave-one-out, full-corpus ranking, history removed; test split, best validation "
                 f"checkpoint. The genrec presets: teacher `experiment={dataset}_sasrec`, SIDs from RQ-VAE (3 x 256 + "
                 "a collision level) on its item table (collaborative, as in Beauty's SID-source table), generator "
                 f"`experiment={dataset}_sid_gpt`. Every stage starts from the SFT run's best checkpoint and trains "
                 "the same number of epochs with the same optimizer; the control continues next-token training. One "
                 "CPU thread per run, two runs side by side on the 2-core machine. Epoch caps were set by the time "
                 "left, not by convergence.", ""]
    else:
        heading = ["## Post-training of the SID generator: stages against their control", "",
           f"`scripts/recipes/reproduce_post_training.sh`: a reduced synthetic log ({reader['num_users']:,} users, "
           f"{reader['num_items']:,} items, {reader['num_clusters']} clusters; {summary['interactions']:,} "
           "interactions), leave-one-out, full-corpus ranking, history removed; test split, best validation "
           "checkpoint. SIDs: residual k-means on the SASRec teacher's item table (collaborative). Every stage starts "
           "from its seed's SFT best checkpoint and trains the same number of epochs with the same optimizer; the "
           "control continues next-token training. One CPU thread per run on a shared 2-core machine (load average "
           "20-30 for the first runs, up to 13 of them side by side with other engineers' jobs; 5-8 for the "
           "re-run of the teacher, SFT, control and the `sdpo_sft*` arms), so train times are wall times under "
           "contention. Epoch caps were set by the time left, not by convergence: a best epoch equal to the "
           "last (counted from 0) means the run was still improving.", ""]
    out = heading + [
           "| model | " + " | ".join(columns) + " | invalid | test log p(target) | trainable params | seeds | "
           "epochs (best), train time | source |", "|---|" + "---|" * (len(columns) + 7)]
    for stage in _stages_of(by_stage, POST_STAGES):
        stage_runs, label = by_stage[stage], _stage_label(stage)
        tests = [r["metrics"]["test"] for r in stage_runs]
        cells = [_cell([t[c] for t in tests]) for c in columns]
        extra = [_cell([t["invalid_rate"] for t in tests if "invalid_rate" in t]),
                 _cell([t["target_log_prob"] for t in tests if "target_log_prob" in t]),
                 ", ".join(f"{n:,}" for n in sorted({r["parameters"]["trainable"] for r in stage_runs
                                                      if "parameters" in r})) or "–"]
        seeds = ", ".join(str(r["seed"]) for r in stage_runs)
        names = ", ".join(f"`results/{r['name']}.json`" for r in stage_runs)
        out.append(f"| **{label}** | " + " | ".join(cells + extra) + f" | {seeds} | {_budget(stage_runs)} | "
                   f"{names} |")
    for name, metrics in first["baselines"].items():
        out.append(f"| {name} (baseline) | " + " | ".join(_cell([metrics["test"][c]]) for c in columns) +
                   f" | – | – | – | – | – | `results/{first['name']}.json` |")
    by_model = {_stage_label(s): rs for s, rs in by_stage.items()}
    out += ["", f"Commits: {_commits(runs)}.", ""]
    out += below_baselines(by_model)
    best_name, best = max(first["baselines"].items(), key=lambda kv: kv[1]["test"]["recall@10"])
    recall, users = best["test"]["recall@10"], summary["users"]
    out += [f"The test set has {users:,} users: the binomial standard error of a recall@10 near {recall:.3f} "
            f"(`{best_name}`) is {math.sqrt(recall * (1 - recall) / users):.4f}.", ""]
    intros = {"sft_more": "Each stage against continued SFT from the same checkpoint (same seed, same extra epochs, "
                          "dropout on as in SFT):",
              "sft_more_nodrop": "The same against continued SFT without dropout, the matched control of the "
                                 "alignment stages that train without it (`align.disable_dropout`, the default):"}
    for control_stage in _stages_of(by_stage, ("sft_more", "sft_more_nodrop")):
        lines = _against_control(by_stage, control_stage)
        if lines:
            intro = intros.get(control_stage, f"Against `{_stage_label(control_stage)}` (the stages from the same "
                                              "SFT run, with the same seed, learning rate and epoch cap):")
            out += [intro, ""] + lines + [""]
    _add_comparisons(out, by_stage, SFT_COMPARISONS[:1])
    lines = (_against_control(by_stage, "sft", stages=("sft_items",))
             + _against_control(by_stage, "sft_distill", stages=("sft_items_distill",)))
    lines += [] if "sft_distill" in by_stage else _against_control(by_stage, "sft", stages=("sft_items_distill",))
    if lines:
        out += ["An item head re-ranking the beam (`model.generator.item_head=true model.decoding.rank=hybrid`) "
                "against the same training without one, or against plain SFT where no run with distillation from "
                "the first step was made (same seed, learning rate and epoch cap):", ""] + lines + [""]
    _add_comparisons(out, by_stage, SFT_COMPARISONS[1:])
    out += POST_NOTES.get(dataset, [])
    aligned = [(s, by_stage[s]) for s in _stages_of(by_stage, ALIGN_STAGES)
               if all(r["align"].get("tested_weights_on_training_examples") for r in by_stage[s])]
    if aligned:
        keys = ["loss", "chosen_reward", "rejected_reward", "reward_margin", "reward_accuracy", "chosen_log_ratio",
                "rejected_log_ratio"]
        out += ["Preference statistics of the tested weights over the stage's own preference examples (examples "
                "`last`: each training user's, chosen = its last training item; `all`: every position of every "
                "training sequence), against the cached SFT reference; rewards are β·(log π − log π_ref), "
                "log-ratios log π − log π_ref in nats (a negative chosen log-ratio: the chosen item became less "
                "likely, DPO's known failure). Mean over seeds.", "",
                "| stage | β | negatives | examples | " + " | ".join(keys) + " |",
                "|---|---|---|---|" + "---|" * len(keys)]
        for stage, stage_runs in aligned:
            a = stage_runs[0]["align"]
            stats = [r["align"]["tested_weights_on_training_examples"] for r in stage_runs]
            settings = {**stage_runs[0]["config"]["align"], **a}  # beam_skip: in the config of older runs' files
            out.append(f"| {_stage_label(stage)} | {a['beta']:g} | {_negatives_label(settings)} | "
                       f"{a.get('positions', 'last')} | " +
                       " | ".join(f"{statistics.mean(s[k] for s in stats):+.4f}" for k in keys) + " |")
        out.append("")
    return out


#: the named rankings of conf/ranking (scripts/analysis/compare_rankings.py --mode) in words
RANKING_MODES = {"codes": "the beam over semantic IDs by code log-probability",
                 "head": "the item head over every item, no beam",
                 "liger": "the codes' beam proposes, the item head orders it (LIGER)",
                 "guided": "a beam steered by the item head, items by 0.5 x code + head log-probability"}


def _mean_of(rows: list[dict], split: str, metric: str) -> float:
    return statistics.mean(r["metrics"][split][metric] for r in rows)


def _change(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:+.1f}%"


def generative_retrieval_tables(files: list[dict]) -> list[str]:
    """Issue 45's ranking table (scripts/recipes/reproduce_generative_retrieval.sh PART=ranking), per dataset: one
    generator checkpoint per seed ranked four ways, each row saying what carries its ranking; SASRec; a SASRec of the
    generator's size distilled from the same teacher the same way; the baselines of the same splits."""
    by_name = {f["name"]: f for f in files}
    out = []
    for comp in (f for f in files if f.get("kind") == "ranking_comparison" and f["name"].endswith("_gr_rankings")):
        dataset, protocol = comp["dataset"]["dataset"], comp["protocol"]
        modes = {mode: [r for r in comp["runs"] if r["mode"] == mode] for mode in comp["modes"]}
        generators = [by_name[r["results_name"]] for r in next(iter(modes.values())) if r["results_name"] in by_name]
        first = generators[0] if generators else {}
        sizes = " x ".join(str(k) for k in first.get("sid_table", {}).get("codebook_sizes", []))
        out += [f"## Generative retrieval, what carries the ranking: {dataset}", "",
                f"`scripts/recipes/reproduce_generative_retrieval.sh` (`DATASET={dataset} PART=ranking`; "
                f"`results/{comp['name']}.json` and the files in each row). One checkpoint per seed of the SID "
                f"generator (collaborative semantic IDs {sizes} from the teacher's item table, the item head tied to "
                "item-ID inputs, distilled from the SASRec teacher into codes and head; the checkpoint chosen by the "
                "head's validation NDCG@10), ranked four ways (`ranking@model.decoding=<mode>`, conf/ranking); "
                "SASRec; a SASRec of the generator's size (its backbone and item table) distilled from the same "
                "teacher the same way (its top 100 items at every position, weight 1) for the same epochs; the "
                f"baselines on the same splits. {protocol['users_scored']['test']:,} test users, "
                f"{protocol['split'].split(' (')[0]}, full corpus, history removed. **Carried by** says what orders "
                "each list: the codes (generative retrieval), the head (a softmax over item rows: dense retrieval on "
                "the generator's backbone) or both; the log p(target) column is the target's score under that "
                "ranking (code, head, or 0.5 x code + head log-probability).", "",
                "| model | ranking | carried by | valid ndcg@10 | test recall@10 | test ndcg@10 | test recall@20 | "
                "test log p(target) | parameters | seeds | source |", "|" + "---|" * 11]
        params = f"{first['parameters']['total']:,}" if generators else "–"
        for mode, rows in modes.items():
            tests = [r["metrics"]["test"] for r in rows]
            cells = [_cell([r["metrics"]["valid"]["ndcg@10"] for r in rows])]
            cells += [_cell([t[m] for t in tests]) for m in ("recall@10", "ndcg@10", "recall@20", "target_log_prob")]
            out.append(f"| **SID generator** | `{mode}`: {RANKING_MODES.get(mode, mode)} | "
                       f"**{rows[0]['carried_by']}** | " + " | ".join(cells) + f" | {params} | "
                       + ", ".join(str(r["seed"]) for r in rows) + f" | `results/{comp['name']}.json` |")
        dense = [(f"SASRec ({dataset}_sasrec preset)", sorted(n for n in by_name if re.fullmatch(
                     f"{dataset}_sasrec_seed\\d+", n))),
                 ("SASRec teacher (the preset, seed 0, this run)", [f"{dataset}_gr_teacher_seed0"]),
                 ("SASRec of the generator's size, distilled from the teacher", sorted(
                     n for n in by_name if n.startswith(f"{dataset}_gr_sasrec_distill_seed")))]
        for label, names in dense:
            runs = [by_name[n] for n in names if n in by_name]
            if not runs:
                continue
            tests = [r["metrics"]["test"] for r in runs]
            cells = [_cell([r["metrics"]["valid"]["ndcg@10"] for r in runs])]
            cells += [_cell([t[m] for t in tests]) for m in ("recall@10", "ndcg@10", "recall@20")] + ["–"]
            count = f"{runs[0]['parameters']['total']:,}" if "parameters" in runs[0] else "–"
            out.append(f"| {label} | its item table, full softmax | item table | " + " | ".join(cells) +
                       f" | {count} | {', '.join(str(r['seed']) for r in runs)} | "
                       + ", ".join(f"`results/{n}.json`" for n in names if n in by_name) + " |")
        for name, metrics in comp["baselines"].items():
            cells = [_cell([metrics["valid"]["ndcg@10"]])] + [
                _cell([metrics["test"][m]]) for m in ("recall@10", "ndcg@10", "recall@20")] + ["–"]
            out.append(f"| {name} (baseline) | – | counts | " + " | ".join(cells) +
                       f" | – | – | `results/{comp['name']}.json` |")
        out += ["", f"Commits: {_commits([comp] + generators)}.", ""]
        out += _ranking_reading(modes, comp, [by_name[n] for n in by_name
                                              if n.startswith(f"{dataset}_gr_sasrec_distill_seed")])
    return out


def _ranking_reading(modes: dict[str, list[dict]], comp: dict, distilled: list[dict]) -> list[str]:
    """What the ranking table says, from its own figures (test NDCG@10, mean over seeds)."""
    mean = {mode: _mean_of(rows, "test", "ndcg@10") for mode, rows in modes.items() if rows}
    best_name, best = max(((n, b["test"]["ndcg@10"]) for n, b in comp["baselines"].items()), key=lambda x: x[1])
    lines = [f"Reading (test NDCG@10, mean over seeds): codes alone {mean.get('codes', float('nan')):.4f} "
             f"({_change(mean['codes'], best)} against the best baseline, `{best_name}` {best:.4f}; the goal for "
             f"codes alone is 0.0424, ActionPiece's published figure)" if "codes" in mean else "Reading:"]
    if "head" in mean:
        lines.append(f"; the head alone {mean['head']:.4f} ({_change(mean['head'], best)} against the baseline)")
        for mode in ("liger", "guided"):
            if mode in mean:
                lines.append(f"; `{mode}` {mean[mode]:.4f} ({_change(mean[mode], mean['head'])} against the head "
                             "alone)")
    if distilled and "head" in mean:
        dense = statistics.mean(r["metrics"]["test"]["ndcg@10"] for r in distilled)
        lines.append(f". The SASRec of the generator's size distilled the same way reaches {dense:.4f}: the "
                     f"generator's head is {_change(mean['head'], dense)} against it, and its codes alone "
                     f"{_change(mean['codes'], dense)}: that is what the semantic IDs add (or cost) to a dense model "
                     "of the same size and teacher on targets the item table has trained")
    return ["".join(lines) + ".", ""]


#: issue 45's goal for codes alone (ActionPiece's published Beauty NDCG@10) and its stretch (transitions_last3_skip)
CODES_GOAL, CODES_STRETCH = 0.0424, 0.0500
CODES_TRIES = {"control": "the ranking table's generator recipe, chosen by its codes",
               "first1024": "SIDs with a first codebook of 1,024 codes (RQ-VAE 1024 x 256 x 256 + collisions)",
               "level_swap": "the same RQ-VAE codes with the first two levels swapped (`level_order=[1,0,2]`)",
               "gpu_recipe": "the GPU recipe on the CPU: batches of 1,024, lr 2e-3, 200 warm-up steps, cosine, 40 "
                             "epochs validated every 4"}


def codes_tries_tables(files: list[dict]) -> list[str]:
    """Issue 45's changes for codes that rank on their own (``PART=codes``): each try's codes-only validation (the
    choice) and test figures against the control, and the goal's gap."""
    runs = sorted((f for f in files if f["name"].startswith("beauty_codes_") and "metrics" in f),
                  key=lambda f: (list(CODES_TRIES).index(f["name"][13:f["name"].rindex("_seed")])
                                 if f["name"][13:f["name"].rindex("_seed")] in CODES_TRIES else 99, f["seed"]))
    if not runs:
        return []
    out = ["## Codes that rank on their own: beauty", "",
           "`scripts/recipes/reproduce_generative_retrieval.sh` (`PART=codes TRY=<try>`): the generator of the ranking "
           "table "
           "(item head tied to item-ID inputs, distilled from the same SASRec teacher into codes and head) with one "
           "change each, ranked and chosen by its codes alone (`ranking@model.decoding=codes`: the beam of 20 by code "
           "log-probability; the best validation NDCG@10 picks the checkpoint), seed 0 unless listed. The learning "
           "curves are in the curves section (`results/curves_beauty_codes.json`).", "",
           "| try | change | SID codebooks | valid ndcg@10 (the choice) | test recall@10 | test ndcg@10 | seeds | "
           "epochs (best), train time | source |", "|" + "---|" * 9]
    by_try = defaultdict(list)
    for r in runs:
        by_try[r["name"][13:r["name"].rindex("_seed")]].append(r)
    for name, tries in by_try.items():
        sizes = " x ".join(str(k) for k in tries[0]["sid_table"]["codebook_sizes"])
        out.append(f"| {name} | {CODES_TRIES.get(name, name)} | {sizes} | "
                   f"{_cell([r['metrics']['valid']['ndcg@10'] for r in tries])} | "
                   f"{_cell([r['metrics']['test']['recall@10'] for r in tries])} | "
                   f"{_cell([r['metrics']['test']['ndcg@10'] for r in tries])} | "
                   f"{', '.join(str(r['seed']) for r in tries)} | {_budget(tries)} | "
                   + ", ".join(f"`results/{r['name']}.json`" for r in tries) + " |")
    best = max(by_try, key=lambda n: _mean_of(by_try[n], "valid", "ndcg@10"))
    test = _mean_of(by_try[best], "test", "ndcg@10")
    control = by_try.get("control")
    out += ["", f"Commits: {_commits(runs)}.", "",
            f"Validation picks `{best}` (test NDCG@10 {test:.4f}" + (
                f", {_change(test, _mean_of(control, 'test', 'ndcg@10'))} against the control" if control else "")
            + f"). Goal {CODES_GOAL} (ActionPiece): **{'met' if test >= CODES_GOAL else 'not met'}**, gap "
            f"{_change(test, CODES_GOAL)}; stretch {CODES_STRETCH}: gap {_change(test, CODES_STRETCH)}.", ""]
    return out


COLD_ROWS = {"codes": ("the beam over every item's semantic IDs", "codes"),
             "codes_unseen": ("the same beam among the cold items' IDs only", "codes"),
             "head": ("the item head's top 20 (a cold item's row never trained)", "head"),
             "teacher": ("SASRec of the same split (the teacher)", "item table"),
             "semantic_knn": ("semantic KNN: content embeddings near the last 3 items", "content"),
             "semantic_knn_unseen": ("semantic KNN among the cold items only", "content")}


def cold_start_tables(files: list[dict]) -> list[str]:
    """Issue 45's cold-start table (scripts/analysis/cold_start.py), per dataset: every ranking on all, cold and warm
    test targets, mean ± std over the generator seeds, with the split's item counts and the two goals checked."""
    out = []
    for f in (f for f in files if f.get("kind") == "cold_start"):
        d, runs = f["protocol"]["split_details"], f["runs"]
        seeds = ", ".join(str(r["seed"]) for r in runs)
        out += [f"## Item cold start: {f['dataset']['dataset']}", "",
                f"`scripts/recipes/reproduce_generative_retrieval.sh` (`PART=cold`; `scripts/analysis/cold_start.py`, "
                f"`results/{f['name']}.json`). `data.split.cold_items={d['cold_items']}` (cold_seed "
                f"{d['cold_seed']}): {d['cold_item_count']:,} of {f['dataset']['items']:,} items held out of "
                f"training entirely ({d.get('cold_training_events_removed', '?'):,} training events removed; "
                f"{d['warm_item_count']:,} warm items); {d['cold_targets']['test']:,} of "
                f"{d['users_evaluated']['test']:,} test targets ({d['cold_targets']['valid']:,} of "
                f"{d['users_evaluated']['valid']:,} validation targets) are cold items. The generator recipe of the "
                f"ranking table on this split with text semantic IDs (MiniLM item text, RQ-VAE; "
                f"{runs[0]['sid_table']['encoder']} encoder, table `{runs[0]['sid_table']['content_hash']}`), "
                f"distilled from a SASRec of the split; seeds {seeds}, one checkpoint each (the head's best "
                "validation NDCG@10). Hybrid ε: the head's list of warm items with a share ε of its 20 slots, evenly "
                "spaced (ε = 0.1: ranks 10 and 20), given to the best cold items by their codes (TIGER §4.3).", "",
                "| ranking | carried by | all: recall@10 | all: ndcg@10 | cold: recall@10 | cold: ndcg@10 | "
                "cold: recall@20 | warm: ndcg@10 | seeds |", "|" + "---|" * 9]
        rows = {name: [r["metrics"]["test"][name] for r in runs] for name in runs[0]["metrics"]["test"]}
        rows |= {name: [m] for name, m in f["baselines"]["test"].items()}

        def row(name: str, label: str, carried: str, values: list[dict]) -> str:
            cells = [_cell([v[part][m] for v in values]) for part, m in (
                ("all", "recall@10"), ("all", "ndcg@10"), ("cold", "recall@10"), ("cold", "ndcg@10"),
                ("cold", "recall@20"), ("warm", "ndcg@10"))]
            return f"| {label} | {carried} | " + " | ".join(cells) + f" | {seeds if len(values) > 1 else '–'} |"

        for name, values in rows.items():
            if name.startswith("hybrid_eps"):
                label, carried = f"hybrid, ε = {name[len('hybrid_eps'):]}: head + codes of unseen items", "both"
            else:
                label, carried = COLD_ROWS.get(name, (f"{name} (baseline)", "counts"))
            out.append(row(name, label, carried, values))
        out += ["", f"Commits: {_commits([f])}.", ""] + _cold_goals(rows)
    return out


def _cold_goals(rows: dict[str, list[dict]]) -> list[str]:
    """Issue 45's two cold-start goals, from the table's own figures (test, means over seeds)."""
    def mean(name, part, metric):
        return statistics.mean(v[part][metric] for v in rows[name])

    lines = []
    for codes, knn in (("codes", "semantic_knn"), ("codes_unseen", "semantic_knn_unseen")):
        a, b = mean(codes, "cold", "recall@10"), mean(knn, "cold", "recall@10")
        ratio = f"{a / b:.2f}x" if b else "– (semantic KNN 0)"
        lines.append(f"- Cold targets, recall@10, `{codes}` against `{knn}` (the same candidates): {a:.4f} against "
                     f"{b:.4f}, {ratio}: goal (1.5x) **{'met' if b and a >= 1.5 * b else 'not met'}**.")
    warm = [n for n in rows if not n.startswith(("hybrid", "codes")) and "knn" not in n]
    best = max(warm, key=lambda n: mean(n, "all", "ndcg@10"))
    top = mean(best, "all", "ndcg@10")
    for name in (n for n in rows if n.startswith("hybrid")):
        value, cold = mean(name, "all", "ndcg@10"), mean(name, "cold", "recall@10")
        met = value >= 0.97 * top and cold > 0
        lines.append(f"- `{name}`: all-target NDCG@10 {value:.4f} against the best model that cannot recall a cold "
                     f"item (`{best}`, {top:.4f}): {_change(value, top)}, with cold recall@10 {cold:.4f} "
                     f"(`{best}`: {mean(best, 'cold', 'recall@10'):.4f}): goal (within 3% while recalling cold items)"
                     f" **{'met' if met else 'not met'}**.")
    return lines + [""]


#: ``model.decoding`` overrides of scripts/analysis/compare_rankings.py -> what the ranking is
RANKINGS = {"codes": "the beam, by code log-probability", "hybrid": "the beam, re-ranked by code + item-head "
            "log-probability", "guided": "the beam steered by the item head (each prefix by code log-probability + "
            "the head's mass under it)", "items": "the item head alone over every item (no generation)"}


def _ranking_label(decoding: dict) -> str:
    """``{"rank": "hybrid", "beam": 50, "top_k": 50}`` -> words (beam 20 when not overridden; ``code_weight`` 0:
    the item head alone orders the beam)."""
    rank = RANKINGS[decoding.get("rank", "codes")]
    if decoding.get("rank") == "hybrid" and decoding.get("code_weight", 1) == 0:
        rank = "the beam, ordered by the item head alone"
    if decoding.get("rank") == "guided" and decoding.get("code_weight", 1) == 0:
        rank = "the beam steered and ordered by the item head alone (each prefix by the head's mass under it)"
    widths = [f"{k.replace('_', '-')} {v}" for k, v in decoding.items() if k not in ("rank", "code_weight")]
    widths += [f"code weight {decoding['code_weight']:g}"] if decoding.get("code_weight", 0) not in (0, 1) else []
    return rank + (f" ({', '.join(widths)})" if widths and decoding.get("rank") != "items" else "")


def ranking_tables(files: list[dict]) -> list[str]:
    """The same generator checkpoints ranked several ways (scripts/analysis/compare_rankings.py), one section per
    dataset over all its files, mean ± std over seeds."""
    by_dataset = {}
    for r in (f for f in files if f.get("kind") == "ranking_comparison" and not f["name"].endswith("_gr_rankings")):
        by_dataset.setdefault(r["dataset"]["dataset"], []).append(r)
    out = []
    for dataset, comparisons in by_dataset.items():
        stages = {}
        for row in (row for r in comparisons for row in r["runs"]):
            named = {"name": row["results_name"] or ""}
            label = _stage_label(_stage(named)) if _post_prefix(named) else row["run"]
            stages.setdefault((label, json.dumps(row["decoding"], sort_keys=True)), []).append(row)
        sources = ", ".join(f"`results/{r['name']}.json`" for r in comparisons)
        out += [f"## Same checkpoints, ranked several ways: {dataset}", "",
                f"`python -m scripts.analysis.compare_rankings` ({sources}): each run's best checkpoint (chosen by "
                "validation "
                "under the run's own ranking) evaluated again with other `model.decoding` settings (`genrec-eval "
                "decoding=...`), validation and test split, full corpus, history removed.", "",
                "| model | ranking | valid ndcg@10 | test recall@10 | test ndcg@10 | test recall@20 | test log p(target) "
                "| seeds | eval time (s) |", "|---|---|---|---|---|---|---|---|---|"]
        for (label, _), rows in stages.items():
            tests = [row["metrics"]["test"] for row in rows]
            cells = [_cell([row["metrics"]["valid"]["ndcg@10"] for row in rows])]
            cells += [_cell([t[m] for t in tests]) for m in ("recall@10", "ndcg@10", "recall@20")]
            cells += [_cell([t["target_log_prob"] for t in tests])]
            out.append(f"| {label} | {_ranking_label(rows[0]['decoding'])} | " + " | ".join(cells) +
                       f" | {', '.join(str(seed) for seed in sorted(row['seed'] for row in rows))} | "
                       f"{statistics.mean(row['seconds'] for row in rows):.0f} |")
        commits = sorted({r["commit"][:12] for r in comparisons})
        out += ["", f"Commits: {', '.join(f'`{c}`' for c in commits)}.", ""]
        out += RANKING_NOTES.get(dataset, [])
    return out


#: prose under the ranking comparisons of a dataset (its name -> paragraphs)
RANKING_NOTES = {
    "beauty": [
        "Reading (one checkpoint, seed 0; its own ranking, the hybrid with a beam of 20, is the results file's row "
        "above: valid 0.0436, test NDCG@10 0.0332, recall@20 0.0801). Re-ranking the beam with the item head adds "
        "+16.9% over ranking it by the codes alone (0.0284), more than on Scientific. The item head alone, with no "
        "generation, is the best of the three (0.0343, +3.3% over the hybrid, recall@20 0.0985 against the beam's "
        "0.0801): on Beauty the beam of 20 misses items the head ranks high. A beam of 50 with the hybrid catches up "
        "(0.0344) at 4.6 times the item head's evaluation time (510 s against 110 s). Every ranking stays far below "
        "the best baseline (0.0500) and SASRec (0.0555): the item table trained inside the generator gets about a "
        "quarter of the way from the code ranking to the baseline (27%).", "",
        "The checkpoint with the item head tied to item-ID inputs (with distillation; its own ranking, the hybrid "
        "with a beam of 20, gives 0.0412) ranked other ways: by its codes alone 0.0317; by the item head alone over "
        "every item 0.0518, recall@10 0.0834, above the best baseline (`transitions_last3_skip`, 0.0500 / 0.0787; "
        "the standard error of a recall@10 near 0.08 is 0.0018) and 7% below SASRec (0.0555). Validation picks that "
        "ranking too (0.0663 against 0.0545 for the hybrid). Generation is now what holds the model back: the "
        "beam of 20 by codes holds the target for 8.7% of test users (recall@20), the item head's top 20 for 11.6%, "
        "and a beam of 50 ordered by the item head alone (`model.decoding.code_weight=0`) reaches 0.0467 (0.0451 "
        "with the code log-probability added), still below the head over the whole corpus. So on Beauty the model "
        "trained to generate semantic IDs beats the baseline when its item head ranks the corpus, not yet when its "
        "beam proposes the candidates. With distillation into the item head as well (`_items_tied_hdistill`) the "
        "item head alone reaches 0.0568, recall@10 0.0935, 14% above the best baseline and level with SASRec, its "
        "teacher (0.0555, recall@10 0.0931; +2.3% NDCG@10), while the same checkpoint's hybrid stays at 0.0435; with the cosine "
        "decay the head alone reaches 0.0574 (hybrid 0.0418). Evaluation times of these rows were measured beside two "
        "training runs and a CI run (inflated).", "",
        "A beam steered by the item head (`model.decoding.rank=guided`, beam 20; 3 seeds of `_items_tied_hdistill`) "
        "scores every prefix by `code_weight` x its code log-probability plus the log of the item head's probability "
        "mass over the items under it, so the beam keeps the prefixes that hold the head's best items instead of the "
        "ones the codes favour; a finished tuple scores as in the hybrid. With `code_weight` 0 it returns "
        "0.0569 ± 0.0004 (recall@10 0.0939), +13.8% over the best baseline (0.0500, recall@10 0.0787) and +2.5% "
        "over SASRec (0.0555), against 0.0430 ± 0.0004 for the same checkpoints' hybrid beam of 20: the beam of 20 "
        "now finds nearly all of the head's own top 20 (recall@20 0.1271 against 0.1281 for the head over every "
        "item), at about 2.5 times the head's evaluation time. Said plainly: at weight 0 the codes take no part in "
        "the scores; the beam is the search for the head's best items through the trie of valid semantic IDs, and "
        "the model that wins is the generator's item head (a softmax over items on the generator's backbone, "
        "trained beside its codes and distilled from SASRec). Weighting the codes in lowers the score at every "
        "step: 0.0555 at 0.25 (seed 0), 0.0524 ± 0.0011 at 0.5 (+4.8% over the baseline, each seed above it: "
        "0.0531, 0.0529, 0.0512), 0.0485 ± 0.0009 at 1 (-3.0%, below it). Validation orders the weights the same "
        "way (0.0725, 0.0717 at seed 0, 0.0686, 0.0636), so it would pick weight 0. On Beauty the codes' log-probabilities "
        "order items worse than the head does; what they add is the constraint to valid IDs.", ""],
    "scientific": [
        "Reading: on the same checkpoints, re-ranking the beam with the item head adds +10% to +15% NDCG@10 over "
        "ranking it by the codes alone (+11.7%, +10.0%, +12.4% with distillation; +14.7% without, seed 0). The item "
        "head alone, with no generation at all, is level with the hybrid on average (0.0627 ± 0.0028 against 0.0626 "
        "± 0.0013) but varies more by seed, and its recall@20 is higher (0.121 against 0.109) because the beam of 20 "
        "caps what the hybrid can return. A beam of 50 with the hybrid adds another +2.2% to +3.6% (0.0641 ± 0.0013, "
        "recall@20 0.126) at 1.6 times the evaluation time. The code ranking of these checkpoints (0.0562 ± 0.0018) "
        "is below that of the distilled runs without a head (0.0595 ± 0.0028); the checkpoints were chosen by "
        "validation under the hybrid, so part of that gap may be the choice of epoch, not the head's share of the "
        "backbone. An item table trained inside the generator thus closes a quarter to a third of the gap between "
        "the code ranking (0.0562) and the baseline (0.0793), which fits the diagnosis above (the generator lacks "
        "SASRec's item-to-item memory). The item head itself stays below SASRec (0.0627 against 0.0802): it shares "
        "its backbone and its training with the codes' loss. Tuning it on its own (its dropout, a weight on its "
        "loss) was not tried.", ""],
}


def curve_tables(files: list[dict]) -> list[str]:
    """Validation NDCG@10 after every epoch of the runs in a curves file (scripts/analysis/record_curves.py), epochs
    counted from the start of training: a stage started with ``init_from`` continues its source's count."""
    out = []
    for r in (f for f in files if f.get("kind") == "validation_curves"):
        def start(run: dict) -> int:  # epochs trained before the run's first epoch
            return 0 if run["init_from"] is None else run["init_from"]["epoch"] + 1

        def label(run: dict) -> str:
            named = {"name": run["results_name"] or ""}
            return _stage_label(_stage(named)) if _post_prefix(named) else (run["results_name"] or run["run"])

        generative = [run for run in r["runs"] if run["model"] != "sasrec"]
        width = max(start(run) + run["epochs_run"] for run in generative)
        out += [f"## Learning curves (`results/{r['name']}.json`)", "",
                "`python -m scripts.analysis.record_curves`: validation NDCG@10 after each epoch, read from each run's "
                "own log; epochs counted from the start of training (a stage started from a checkpoint continues its "
                "count" + (f"; the retrieval model's row is cut at {width} epochs, its best is in the last columns"
                           if len(generative) < len(r["runs"]) else "") + ").", "",
                "| run | lr, schedule | " + " | ".join(str(e) for e in range(1, width + 1)) +
                " | best validation (epoch) | test ndcg@10 |", "|---|---|" + "---|" * (width + 2)]
        for run in r["runs"]:
            cells = [""] * width
            for point in run["curve"]:
                epoch = start(run) + point["epoch"]
                if epoch < width:
                    cells[epoch] = f"{point['ndcg@10']:.4f}"
            best = next(p for p in run["curve"] if p["epoch"] == run["best_epoch"])  # runs may skip validations
            out.append(f"| {label(run)} | {run['lr']:g}, {run['schedule']} | " + " | ".join(cells) +
                       f" | {best['ndcg@10']:.4f} ({start(run) + run['best_epoch'] + 1}) | "
                       f"{run['test']['ndcg@10']:.4f} |")
        out += ["", f"Commit `{r['commit'][:12]}` (of the script; each run's own commit is in its results file).",
                ""]
    return out


#: what the per-level diagnosis shows (prose; the figures are in the files)
DIAGNOSIS_NOTES = [
    "Reading (Beauty, one seed per run; issue 16 asks, where a generative model stays below the best baseline, what "
    "was measured about why):", "",
    "- **Not the decoding.** A ten times wider beam adds 0.5-1.4% NDCG@10 on the sampled users, and renormalising "
    "every level over the allowed codes 0.5-2.6%, against gaps of 40% to SASRec.",
    "- **Not the held-out likelihood.** The generator's raw softmax puts 19-32% of its probability at levels 1 "
    "and 2 on code tuples that are no item, which is why its raw -log p(target) is 1.3 nats above SASRec's. "
    "Renormalised over the valid codes, its test likelihood equals SASRec's (9.22 against 9.25 nats after SFT "
    "and 3 more epochs, 9.14 after the cosine run), within about 0.2 nats at every level, and so does its top-1 code "
    "at levels 0, 2 and 3. Equal log-loss, half the NDCG@10: SASRec's probability is sharper on the items it "
    "ranks first.",
    "- **The fit of the training data.** On training targets SASRec reaches 5.56 nats, the generator 7.1-7.2 "
    "(renormalised). The gap sits at level 1, the second code given the first (2.07 against 3.4 nats; top-1 0.43 "
    "against 0.12), where about 51 items share the target's first code. SASRec's item table memorises which item "
    "follows which: the same signal that makes `transitions_last3_skip` (0.0500) the strongest baseline. It also "
    "overfits (its test nats are 3.7 above its training nats, the generator's 2.0), yet it ranks the held-out item "
    "higher. The generator's items share their codes and the parameters behind them, so it generalises its "
    "average likelihood as well but memorises less.",
    "- **What was tried against it.** Training longer with a decaying learning rate (the cosine run, 20 epochs) "
    "helps a little: 0.0320, +17% over the 10-epoch SFT run and +3.9% over the best staged run. Giving every "
    "history item its own embedding beside its codes (`model.generator.item_inputs`, +1.55M parameters) learns "
    "faster (validation +11% at epoch 5) but ends level with the same run without it (test 0.0320 both). Its "
    "diagnosis shows why: it now fits the training targets better than SASRec (5.39 against 5.56 nats, "
    "renormalised), but the memory goes to the first code (training 1.93 against SASRec's 3.38 nats, top-1 0.52) "
    "and does not carry to held-out users there (test level 0: 6.57 nats, against 4.97 without item inputs and "
    "5.17 for SASRec), while level 1, where SASRec's advantage lies, barely moves (training 3.26 against 2.07). "
    "Regularising the item rows (dropout, weight decay on them) was not tried.",
    "- **What closed part of the gap:** an output layer that scores items as well as codes, measured on "
    "Scientific (`model.generator.item_head`, the ranking comparison below: +10% to +15% NDCG@10 over the code "
    "ranking of the same checkpoints, still 19% below the best baseline) and on Beauty (10 epochs: alone 0.0308, "
    "+12.8% over plain SFT; with distillation from the first step 0.0332, +21.6%), and, on Beauty, that head tied "
    "to item-ID inputs as SASRec ties its tables (0.0412 with distillation, 0.0435 with distillation into the head "
    "too: 13% below the best baseline). The tied head alone over every item is above the baseline (0.0518 and "
    "0.0568); what remained was the beam, which proposed too few of the items the head ranks first. A beam "
    "steered by the item head's mass under each prefix (`model.decoding.rank=guided`) closes that: 0.0569 ± 0.0004 "
    "over 3 seeds with the head alone scoring (+13.8% over the best baseline), 0.0524 ± 0.0011 with the codes' "
    "log-probability at half weight (+4.8%), 0.0485 at full weight (-3.0%); the ranking comparison below says what "
    "that means. On one H200 (`recipe=gpu`: batches of 1,024, lr 2e-3, one seed) the same model trained to early "
    "stopping in about a minute; the GPU recipe section gives its figures. Not measured: semantic IDs whose first "
    "levels separate items that follow the same items, and tuned batch size and learning rate on the GPU.",
    "- **Scientific shows the same picture** (SFT seed 0, stopped early at epoch 23: trained to convergence, unlike "
    "the Beauty runs). The wider beam and the renormalised beam change NDCG@10 by at most 1% (0.0560-0.0566). The "
    "held-out likelihood is level with SASRec's: 8.74 against 8.59 nats, renormalised. Yet the generator's test "
    "NDCG@10 is 0.0546, against SASRec's 0.0802. The training fit trails again at level 1, the second code given "
    "the first: 2.32 against 1.36 nats, with about 20 items under a first code. So the gap is not a Beauty "
    "budget effect: a converged generator on a second dataset misses the same item-to-item memory.", ""]


def diagnosis_tables(files: list[dict]) -> list[str]:
    """Where a generator falls behind a retrieval model, per code level (scripts/analysis/diagnose_generator.py)."""
    out = []
    for r in (f for f in files if f.get("kind") == "diagnose_generator"):
        gen, teacher = r["generator"], r["teacher"]
        item = r["item_nats"]
        out += [f"## Why the generator trails {teacher['model']}: nats per code level, {r['dataset']['dataset']} "
                f"(`results/{r['name']}.json`)", "",
                f"`python -m scripts.analysis.diagnose_generator`: the generator of `{gen['run']}` ({gen['model']}) "
                "and the "
                f"retrieval model of `{teacher['run']}` ({teacher['model']}), best checkpoints. For each target, the "
                "negative log-likelihood (nats) of its code at each level given its true prefix: the generator's "
                "own softmax (teacher-forced), and the retrieval model's softmax over every item summed by code "
                "prefix (what a generator reproducing its item probabilities exactly would put on each code). The "
                "levels add up to each model's -log p(target item). Test: every test user's target "
                f"({item['test']['targets']:,}); training: every position with an input of the first "
                f"{r['train_batches']} training batches ({item['train']['targets']:,} targets). Top-1: the share of "
                "targets whose code is the most likely valid one at that level. Valid codes: those that continue the "
                "target's prefix to some item (constrained decoding masks the others; the generator's raw softmax "
                "spends the rest of its mass on them). Items under the prefix: how many items share the test "
                "target's codes before that level (mean over targets).", "",
                "| level (codes) | test nats: generator | generator, valid codes only | generator's mass on valid "
                "codes | test nats: retrieval | gap (valid codes) | train nats: generator | train nats: retrieval | "
                "gap | test top-1: generator | test top-1: retrieval | items under the prefix |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for level in r["levels"]:
            test, train = level["test"], level["train"]
            out.append(f"| {level['level']} ({level['codebook_size']}) | {test['generator_nats']:.3f} | "
                       f"{test['generator_valid_nats']:.3f} | {test['generator_valid_mass']:.3f} | "
                       f"{test['teacher_nats']:.3f} | {test['generator_valid_nats'] - test['teacher_nats']:+.3f} | "
                       f"{train['generator_nats']:.3f} | {train['teacher_nats']:.3f} | "
                       f"{train['generator_nats'] - train['teacher_nats']:+.3f} | {test['generator_top1']:.3f} | "
                       f"{test['teacher_top1']:.3f} | {level['test_items_under_prefix']:,.1f} |")
        out.append(f"| **item** | {item['test']['generator']:.3f} | {item['test']['generator_valid']:.3f} | – | "
                   f"{item['test']['teacher']:.3f} | {item['test']['generator_valid'] - item['test']['teacher']:+.3f} "
                   f"| {item['train']['generator']:.3f} | {item['train']['teacher']:.3f} | "
                   f"{item['train']['generator'] - item['train']['teacher']:+.3f} | – | – | 1 |")
        decoding = r["decoding"]
        out += ["", f"Decoding: the generator's beam, the same renormalised over the allowed codes at every level, "
                f"and a wider beam, on {decoding['sample_users']:,} test users drawn "
                f"with seed {decoding['seed']} (history removed, constrained by the prefix trie):", "",
                "| beam | recall@5 | ndcg@5 | recall@10 | ndcg@10 |", "|---|---|---|---|---|"]
        for row in decoding["rows"]:
            name = f"{row['beam']}{', renormalised' if row.get('renormalize') else ''}"
            out.append(f"| {name} | " + " | ".join(f"{row[c]:.4f}" for c in ("recall@5", "ndcg@5", "recall@10",
                                                                             "ndcg@10")) + " |")
        out += ["", f"Commit `{r['commit'][:12]}`; {r['seconds']['levels']:.0f} s for the levels, "
                f"{r['seconds']['decoding']:.0f} s for the decoding, {r['threads']} thread(s).", ""]
    return out + (DIAGNOSIS_NOTES if out else [])


def bench_compile_tables(files: list[dict]) -> list[str]:
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


#: the CPU runs each GPU recipe run is set beside: results-name prefix of the same model trained on the 2-core
#: machine, and the ranking its test metrics were read under (None: the file's own test metrics)
GPU_CPU_REFERENCES = {
    "sid_gpt": ("beauty_post_sft_items_tied_hdistill_seed", {"rank": "guided", "code_weight": 0},
                "the same generator on CPU (batch 256, lr 1e-3, 10 epochs, rank=hybrid validation; test re-ranked "
                "guided at code weight 0 by compare_rankings.py)"),
    "tiger": ("beauty_tiger_seed", None, "TIGER on CPU (text semantic IDs, batch 256, 2-epoch / 24-min cap)"),
    "sasrec": ("beauty_sasrec_seed", None, "SASRec on CPU (the preset)"),
}


def _on_gpu(run: dict) -> bool:
    return bool(run.get("environment", {}).get("cuda")) and "metrics" in run


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


def gpu_recipe_tables(files: list[dict]) -> list[str]:
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
    return out + _gpu_findings(gpu, files) + gpu_tests_table(files)


def gpu_tests_table(files: list[dict]) -> list[str]:
    """The correctness tests run on the GPU (scripts/gpu/record_gpu_tests.py): each test's outcome and seconds."""
    out = []
    for r in (f for f in files if f.get("kind") == "gpu_tests"):
        v = r["versions"]
        out += [f"### Correctness on the GPU (`results/{r['name']}.json`)", "",
                f"tests/kernels (Triton and CUDA kernels against their PyTorch references, outputs and gradients) and "
                f"compiled vs eager training steps on CUDA, run by scripts/gpu/gpu_recipe_check.sh on one "
                f"{r['environment']['cuda']}: torch {v['torch']} (CUDA {v['cuda']}), triton {v['triton']}, commit "
                f"{_commits([r])}. " + ", ".join(f"{n} {k}" for k, n in r["summary"].items() if n) + ".", "",
                "| test | outcome | seconds |", "|---|---|---|"]
        out += [f"| `{t['test'].split('::')[-1]}` | {t['outcome']}"
                + (f": {t['message'].replace('|', '/')}" if t["message"] else "") + f" | {t['seconds']:.1f} |"
                for t in r["tests"]]
        out.append("")
    return out


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
        out.append("- **compile, why it is off by default:** on the GPU, torch warned that the compiled SASRec stack "
                   "broke its graph where it read the longest sequence (`int(...max())`, genrec/models/sasrec.py). "
                   "SASRec now compiles its dense stack only, one graph without a break (the jagged <-> padded "
                   "conversion stays eager), which has not been timed on a GPU: `recipe=gpu` leaves `compile` off "
                   "(`compile=true` still turns it on) until it has.")
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


def bench_precision_tables(files: list[dict]) -> list[str]:
    """bf16-mixed vs fp32 training on CPU (scripts/bench/bench_precision.py): s/step and test metrics with baselines."""
    out = []
    for r in files:
        if r.get("benchmark") != "bf16-mixed vs fp32 training on CPU":
            continue
        c = r["config"]
        flags = ", ".join(f"{flag} {'yes' if on else 'no'}" for flag, on in r["cpu_flags"].items())
        out += [f"## Benchmark: bf16-mixed vs fp32 training on CPU (`results/{r['name']}.json`)", "",
                f"{r['dataset']}, seed {r['seed']}, `trainer.precision=32-true` vs `bf16-mixed` (bf16 autocast of the "
                "encoder; TorchRec tables, norms, loss, weights, optimizer state and evaluation scores stay fp32). "
                f"Speed: whole training steps (batch {c['batch_size']}) of both precisions alternating in one process, "
                f"{c['timed_steps']} steps per round, {c['rounds']} rounds, median of round medians, {c['threads']} "
                f"thread(s). Quality: one `genrec.train` run per precision, {c['epochs']} epochs at most (equal "
                "budgets; the presets' own is 100 with early stopping), baselines evaluated in the same runs. "
                f"CPU flags: {flags}. {r['note'][0].upper() + r['note'][1:]}. Commit `{r['commit'][:12]}`.", "",
                "| model | fp32 s/step | bf16 s/step | bf16 speed-up (fp32 s / bf16 s) |", "|---|---|---|---|"]
        for row in r["rows"]:
            t = row["s_per_step"]
            out.append(f"| {row['model']} (`{row['experiment']}`) | {t['32-true']:.3f} | {t['bf16-mixed']:.3f} | "
                       f"{row['bf16_speedup']:.2f}x |")
        out += ["", "A run's wall time includes evaluation and waiting on the shared CPU: it is not a speed figure.",
                "",
                "| model | precision | epochs run (best) | test recall@10 | test ndcg@10 | run wall s |",
                "|---|---|---|---|---|---|"]
        for row in r["rows"]:
            for precision, run in row["runs"].items():
                out.append(f"| {row['model']} | {precision} | {run['epochs_run']} ({run['best_epoch']}) | "
                           f"{run['test']['recall@10']:.4f} | {run['test']['ndcg@10']:.4f} | {run['wall_s']:.0f} |")
            for name, b in row["runs"]["32-true"]["baselines"].items():
                out.append(f"| {name} (baseline) | – | – | {b['recall@10']:.4f} | {b['ndcg@10']:.4f} | – |")
        verdicts = []
        for row in r["rows"]:
            speed = row["bf16_speedup"]
            pace = ("no measurable difference" if abs(speed - 1) < 0.03 else "faster" if speed > 1 else "slower")
            verdicts.append(f"{row['model']}: bf16 vs fp32 on this CPU: {pace} ({speed:.2f}x the fp32 step rate)")
            best_name, best = max(row["runs"]["32-true"]["baselines"].items(), key=lambda kv: kv[1]["ndcg@10"])
            for precision, run in row["runs"].items():
                beats = run["test"]["ndcg@10"] > best["ndcg@10"]
                verdicts.append(f"{row['model']} {precision} {'beats' if beats else 'does not beat'} the best "
                                f"baseline, {best_name} (NDCG@10 {run['test']['ndcg@10']:.4f} vs "
                                f"{best['ndcg@10']:.4f})")
        out += ["", "; ".join(verdicts) + ".", ""]
    return out


def bench_fsdp_tables(files: list[dict]) -> list[str]:
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


def bench_pipeline_tables(files: list[dict]) -> list[str]:
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


def benchmark_tables(files: list[dict]) -> list[str]:
    """The jagged vs padded HSTU benchmark (scripts/bench/bench_hstu.py)."""
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
    """genrec's HSTU step vs Meta's reference on the same batches (scripts/bench/bench_hstu.py --peer)."""
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
                f"Trained on {r['environment'].get('cuda') or 'CPU'} ({stop}): "
                f"{steps if steps is not None else '?'} steps of batch {batch} in "
                f"{r['train_seconds'] / 60:.0f} min with validation, {validations}.")
        weaker = [m for m in COLUMNS[:4] if test[m] < r["baselines"]["most_popular"]["test"][m]]
        if weaker:
            line += f" Below even the most-popular baseline on {', '.join(weaker)}."
        if r["epochs_run"] > 1 and r["best_epoch"] + 1 >= r["epochs_run"]:
            line += " Its last validation was its best: it was still improving when the budget ran out."
        decay = "no decay" if optim.get("schedule", "constant") == "constant" else f"{optim['schedule']} decay"
        line += (f" Nothing was tuned (the preset's AdamW, lr {optim['lr']:g}, warm-up {optim.get('warmup_steps', 0)} "
                 f"steps, {decay}).")
        if r["model"] in PUBLISHED_STEPS and PUBLISHED_STEPS[r["model"]][0] in published:
            device = (f"one {r['environment']['cuda']}" if r["environment"].get("cuda")
                      else "a 2-core CPU shared with other runs")
            name, paper_steps, paper_batch = PUBLISHED_STEPS[r["model"]]
            paper = published[name]
            gaps = ", ".join(f"{m} {test[m]:.4f} vs {paper[m]:.4f}" for m in paper)
            below = [m for m in paper if test[m] < paper[m]]
            if below:
                line += (f" **Below the paper** ({gaps}): this run trained {steps or '?'} steps of batch {batch}, "
                         f"the paper {paper_steps:,} steps of batch {paper_batch} (about "
                         f"{paper_steps * paper_batch / max((steps or 1) * batch, 1):.0f}x the examples), on "
                         f"{device}; " + (
                             "its semantic IDs come from a 384-d MiniLM text encoder (the paper: 768-d Sentence-T5)."
                             if sid["tokenizer"].get("encoder", {}).get("name") == "text" else
                             f"its semantic IDs come from {sid['tokenizer'].get('encoder', {}).get('name', '?')} item "
                             "embeddings (the paper: 768-d Sentence-T5 text embeddings)."))
            else:
                line += f" At or above the paper ({gaps})."
        if r.get("commit_note"):
            line += f" Commit: {r['commit_note']}."
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
        no_time = " without its time bias" if r["config"]["model"]["encoder"].get("time_bias") is False else ""
        out += [f"## Export: {d['dataset']} ({m['name']}{no_time}, dim {m['dim']}, {m['similarity']})", "",
                f"`results/{r['name']}.json`: the run's checkpoint (trained {r['config']['trainer']['max_epochs']} "
                f"epochs at most, seed {r['seed']}) exported by `genrec-export`, then served by "
                "`examples/retrieval_example.py` (exported user tower + faiss index + ID map, no genrec code) for "
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
        if r["quantization"]:
            out += ["", "Quantised item tables (`genrec-export quantize=[fp16,int8]`: FBGEMM's row-wise formats, "
                    "read by its CPU lookup kernel; queries from the user tower exported with that table): top-10 "
                    "overlap with fp32 exact search on every test user, and the test metrics each table serves.", "",
                    "| item table | bytes | × fp32 | recall@10 vs fp32 exact | test recall@10 | test ndcg@10 "
                    "| query max abs diff |", "|---|---|---|---|---|---|---|"]
            for dtype, q in r["quantization"].items():
                out.append(f"| {dtype} | {q['table_bytes']:,} | {q['bytes_vs_fp32']:.2f} | "
                           f"{q['recall_at_10_vs_fp32']:.4f} | {q['recall@10']:.4f} | {q['ndcg@10']:.4f} | "
                           f"{q['tower_max_abs_diff']:.2g} |")
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
    out += ["", f"Commits: {_commits(runs)}.", ""]
    return out


def bench_beam_tables(files: list[dict]) -> list[str]:
    """The beam-search benchmark (scripts/bench/bench_beam.py): users/s per decoder and the ratios of one run."""
    out = []
    for r in files:
        if r.get("kind") != "bench_beam":
            continue
        variants = list(dict.fromkeys(x["variant"] for x in r["rows"]))
        speed = {(x["model"], x["beam"], x["variant"]): x for x in r["rows"]}
        env = r["environment"]
        out += ["## Beam search speed", "",
                f"`results/{r['name']}.json` (`scripts/bench/bench_beam.py`, commit `{r['commit'][:12]}`): users/s "
                f"decoding {r['rows'][0]['users']} {r['dataset']} test users (real histories, batches of "
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


def bench_prefetch_runs_tables(files: list[dict]) -> list[str]:
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


def bench_preprocess_tables(files: list[dict]) -> list[str]:
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
        out += ["", "Engines: `pandas` is today's path (the log as a DataFrame); `polars` is genrec's streamed path "
                    "(`data.reader.engine=polars`, the default `auto` for Parquet: two Polars streaming passes, then "
                    "k-core, remap and time order in NumPy on int32 codes); `polars_lazy` and `duckdb` are the same "
                    "pipeline written entirely in one engine (the script holds them), measured to choose the design.",
                ""]
    return out


def sweep_tables(files: list[dict]) -> list[str]:
    """Optuna sweeps (``genrec-train -m hparams_search=<preset>``, genrec/sweep): the best trial's test metrics beside
    the preset's own runs (``<study>_seed*``) and the baselines measured in the best trial's run, the trials'
    outcomes, the search space and the parameter importances."""
    out = []
    for r in files:
        if r.get("kind") != "hparams_search" or not r.get("best_trial"):
            continue
        best = r["best_trial"]
        run = best["run"]
        preset = [f for f in files if f.get("name", "").startswith(f"{r['study_name']}_seed") and "metrics" in f]
        retried = [t for t in r["trials"] if t.get("retry_of") is not None]
        epochs = best["config"].get("trainer", {}).get("max_epochs")
        out += [f"## Hyperparameter search: {r['study_name']}", "",
                f"`results/{r['name']}.json` (`genrec-train -m hparams_search={r['study_name']} "
                f"{' '.join(a for a in r['arguments'] if not a.startswith('hparams_search='))}`, commit "
                f"`{r['commit'][:12]}`): {r['n_trials']} trials of Optuna's {r['sampler']} with the {r['pruner']} "
                f"(trials of at most {epochs} epochs), the study in SQLite. Outcomes: "
                + ", ".join(f"{n} {state.lower()}" for state, n in sorted(r["states"].items()))
                + "".join(f"; trial {t['retry_of']}, interrupted when the sweep was stopped (SIGKILL), counted as "
                          f"failed and was retried as trial {t['number']} "
                          + ("resuming its run folder" if t["run_dir"].endswith(f"trial_{t['retry_of']}")
                             else "from the start") + f" (then {t['state'].lower()})" for t in retried)
                + f". Best trial {best['number']} (validation score {r['direction']}d: {best['value']:.4f}): "
                + ", ".join(f"`{k}={v:.3g}`" if isinstance(v, float) else f"`{k}={v}`"
                            for k, v in best["params"].items()) + ".", "",
                "| model | " + " | ".join(COLUMNS) + " | note |", "|---" * (len(COLUMNS) + 2) + "|",
                f"| {run['model']} (best trial) | " + " | ".join(f"{run['metrics']['test'][c]:.4f}" for c in COLUMNS)
                + f" | {run['epochs_run']} epochs (best {run['best_epoch']}) |"]
        if preset:
            out.append(f"| {preset[0]['model']} (preset `{r['study_name']}`) | "
                       + " | ".join(_cell([p["metrics"]["test"][c] for p in preset]) for c in COLUMNS)
                       + f" | seeds {', '.join(str(p['seed']) for p in preset)}; {_budget(preset)} |")
        for name, baseline in sorted(run["baselines"].items()):
            out.append(f"| {name} | " + " | ".join(f"{baseline['test'][c]:.4f}" for c in COLUMNS)
                       + " | the best trial's run |")
        verdicts = []
        for metric in ("recall@10", "ndcg@10"):
            name, baseline = max(run["baselines"].items(), key=lambda kv: kv[1]["test"][metric])
            score = run["metrics"]["test"][metric]
            verdicts.append(f"on {metric} the best trial ({score:.4f}) "
                            + ("beats" if score > baseline["test"][metric] else "does **not** beat")
                            + f" the best baseline (`{name}`, {baseline['test'][metric]:.4f})")
        if preset:
            verdicts.append(f"its trials ran at most {epochs} epochs, the preset's runs "
                            f"{statistics.mean(p['epochs_run'] for p in preset):.0f} on average")
        out += ["", "Plainly: " + "; ".join(verdicts) + "."]
        space = ", ".join(f"`{k}`: `{v}`" for k, v in r["params"].items())
        importances = ", ".join(f"`{k}` {v:.2f}" for k, v in r["importances"].items()) or "–"
        out += ["", f"Search space: {space}. Parameter importances (Optuna's default evaluator over the completed "
                    f"trials): {importances}. Plots beside the sweep: {', '.join(r['plots'])}.", ""]
    return out


def _is_synthetic(entry: dict) -> bool:
    return entry["config"]["reader"]["_target_"].endswith("generate_synthetic")


def data_stats_tables(files: list[dict]) -> list[str]:
    """The datasets side by side (scripts/analysis/data_stats.py): one column per dataset, the range of the real ones,
    and whether each synthetic dataset falls inside it."""
    out = []
    for r in files:
        if r.get("kind") != "data_stats":
            continue
        datasets = r["datasets"]
        real = [n for n, d in datasets.items() if not _is_synthetic(d)]
        synthetic = [n for n, d in datasets.items() if _is_synthetic(d)]
        out += ["## Data statistics", "",
                f"`results/{r['name']}.json` (`scripts/analysis/data_stats.py`, commit `{r['commit'][:12]}`): every "
                "dataset read and preprocessed exactly as `genrec-train data=<name>` does; definitions in "
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


def bench_telemetry_tables(files: list[dict]) -> list[str]:
    """Telemetry's overhead (scripts/bench/bench_telemetry.py) and the telemetry of its SASRec and HSTU trainings."""
    out = []
    for r in files:
        if r.get("kind") != "bench_telemetry":
            continue
        st = r["settings"]
        out += [f"## Benchmark: telemetry overhead (`results/{r['name']}.json`)", "",
                f"The same training steps with telemetry on and off, {st['pairs']} pairs per model in one process, "
                f"the order alternating; {st['steps']} timed steps each after {st['warmup']} untimed, "
                f"{st['threads']} torch thread(s), telemetry and Lightning logging every {st['every_n_steps']} steps "
                f"to the default loggers (CSV + TensorBoard); data: {st['data']}. Goal: {r['goal']}.", "",
                "| model | off ms/step | on ms/step | mean step: overhead, median (range) | CPU per step | "
                "fastest step | telemetry's own code per step | share of the step |",
                "|---|---|---|---|---|---|---|---|"]

        def span(m: dict, key: str) -> str:
            return f"{m[key + '_median']:+.2%} ({m[key + '_min']:+.1%} .. {m[key + '_max']:+.1%})"

        for model, m in r["models"].items():
            own = m["self_timed"]
            out.append(f"| {model} | {m['off_step_ms_median']:.1f} | {m['on_step_ms_median']:.1f} | "
                       f"{span(m, 'overhead')} | {span(m, 'cpu_overhead')} | {span(m, 'fastest_overhead')} | "
                       f"{own['telemetry_us_per_step']:.0f} µs | {own['share_of_step']:.3%} |")
        note = r["machine_note"]
        worst = max(m["self_timed"]["share_of_step"] for m in r["models"].values())
        spans_zero = all(m[f"{key}_min"] < 0 < m[f"{key}_max"] for m in r["models"].values()
                         for key in ("overhead", "cpu_overhead"))
        out += ["", f"{note[0].upper() + note[1:]}. The last two columns time telemetry's hooks and profiler wrapper "
                    "directly (in one more training per model, timers included).", "",
                f"**Goal < 2%: {'met' if worst < 0.02 else 'NOT met'}** by the direct measure (telemetry's own code: "
                f"at most {worst:.3%} of a step)"
                + ("; the on/off medians lie inside the spread of the pairs, which on this machine cannot resolve "
                   "a difference this small." if spans_zero else "."), "",
                "Telemetry of the same trainings (the \"on\" training with the median step time; per process):", "",
                "| model | sequences/s | positions/s | step ms (mean / median) | data | forward | backward | "
                "optimizer | other | peak RSS GiB | GPU |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for model, m in r["models"].items():
            t = m["telemetry_summary"]
            shares = " | ".join(f"{t['parts_share'][p]:.1%}" for p in ("data", "forward", "backward", "optimizer",
                                                                      "other"))
            gpu = t.get("gpu", {})
            gpu = f"skipped: {gpu['skipped']}" if "skipped" in gpu else f"{gpu['util_pct_mean']:.0f}% utilisation"
            out.append(f"| {model} | {t['samples_per_s']:.1f} | {t['positions_per_s']:.0f} | "
                       f"{t['step_ms']['mean']:.0f} / {t['step_ms']['median']:.0f} | {shares} | "
                       f"{t['peak_rss_gib']:.2f} | {gpu} |")
        out += ["", f"Commit `{r['commit'][:12]}`, torch {r['environment']['torch']}.", ""]
    return out


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
    return out + ["", "\"Python beside a tier-2 write\": a pure-Python loop's speed in another thread while the store "
                  "writes batches of 4,096 rows, relative to its speed alone (below 1: the write holds the interpreter "
                  "lock, or the cores are busy).", ""]


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
        out += ["", "Timed on the machine as it was (above): on cores oversubscribed by other jobs, the mapping thread "
                "gets a scheduler share of its own that the one-thread step does not, so an all-in-memory step far "
                "above its time on a quiet machine (the other dynamic-table runs) means this ratio measured that as "
                "well as the overlap (docs/DYNAMIC_EMBEDDINGS.md)."]
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


def bench_dynamic_tables(files: list[dict]) -> list[str]:
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


def dynamic_quality_tables(files: list[dict]) -> list[str]:
    """Dynamic item tables vs the static table on real data (scripts/recipes/reproduce_dynamic_quality.py): admission
    thresholds under leave-one-out, with genrec's most-popular and transition baselines from the same runs."""
    out = []
    for r in files:
        if r.get("kind") != "dynamic_quality" or r.get("quick"):
            continue
        out += ["## Dynamic item tables: quality", "",
                f"`results/{r['name']}.json` (`scripts/recipes/reproduce_dynamic_quality.py`, commit "
                f"`{r['commit'][:12]}`; "
                f"{r['machine_note']})."]
        if "loo" in r:
            loo = r["loo"]
            by_variant: dict[str, list[dict]] = defaultdict(list)
            for run in loo["runs"]:
                by_variant[run["variant"]].append(run)
            first = loo["runs"][0]
            out += ["", f"{r['dataset']}, SASRec (2 layers, D = 64, inputs the last {r['max_len']} items), "
                    "leave-one-out through genrec-train, full softmax, the item table trained by row-wise Adagrad "
                    f"(lr {r['row_optimizer']['lr']}) in every variant; at most {loo['max_epochs']} epochs, early "
                    f"stopping on validation NDCG@10 (patience {loo['early_stopping_patience']}), test metrics of "
                    "the best validation checkpoint. static: the TorchRec table holding every item; min_count=k: "
                    "the dynamic table keyed by raw item ID, an item gets a row once it occurred k times as an "
                    "input, counted over the epochs (until then it reads zeros). Rows stored: the best checkpoint's "
                    "live rows; "
                    f"{loo['items_with_input_occurrences']:,} of the {loo['items']:,} items occur as an input "
                    f"(items seen fewer than k times: "
                    + ", ".join(f"k={k}: {n}" for k, n in loo["items_below"].items()) + ").", "",
                    "| table | test NDCG@10 | test Recall@10 | rows stored | rows after epoch 1 | seeds "
                    "| epochs (best) |", "|---|---|---|---|---|---|---|"]
            for variant, runs in by_variant.items():
                epochs = ", ".join(f"{x['epochs_run']} ({x['best_epoch']})" for x in runs)
                out.append(f"| {variant} | {_cell([x['test']['ndcg@10'] for x in runs])} "
                           f"| {_cell([x['test']['recall@10'] for x in runs])} "
                           f"| {statistics.mean(x['rows_stored'] for x in runs):,.0f} "
                           f"| {statistics.mean(x['rows_after_epoch_1'] for x in runs):,.0f} "
                           f"| {', '.join(str(x['seed']) for x in runs)} | {epochs} |")
            for name, metrics in first["baselines"].items():
                out.append(f"| {name} (baseline) | {metrics['ndcg@10']:.4f} | {metrics['recall@10']:.4f} | – | – "
                           "| – | – | 1 |")
            best_baseline = max(m["ndcg@10"] for m in first["baselines"].values())
            below = [v for v, runs in by_variant.items()
                     if statistics.mean(x["test"]["ndcg@10"] for x in runs) <= best_baseline]
            out += ["", "Every table beats both baselines on test NDCG@10." if not below else
                    f"Not above the best baseline on test NDCG@10: {', '.join(below)}.",
                    "Run commits: " + ", ".join(f"`{c[:12]}`" for c in sorted({x["commit"] for x in loo["runs"]}))
                    + "."]
        if "new_items" in r:
            out += _new_items_table(r["new_items"])
        out.append("")
    return out


def _new_items_table(part: dict) -> list[str]:
    """Part new_items of scripts/recipes/reproduce_dynamic_quality.py: items first seen after the training cut."""
    runs, sizes = part["runs"], part["sizes"]
    first = runs[0]
    seeds = ", ".join(str(x["seed"]) for x in runs)

    def cell(pick) -> str:
        return _cell([pick(x) for x in runs])

    out = ["", f"**New items** (commit `{part['commit'][:12]}`, seeds {seeds}, mean ± std): a time split of the same "
           f"data. The models train {sizes['train_epochs']} epochs on the events before T1 (the "
           f"{sizes['q1']:.0%} quantile of event time), then adapt online with one pass over the events before T2 "
           f"(the {sizes['q2']:.0%} quantile); test: the {first['targets']['all']:,} events from T2 on whose user "
           "has an earlier event, each predicted from the history before it. By the target's first appearance: "
           f"{first['targets']['old']:,} old (before T1), {first['targets']['new']:,} new (in [T1, T2), "
           f"{first['items_new_in_adaptation']} items: what the dynamic table can admit and the static table "
           f"cannot), {first['targets']['unseen']:,} unseen (after T2: a miss for every model). The static table "
           "keeps its vocabulary of the items seen before T1 (it cannot rank the new items); `static, rebuilt at "
           "T2` is the offline remap + retrain on everything before T2 that a static table needs instead; the "
           "baselines count the events before T2.", "",
           "| table | NDCG@10 all, after training | NDCG@10 all, after adaptation | Recall@10 new-item targets "
           "| rows | new items with a row |", "|---|---|---|---|---|---|"]
    for variant in first["variants"]:
        def stage(x, key, variant=variant):
            return x["variants"][variant].get(key)
        before = cell(lambda x: stage(x, "after_training")["metrics"]["all"]["ndcg@10"]) \
            if stage(first, "after_training") else "–"
        out.append(f"| {variant.replace('_', ' ')} | {before} "
                   f"| {cell(lambda x: stage(x, 'after_adaptation')['metrics']['all']['ndcg@10'])} "
                   f"| {cell(lambda x: stage(x, 'after_adaptation')['metrics']['new']['recall@10'])} "
                   f"| {statistics.mean(stage(x, 'after_adaptation')['rows'] for x in runs):,.0f} "
                   f"| {statistics.mean(stage(x, 'after_adaptation')['new_items_with_rows'] for x in runs):,.0f} |")
    for name, metrics in first["baselines"]["after_adaptation"].items():
        out.append(f"| {name} (baseline) | – | {metrics['all']['ndcg@10']:.4f} | {metrics['new']['recall@10']:.4f} "
                   "| – | – | 1 |")

    def adapted(variant: str, group: str, metric: str) -> float:
        return statistics.mean(x["variants"][variant]["after_adaptation"]["metrics"][group][metric] for x in runs)

    dynamic = [v for v in first["variants"] if v.startswith("min_count")]
    best = max(dynamic, key=lambda v: adapted(v, "all", "ndcg@10"))
    out += ["", f"After adaptation the dynamic tables rank new items (Recall@10 on new-item targets "
            f"{min(adapted(v, 'new', 'recall@10') for v in dynamic):.4f}–"
            f"{max(adapted(v, 'new', 'recall@10') for v in dynamic):.4f}; the static table: "
            f"{adapted('static', 'new', 'recall@10'):.4f}), but over all targets the best of them ({best}, NDCG@10 "
            f"{adapted(best, 'all', 'ndcg@10'):.4f}) is "
            f"{'above' if adapted(best, 'all', 'ndcg@10') > adapted('static', 'all', 'ndcg@10') else 'not above'} "
            f"the static table ({adapted('static', 'all', 'ndcg@10'):.4f}): new-item targets are "
            f"{first['targets']['new'] / first['targets']['all']:.1%} of the test here. The static table rebuilt "
            f"and retrained at T2 ({adapted('static_rebuilt_t2', 'all', 'ndcg@10'):.4f}) beats both: one online "
            "pass is not a retraining."]
    return out


STREAM_PROTOCOLS = {"online": "online, from scratch (each event trained on once, after it was ranked)",
                    "offline_frozen": "offline on the first 80% of time, then frozen",
                    "offline_retrained": "offline, retrained on everything before each retraining point",
                    "offline_then_online": "offline on the first 80% of time, then online from the split (a warm "
                                           "start)"}


def stream_vs_offline_tables(files: list[dict]) -> list[str]:
    """Offline vs online on the same last-20% events, prequentially (scripts/analysis/stream_vs_offline.py)."""
    out = []
    for r in files:
        if r.get("kind") != "stream_vs_offline" or r.get("quick"):
            continue
        metrics, model = ("recall@10", "ndcg@10", "mrr"), r["model"]
        out += [f"## Online vs offline: {r['dataset']} ({model})", "",
                f"`results/{r['name']}.json` (`scripts/analysis/stream_vs_offline.py`, commit `{r['commit'][:12]}`): "
                f"{r['machine_note']}. {r['events']:,} events replayed in timestamp order; the "
                f"{r['ranked_events']:,} targets from the split time on (the last 20% of events) ranked before "
                f"anything trains on them ({r['protocol']}). Offline: {r['offline_epochs']} epochs on the "
                f"{r['train_events']:,} events before the split; retrained one epoch every {r['retrain_days']} day(s) "
                f"of event time ({r['retrain_points']} points). Seeds {r['seeds']} (mean ± std); the baselines are "
                "updated online in the same run and have no seed.", "",
                "| method | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
        protocols = [p for p in STREAM_PROTOCOLS if p in r["runs"]]
        for protocol in protocols:
            runs = r["runs"][protocol]
            out.append(f"| {model}: {STREAM_PROTOCOLS[protocol]} | "
                       + " | ".join(_cell([x["all"][model][m] for x in runs]) for m in metrics) + " |")
        for name, b in r["baselines"].items():
            out.append(f"| {name} (online) | " + " | ".join(f"{b[m]:.4f}" for m in metrics) + " |")
        for name, v in r.get("variants", {}).items():
            out.append(f"| {model}: online, `{name}` ({', '.join(f'`{o}`' for o in v['overrides'])}) | "
                       + " | ".join(_cell([x["all"][model][m] for x in v["runs"]]) for m in metrics) + " |")
            for base, b in v["baselines"].items():
                if b != r["baselines"][base]:  # other micro-batches: the baselines are updated per micro-batch
                    out.append(f"| {base} (online, in `{name}`'s micro-batches) | "
                               + " | ".join(f"{b[m]:.4f}" for m in metrics) + " |")
        best_name, best = max(r["baselines"].items(), key=lambda kv: kv[1]["ndcg@10"])
        below = [p for p in protocols
                 if statistics.mean(x["all"][model]["ndcg@10"] for x in r["runs"][p]) <= best["ndcg@10"]]
        out += ["", (f"**Not better than the best baseline on ndcg@10** (`{best_name}`, {best['ndcg@10']:.4f}): "
                     + ", ".join(f"`{p}`" for p in below) + ".") if below else
                f"Every protocol beats the best baseline on ndcg@10 (`{best_name}`, {best['ndcg@10']:.4f}).", ""]
    return out


def bench_stream_tables(files: list[dict]) -> list[str]:
    """genrec-stream's throughput against offline training, the lag (results/bench_stream.json), and memory
    (results/bench_stream_memory.json), from scripts/bench/bench_stream.py."""
    out = []
    for r in files:
        if r.get("kind") != "bench_stream" or r.get("quick"):
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


#: the goal of issue 48: NDCG@10 at least this far above transitions_last3_skip within BUDGET_GOAL_SECONDS of CPU,
#: passing it within the first third of that budget
BUDGET_GOAL_MARGIN, BUDGET_GOAL_SECONDS = 0.10, 1800


def _pass_cell(runs: list[dict], split: str) -> str:
    """Mean CPU seconds to pass the heuristic on ``split`` over the runs that did, with how many did when not all;
    ``never`` when none did."""
    times = [r["cpu_seconds_to_pass"][split] for r in runs]
    passed = [t for t in times if t is not None]
    if not passed:
        return "never"
    text = f"{statistics.mean(passed):.0f}"
    return text if len(passed) == len(times) else f"{text} (passed {len(passed)}/{len(times)})"


def budget_tables(files: list[dict]) -> list[str]:
    """scripts/bench/bench_budget.py: per dataset, each model and recipe's final test metrics (best validation within
    the CPU budget), its margin over transitions_last3_skip, the CPU seconds it took to pass it, and the baselines'
    own cost."""
    by_dataset = defaultdict(lambda: defaultdict(list))
    for r in files:
        if r.get("kind") == "budget_curve":
            by_dataset[r["dataset"]["dataset"]][r["model"], r["recipe"]].append(r)
    out = []
    for dataset, groups in sorted(by_dataset.items()):
        first = next(iter(groups.values()))[0]
        heuristic = first["heuristic"]
        out += [f"## Time to pass `{heuristic}` at a CPU budget: {dataset}", "",
                "`scripts/bench/bench_budget.py`: one torch thread, process CPU seconds (the model's build, training "
                "and "
                "validation passes; not the curve's own test passes); test split at the best validation checkpoint; "
                f"mean ± std over seeds. Goal: test NDCG@10 at least +{BUDGET_GOAL_MARGIN:.0%} over `{heuristic}` "
                f"within {BUDGET_GOAL_SECONDS} CPU s, passing it within the first third.", "",
                "| model | recipe | valid ndcg@10 | test ndcg@10 | test recall@10 | margin (ndcg@10) | CPU s to pass "
                "(valid / test) | CPU s (best at) | goal | seeds | source |", "|---" * 11 + "|"]
        for (model, recipe), runs in sorted(groups.items()):
            final = [r["final"] for r in runs]
            margin = statistics.mean(f["margin_over_heuristic"]["ndcg@10"] for f in final)
            times = [r["cpu_seconds_to_pass"]["test"] for r in runs]
            # the budget itself stops every run (bench_budget's --cpu-seconds, recorded in the file)
            met = margin >= BUDGET_GOAL_MARGIN and all(t is not None and t <= BUDGET_GOAL_SECONDS / 3 for t in times)
            names = ", ".join(f"`results/{r['name']}.json`" for r in runs)
            out.append(f"| {model} | {recipe} | {_cell([f['valid']['ndcg@10'] for f in final])} | "
                       f"{_cell([f['test']['ndcg@10'] for f in final])} | "
                       f"{_cell([f['test']['recall@10'] for f in final])} | {margin:+.1%} | "
                       f"{_pass_cell(runs, 'valid')} / {_pass_cell(runs, 'test')} | "
                       f"{statistics.mean(r['cpu_seconds_run'] for r in runs):.0f} "
                       f"({statistics.mean(f['cpu_seconds'] for f in final):.0f}) | {'yes' if met else 'no'} | "
                       f"{', '.join(str(r['seed']) for r in runs)} | {names} |")
        for name, baseline in first["baselines"].items():
            cost = baseline["cpu_seconds"]
            out.append(f"| {name} (baseline) | – | {baseline['valid']['ndcg@10']:.4f} | "
                       f"{baseline['test']['ndcg@10']:.4f} | {baseline['test']['recall@10']:.4f} | – | – | "
                       f"{cost['total']:.1f} (build {cost['build']:.1f}) | – | – | "
                       f"`results/{first['name']}.json` |")
        out += ["", f"Commits: {_commits([r for runs in groups.values() for r in runs])}.", ""]
    return out


#: the detail pages under docs/results/: file stem -> (title, the section renderers in page order); a renderer in
#: GR_RENDERERS reads every file (issue 45's sections also read the files they compare with), the others the rest
PAGES = {
    "generative": ("Generative retrieval: semantic IDs, generators, post-training", [
        "generative_retrieval_tables", "cold_start_tables", "codes_tries_tables", "gpu_recipe_tables",
        "ranking_tables", "sid_source_tables", "diagnosis_tables", "post_training_tables", "curve_tables",
        "tokenizer_tables"]),
    "features": ("Side features and actions", ["feature_tables"]),
    "dynamic": ("Dynamic embedding tables", ["bench_dynamic_tables", "dynamic_quality_tables",
                                             "bench_prefetch_runs_tables"]),
    "streaming": ("Online training (genrec-stream)", ["stream_vs_offline_tables", "bench_stream_tables"]),
    "speed": ("Speed and memory benchmarks", [
        "benchmark_tables", "hstu_peer_tables", "kernel_tables", "bench_beam_tables", "bench_telemetry_tables",
        "bench_fsdp_tables", "bench_pipeline_tables", "bench_precision_tables", "bench_compile_tables",
        "bench_preprocess_tables"]),
    "serving": ("Export and sweeps", ["export_tables", "sweep_tables"]),
}
GR_RENDERERS = {"generative_retrieval_tables", "cold_start_tables", "codes_tries_tables"}
HEADER = ["Generated by `scripts/docs/make_results_doc.py` from `results/*.json`; do not edit by hand.",
          "Every row links the file(s) it comes from; each file records the dataset, config, seed and commit.",
          "Metrics are fractions (recall@10 = 0.06 means 6% of test users have their item in the top 10).", ""]


def main() -> None:
    files = [load_result(p) | {"name": p.stem} for p in sorted(RESULTS.glob("*.json"))]
    others = [f for f in files if not any(tag in f["name"] for tag in GR_TAGS)]
    index = ["| page | sections |", "|---|---|"]
    (DOC.parent / "results").mkdir(parents=True, exist_ok=True)
    for stem, (title, renderers) in PAGES.items():
        body = []
        for name in renderers:
            body += globals()[name](files if name in GR_RENDERERS else others)
        sections = [line[3:] for line in body if line.startswith("## ")]
        index.append(f"| [{title}](results/{stem}.md) | {'; '.join(sections) or 'no results yet'} |")
        page = [f"# Results: {title}", "", "Back to the summary: [results.md](../results.md).", *HEADER, *body]
        (DOC.parent / "results" / f"{stem}.md").write_text("\n".join(page) + "\n")
    lines = ["# Results", "", *HEADER,
             "This page holds the headline tables: each dataset's models beside the most-popular and item-transition "
             "baselines measured in the same protocol, and the time each takes to pass the transition baseline. "
             "Everything else is on a detail page:", "", *index, ""]
    lines += data_stats_tables(others)
    lines += training_tables(others)
    lines += budget_tables(others)
    DOC.write_text("\n".join(lines) + "\n")
    print(f"wrote {DOC} and {len(PAGES)} pages under {DOC.parent / 'results'} from {len(files)} result files")


if __name__ == "__main__":
    main()
