"""The docs table of scripts/analysis/data_stats.py: the datasets side by side, and whether each synthetic dataset
falls inside the range of the real ones.
"""
from __future__ import annotations

from collections import defaultdict

from scripts.docs.tables.common import prose


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


def _is_synthetic(entry: dict) -> bool:
    return entry["config"]["reader"]["_target_"].endswith("generate_synthetic")


def tables(files: list[dict]) -> list[str]:
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
        out += ["", prose("data_stats")]
    return out
