"""Check an export against genrec on every test user; measure its ANN indexes. Writes results/<name>.json.

    python scripts/check_export.py runs/<data>-<model>/<time>/export            # -> results/export_<dataset>.json
    python scripts/check_export.py <export dir> --results-name export_beauty_seed0

For every test user (whole history before the test item, as genrec's evaluation) it compares the top 10 served
by examples/retrieval_example.py (exported user tower + flat faiss index + ID map, history and padding removed)
with genrec's own ranking of the run's checkpoint (score_all, history removed, ties to the lower item ID), then
measures each exported index's recall@10 against that exact top 10 and the test recall/NDCG@10 it serves,
beside the baselines measured by genrec's evaluation on the same users. The export's quantised item tables
(``quantize``: fp16 / int8 through FBGEMM) are reported from its manifest: per precision the table's bytes, the
recall@10 of its top 10 against fp32 exact search and the test metrics it serves (genrec-export measures them on
the same test users).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples"), str(ROOT)]  # the serving example; this checkout's genrec
from retrieval_example import ExportedRetriever  # noqa: E402  (the serving path under test)

from genrec.eval.metrics import remove_seen  # noqa: E402
from genrec.training.builders import load_run  # noqa: E402
from genrec.train import evaluate_baselines  # noqa: E402
from genrec.utils.provenance import REPO_ROOT, provenance, write_json  # noqa: E402

K = 10


@torch.no_grad()
def framework_top_k(model, batch, k: int, exclude_history: bool) -> tuple[np.ndarray, np.ndarray]:
    """genrec's ranking: ``(B, k)`` dense IDs and scores, history (and padding) removed, ties to the lower ID."""
    scores = model.score_all(batch).float().clone()
    if exclude_history:
        remove_seen(scores, batch)
    top, ids = torch.sort(scores, dim=1, descending=True, stable=True)
    return ids[:, :k].numpy(), top[:, :k].numpy()


