"""SASRec and HSTU with and without side features and actions (genrec-train runs with ``model.features``,
scripts/recipes/reproduce_hstu.sh): docs/results/features.md.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

from scripts.docs.tables.common import (GOAL_OVER_SASREC, _budget, _cell, _commits, _features, _mean, _split,
                                        in_own_section, prose)
from scripts.docs.tables.post_training import _post_prefix


#: the HSTU configurations the features tables compare with SASRec (model.name)
HSTU_MODELS = ("hstu", "hstu_large")


def _dropout(run: dict) -> float | None:
    """The run's ``model.encoder.dropout`` (the knob the features tables vary), None where not recorded."""
    return ((run.get("config", {}).get("model") or {}).get("encoder") or {}).get("dropout")


def _best_by_validation(configs: dict[str, list[dict]]) -> str | None:
    """The configuration whose runs have the best mean *validation* NDCG@10 (test scores never pick a model)."""
    return max(configs, key=lambda c: _mean(configs[c], "valid", "ndcg@10"), default=None)


def tables(files: list[dict], metrics: tuple[str, ...] = ("ndcg@10", "recall@10"),
                   goal: float = GOAL_OVER_SASREC) -> list[str]:
    """SASRec and HSTU with and without side features and actions (scripts/recipes/reproduce_hstu.sh, parts *_features),
    per dataset where any run used features: test metrics (mean ± std over seeds), the baselines, and HSTU against
    SASRec given the same inputs. Where a model ran with several dropouts, each is its own row and each model's
    comparison uses its configuration with the best validation NDCG@10. Issue 45's runs (:func:`in_own_section`) are
    left out."""
    by_dataset = defaultdict(list)
    for r in (r for r in files if not in_own_section(r)):
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
        out.append(prose("features", dataset))
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
