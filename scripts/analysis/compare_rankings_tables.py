"""The docs tables of scripts/analysis/compare_rankings.py: the same generator checkpoints ranked several ways, and
issue 45's ranking table (``*_gr_rankings``, scripts/recipes/reproduce_generative_retrieval.sh PART=ranking).
"""
from __future__ import annotations

import json
import re
import statistics

from scripts.docs.tables.common import _cell, _change, _commits, _mean_of, prose
from scripts.docs.tables.post_training import _post_prefix, _stage, _stage_label


#: the named rankings of conf/ranking (scripts/analysis/compare_rankings.py --mode) in words
RANKING_MODES = {"codes": "the beam over semantic IDs by code log-probability",
                 "head": "the item head over every item, no beam",
                 "liger": "the codes' beam proposes, the item head orders it (LIGER)",
                 "guided": "a beam steered by the item head, items by 0.5 x code + head log-probability"}


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
        out += ["", f"Commits: {_commits([comp] + [r for r in comp['runs'] if 'commit' in r] + generators)}.", ""]
        out += _ranking_reading(modes, comp, [by_name[n] for n in by_name
                                              if n.startswith(f"{dataset}_gr_sasrec_distill_seed")])
    return out


#: issue 45's goal for codes alone, per dataset: test NDCG@10 and where it comes from
CODES_GOAL = {"beauty": (0.0424, "ActionPiece's published figure (ICML 2025), the best generative one in this protocol")}


def _ranking_reading(modes: dict[str, list[dict]], comp: dict, distilled: list[dict]) -> list[str]:
    """What the ranking table says, from its own figures (test NDCG@10, mean over seeds)."""
    mean = {mode: _mean_of(rows, "test", "ndcg@10") for mode, rows in modes.items() if rows}
    best_name, best = max(((n, b["test"]["ndcg@10"]) for n, b in comp["baselines"].items()), key=lambda x: x[1])
    goal = CODES_GOAL.get(comp["dataset"]["dataset"])
    lines = [f"Reading (test NDCG@10, mean over seeds): codes alone {mean.get('codes', float('nan')):.4f} "
             f"({_change(mean['codes'], best)} against the best baseline, `{best_name}` {best:.4f}"
             + (f"; the goal for codes alone is {goal[0]:.4f}, {goal[1]}" if goal else "") + ")"
             if "codes" in mean else "Reading:"]
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


def tables(files: list[dict]) -> list[str]:
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
        out.append(prose("rankings", dataset))
    return out
