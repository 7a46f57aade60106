"""Generator runs of the generative recipes (genrec-train over semantic IDs): the SID-source comparison
(scripts/recipes/reproduce_beauty_sid_sources.sh) and the tries for codes that rank on their own
(scripts/recipes/reproduce_generative_retrieval.sh PART=codes).
"""
from __future__ import annotations

import re
from collections import defaultdict

from scripts.analysis.compare_rankings_tables import CODES_GOAL
from scripts.docs.tables.common import (COLUMNS, _budget, _cell, _change, _commits, _label, _mean_of, _row, _split,
                                        below_baselines, in_own_section, prose)
from scripts.docs.tables.post_training import _post_prefix


#: results of scripts/recipes/reproduce_beauty_sid_sources.sh (<dataset>_sidsrc_<source>_seed<S>): their own table
SID_SOURCE_TAG = "_sidsrc_"


def _sid_source_label(tokenize: dict) -> str:
    """A SID table's item embedding, and its code layout where it is not the default RQ-VAE + collision level."""
    layout = f"{tokenize['tokenizer']['name']}, {tokenize['collisions']}"
    return tokenize["encoder"]["name"] + ("" if layout == "rqvae, extra_level" else f" ({layout})")


def sid_source_tables(files: list[dict]) -> list[str]:
    """The generator at one budget over SID tables made from different item embeddings (text, collaborative,
    fused; scripts/recipes/reproduce_beauty_sid_sources.sh), per dataset, beside the baselines and SASRec of the
    protocol (not issue 45's, :func:`in_own_section`)."""
    files = [r for r in files if not in_own_section(r)]
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
        out.append(prose("sid_sources", dataset))
    return out


#: issue 45's stretch for codes alone on Beauty (transitions_last3_skip); the goal is the ranking table's CODES_GOAL
CODES_STRETCH = 0.0500


CODES_TRIES = {"control": "the ranking table's generator recipe, chosen by its codes",
               "first1024": "SIDs with a first codebook of 1,024 codes (RQ-VAE 1024 x 256 x 256 + collisions)",
               "level_swap": "the same RQ-VAE codes with the first two levels swapped (`level_order=[1,0,2]`)",
               "gpu_recipe": "the GPU recipe on the CPU: batches of 1,024, lr 2e-3, 200 warm-up steps, cosine, 40 "
                             "epochs validated every 4"}


def _codes_try(name: str) -> str | None:
    """``<dataset>_codes_<try>_seed<S>`` -> the try's name (``None``: not a codes try)."""
    match = re.fullmatch(r"[a-z0-9]+_codes_(.+)_seed\d+", name)
    return match[1] if match else None


def sizes_of(run: dict) -> str:
    """A generator run's SID codebook sizes, e.g. ``256 x 256 x 256 x 16``."""
    return " x ".join(str(k) for k in run["sid_table"]["codebook_sizes"])


def codes_tries_tables(files: list[dict]) -> list[str]:
    """Issue 45's changes for codes that rank on their own (``PART=codes``), per dataset: each try's codes-only
    validation (the choice) and test figures against the control, and on Beauty the goal's gap."""
    by_dataset = defaultdict(lambda: defaultdict(list))
    for r in sorted((f for f in files if _codes_try(f["name"]) and "metrics" in f), key=lambda f: f["seed"]):
        by_dataset[r["dataset"]["dataset"]][_codes_try(r["name"])].append(r)
    rankings = {f["dataset"]["dataset"]: f for f in files
                if f.get("kind") == "ranking_comparison" and f["name"].endswith("_gr_rankings")}
    by_name = {f["name"]: f for f in files}
    out = []
    for dataset, tries in sorted(by_dataset.items()):
        order = sorted(tries, key=lambda n: list(CODES_TRIES).index(n) if n in CODES_TRIES else len(CODES_TRIES))
        ranking = rankings.get(dataset)
        by_head = [r for r in ranking["runs"] if r["mode"] == "codes"] if ranking else []
        generator = by_name.get(by_head[0]["results_name"]) if by_head else None
        out += _codes_tries_table(dataset, {name: tries[name] for name in order}, by_head,
                                  sizes_of(generator) if generator else "–", ranking["name"] if ranking else "")
    return out


def _codes_tries_table(dataset: str, by_try: dict[str, list[dict]], by_head: list[dict], head_sizes: str,
                       ranking_name: str) -> list[str]:
    """One dataset's table of :func:`codes_tries_tables`. ``by_head``: the codes rows of the dataset's ranking table
    (``ranking_name``, SID codebooks ``head_sizes``), the same recipe as the control with its checkpoint chosen by the
    head: the reference where a dataset has no control run."""
    runs = [r for tries in by_try.values() for r in tries]
    out = [f"## Codes that rank on their own: {dataset}", "",
           prose("codes_tries", "intro"), "",
           "| try | change | SID codebooks | valid ndcg@10 (the choice) | test recall@10 | test ndcg@10 | seeds | "
           "epochs (best), train time | source |", "|" + "---|" * 9]
    def figures(rows: list[dict]) -> str:  # valid ndcg@10 | test recall@10 | test ndcg@10 | seeds
        cells = [_cell([r["metrics"][split][metric] for r in rows])
                 for split, metric in (("valid", "ndcg@10"), ("test", "recall@10"), ("test", "ndcg@10"))]
        return " | ".join(cells + [", ".join(str(r["seed"]) for r in rows)])

    for name, tries in by_try.items():
        out.append(f"| {name} | {CODES_TRIES.get(name, name)} | {sizes_of(tries[0])} | {figures(tries)} | "
                   f"{_budget(tries)} | " + ", ".join(f"`results/{r['name']}.json`" for r in tries) + " |")
    if by_head:
        out.append(f"| the ranking table's generators | none; the checkpoint chosen by the head, ranked by its codes | "
                   f"{head_sizes} | {figures(by_head)} | – | `results/{ranking_name}.json` |")
    for name, b in runs[0].get("baselines", {}).items():  # the same splits for every try
        out.append(f"| {name} (baseline) | – | – | {b['valid']['ndcg@10']:.4f} | {b['test']['recall@10']:.4f} | "
                   f"{b['test']['ndcg@10']:.4f} | – | – | `results/{runs[0]['name']}.json` |")
    best = max(by_try, key=lambda n: _mean_of(by_try[n], "valid", "ndcg@10"))
    test = _mean_of(by_try[best], "test", "ndcg@10")
    control = by_try.get("control")
    target = CODES_GOAL.get(dataset, (None,))[0]
    goal = (f" Goal {target} (ActionPiece): **{'met' if test >= target else 'not met'}**, gap "
            f"{_change(test, target)}; stretch {CODES_STRETCH}: gap {_change(test, CODES_STRETCH)}."
            if target else "")
    against = (f", {_change(test, _mean_of(control, 'test', 'ndcg@10'))} against the control" if control else
               f", {_change(test, _mean_of(by_head, 'test', 'ndcg@10'))} against the ranking table's generators' "
               "codes" if by_head else "")
    out += ["", f"Commits: {_commits(runs)}.", "",
            f"Validation picks `{best}` (test NDCG@10 {test:.4f} over {len(by_try[best])} seed"
            f"{'s' if len(by_try[best]) > 1 else ''}{against})." + goal, ""]
    return out