def served_metrics(top: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """recall@10 / ndcg@10 of ``top (U, k)`` dense IDs against one ``targets (U,)`` item per user."""
    hit_rank = [list(row).index(t) if t in row else None for row, t in zip(top, targets)]
    return {"recall@10": float(np.mean([r is not None for r in hit_rank])),
            "ndcg@10": float(np.mean([1 / math.log2(r + 2) if r is not None else 0.0 for r in hit_rank]))}


def history_times(data, batch, histories: list[list[int]]) -> tuple[list[list[int]], list[int]] | tuple[None, None]:
    """The times of every user's whole history (``histories``: each user's items before the target) and of its
    target (the request), read from the data: ``(times per history, request times)``, or Nones without times."""
    if data.timestamps is None:
        return None, None
    starts = data.offsets[batch.user_ids.numpy()]
    times = [data.timestamps[s:s + len(h)].tolist() for s, h in zip(starts, histories)]
    return times, [int(data.timestamps[s + len(h)]) for s, h in zip(starts, histories)]


def check(export_dir: Path, tie_tol: float = 1e-5) -> dict:
    manifest = json.loads((export_dir / "manifest.json").read_text())
    source = manifest["source"]
    run_dir = Path(source["run_dir"])
    train_cfg, datamodule, task = load_run(run_dir, source["checkpoint"])
    exclude = bool(train_cfg.eval.exclude_history)
    batches = list(datamodule.test_dataloader())
    histories = [[batch.seen_ids[a:b].tolist() for a, b in zip(batch.seen_offsets[:-1], batch.seen_offsets[1:])]
                 for batch in batches]
    times = [history_times(datamodule.data, batch, h) for batch, h in zip(batches, histories)]
    reference = [framework_top_k(task.model, batch, K, exclude) for batch in batches]
    exact_ids = np.concatenate([ids for ids, _ in reference])
    exact_scores = np.concatenate([scores for _, scores in reference])
    targets = np.concatenate([batch.target_ids.numpy() for batch in batches])

    indexes = {}
    for name in manifest["retrieval"]["indexes"]:
        retriever = ExportedRetriever(export_dir, name)
        started = time.perf_counter()
        served = [retriever.search_dense(h, K, *(t if retriever.with_time else (None, None)))
                  for h, t in zip(histories, times)]
        seconds = time.perf_counter() - started
        ids = np.concatenate([i for i, _ in served])
        scores = np.concatenate([s for _, s in served])
        entry = manifest["artifacts"][name]
        hits = sum(len(set(a) & set(e)) for a, e in zip(ids, exact_ids))
        indexes[name] = {"type": entry["type"], "params": entry["params"],
                         "recall_at_10_vs_exact": hits / exact_ids.size,
                         "ms_per_user": 1000 * seconds / len(ids), **served_metrics(ids, targets)}
        if entry["type"] == "flat":
            same = (ids == exact_ids).all(axis=1)
            # a differing list is a tie-order difference if the scores at every rank agree within tie_tol
            ties = ~same & np.isclose(scores, exact_scores, atol=tie_tol, rtol=0).all(axis=1)
            indexes[name]["parity"] = {
                "users": len(ids), "identical_top10": int(same.sum()), "tie_order_differences": int(ties.sum()),
                "other_differences": int((~same & ~ties).sum()),
                "max_abs_score_diff": float(np.abs(scores - exact_scores).max()), "tie_tolerance": tie_tol}
    framework = served_metrics(exact_ids, targets)
    baselines = evaluate_baselines(train_cfg, datamodule)
    return {
        "kind": "export_check",
        "dataset": datamodule.data.summary(),
        "model": manifest["model"],
        "seed": source["seed"],
        "export_dir": str(export_dir.resolve()),
        "run_dir": str(run_dir),
        "checkpoint": source["checkpoint"],
        "exclude_history": exclude,
        "framework_test": framework,
        "indexes": indexes,
        "skipped": manifest["skipped"],
        "tower_parity": {name: a["parity"] for name, a in manifest["artifacts"].items() if "parity" in a},
        "quantization": {dtype: {"table_bytes": q["table_bytes"], "bytes_vs_fp32": q["bytes_vs_fp32"],
                                 "recall_at_10_vs_fp32": q["recall_at_10_vs_fp32"],
                                 "tower_max_abs_diff": q.get("tower_max_abs_diff", 0.0),  # fp32: the reference
                                 **{m: q["test_metrics"][m] for m in ("recall@10", "ndcg@10")}}
                         for dtype, q in manifest["quantization"].items()},
        "baselines": {name: {m: b["test"][m] for m in ("recall@10", "ndcg@10")} for name, b in baselines.items()},
        **provenance(),
        "config": OmegaConf.to_container(train_cfg, resolve=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export_dir", type=Path)
    parser.add_argument("--results-name", default=None, help="default: export_<dataset>")
    args = parser.parse_args()
    out = check(args.export_dir)
    name = args.results_name or f"export_{out['dataset']['dataset']}"
    write_json(REPO_ROOT / "results" / f"{name}.json", {"name": name, **out})
    print(f"{out['dataset']['users']} test users; in-framework test recall@10 {out['framework_test']['recall@10']:.4f}")
    for index, r in out["indexes"].items():
        parity = r.get("parity")
        extra = (f"  identical top-10 {parity['identical_top10']}/{parity['users']}, tie-order "
                 f"{parity['tie_order_differences']}, other {parity['other_differences']}") if parity else ""
        print(f"  {index:<12} recall@10 vs exact {r['recall_at_10_vs_exact']:.4f}  served recall@10 "
              f"{r['recall@10']:.4f}  {r['ms_per_user']:.3f} ms/user{extra}")
    for dtype, q in out["quantization"].items():
        print(f"  {dtype:<12} item table {q['table_bytes']:,} bytes ({q['bytes_vs_fp32']:.2f}x fp32)  recall@10 vs "
              f"fp32 exact {q['recall_at_10_vs_fp32']:.4f}  test recall@10 {q['recall@10']:.4f}")
    print(f"wrote results/{name}.json")
    failed = out["indexes"].get("index_flat", {}).get("parity", {}).get("other_differences", 0)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
