"""The docs table of scripts/analysis/stream_vs_offline.py: offline vs online on the same last-20% events."""
from __future__ import annotations

import statistics

from scripts.docs.tables.common import _cell


STREAM_PROTOCOLS = {"online": "online, from scratch (each event trained on once, after it was ranked)",
                    "offline_frozen": "offline on the first 80% of time, then frozen",
                    "offline_retrained": "offline, retrained on everything before each retraining point",
                    "offline_then_online": "offline on the first 80% of time, then online from the split (a warm "
                                           "start)"}


def tables(files: list[dict]) -> list[str]:
    """Offline vs online on the same last-20% events, prequentially (scripts/analysis/stream_vs_offline.py)."""
    out = []
    for r in files:
        if r.get("kind") != "stream_vs_offline" or r.get("quick"):
            continue
        metrics, model = ("recall@10", "ndcg@10", "mrr"), r["model"]
        variants = f", and {', '.join(r['variants'])}" if r.get("variants") else ""
        out += [f"## Online vs offline: {r['dataset']} ({model}{variants})", "",
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
