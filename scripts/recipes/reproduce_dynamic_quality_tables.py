"""The docs table of scripts/recipes/reproduce_dynamic_quality.py: dynamic item tables against the static table on
real data.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

from scripts.docs.tables.common import _cell


def tables(files: list[dict]) -> list[str]:
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
