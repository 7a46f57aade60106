"""What the results renderers share: the published numbers quoted beside measured ones, the table cells (mean ± std
over seeds), a run's label, split and budget, the line that says which models do not beat the best baseline, and
:func:`prose`, the placeholder of a paragraph held in the Markdown templates (scripts/docs/templates/).
"""
from __future__ import annotations

import statistics


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


COLUMNS = ["recall@5", "ndcg@5", "recall@10", "ndcg@10", "mrr"]


#: the margin issue 3 asks of HSTU over a tuned SASRec in NDCG@10 (Meta's README, ML-1M: HSTU +7.3%,
#: HSTU-large +18%; ML-20M: HSTU-large +29%)
GOAL_OVER_SASREC = 0.08


#: results of scripts/recipes/reproduce_generative_retrieval.sh, shown in their own sections (not the training tables)
GR_TAGS = ("_gr_", "_cold_", "_codes_")


def in_own_section(run: dict) -> bool:
    """Whether a results file belongs to issue 45's sections (:data:`GR_TAGS`): the other tables leave it out."""
    return any(tag in run.get("name", "") for tag in GR_TAGS)


def prose(*key: str) -> str:
    """The line that stands for the paragraphs of ``<!-- prose:KEY -->`` in scripts/docs/templates/ (the parts of
    ``key`` joined by ``:``, e.g. ``prose("training", "beauty")``); make_results_doc fills it, with nothing where no
    template holds that key."""
    return "{{ prose:" + ":".join(key) + " }}"


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


def _mean(runs: list[dict], split: str, metric: str) -> float:
    return statistics.mean(r["metrics"][split][metric] for r in runs)


def _mean_of(rows: list[dict], split: str, metric: str) -> float:
    return statistics.mean(r["metrics"][split][metric] for r in rows)


def _change(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:+.1f}%"


def _on_gpu(run: dict) -> bool:
    return bool(run.get("environment", {}).get("cuda")) and "metrics" in run


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
