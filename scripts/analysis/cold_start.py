"""Item cold start, measured (TIGER §4.3; LIGER): SID generators trained with ``data.split.cold_items`` (a share of the
items held out of training entirely; text semantic IDs place them by their content) ranked several ways, on every
validation and test target and on the targets that are cold items -> one results file.

Rows, per generator checkpoint (each run's best): ``codes`` (its beam by code log-probability over every item),
``codes_unseen`` (the same beam constrained to the cold items' IDs; ``--unseen-beam`` sets its width),
``codes_unseen_first`` (the cold items by their first code's log-probability, the level they most share with warm
items, ties broken by the second), ``head`` (its item head's top items: a cold item's row never trained, so it cannot
recommend one), ``hybrid_eps<ε>`` (the head's list of warm items with a share ε of its slots, evenly spaced, given to
``codes_unseen``'s best items: TIGER's ε); per dataset, once: ``semantic_knn`` (content embeddings, nearest to the
user's last three items) and ``semantic_knn_unseen`` (the same among the cold items), the counting baselines, and the
``--teacher`` run (a SASRec of the same split) if given.

Usage::

    python -m scripts.analysis.cold_start --out results/beauty_cold_start.json runs/gr/beauty/cold/gen-0 ... \\
        --teacher runs/gr/beauty/cold/teacher
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

COUNTING = ["most_popular", "transitions", "transitions_last3_skip"]


class Ranks:
    """The target ranks of several named rankings over one split's batches."""

    def __init__(self, ks: tuple[int, ...], exclude: bool):
        from genrec.eval.metrics import Evaluator

        self.ks, self.exclude, self.evaluator = ks, exclude, Evaluator
        self.ranks: dict[str, list[np.ndarray]] = {}
        self.targets: list[np.ndarray] = []
        self.columns = 0

    def add(self, batch, rows: dict[str, torch.Tensor]) -> None:
        """One batch's ``(B, C)`` score matrices, by row name."""
        self.targets.append(batch.target_ids.numpy())
        for name, scores in rows.items():
            self.columns = scores.shape[1]
            ranks = self.evaluator(self.ks, self.exclude).update(scores.float().clone(), batch)
            self.ranks.setdefault(name, []).append(ranks.numpy())

    def metrics(self, cold_items: np.ndarray) -> dict[str, dict]:
        """Each row's metrics on all, cold and warm targets (:func:`cold_split_metrics`)."""
        from genrec.eval.breakdown import RankedUsers
        from genrec.eval.cold_start import cold_split_metrics
        from genrec.eval.metrics import RankingMetrics

        targets, out = np.concatenate(self.targets), {}
        for name, parts in self.ranks.items():
            ranks = np.concatenate(parts)
            overall = RankingMetrics(self.ks)
            overall.update(torch.from_numpy(ranks), self.columns)
            ranked = RankedUsers(ranks, targets, np.zeros_like(ranks), self.columns, overall.compute())
            out[name] = cold_split_metrics(ranked, cold_items, self.ks)
        return out


def top_list(scores: torch.Tensor, k: int) -> torch.Tensor:
    """``scores (B, C)`` -> the same with every item outside each row's top ``k`` at ``-inf``."""
    top = scores.topk(k, dim=1)
    return torch.full_like(scores, float("-inf")).scatter(1, top.indices, top.values)


def generator_rows(task, batch, trie, cold_items: torch.Tensor, is_cold: torch.Tensor, epsilons: list[float],
                   unseen_beam: int | None = None) -> dict[str, torch.Tensor]:
    """One evaluation batch's score matrices of a generator checkpoint (history removed before any list is cut);
    ``unseen_beam``: the width of the beam among the cold items (default the model's)."""
    from genrec.eval.cold_start import among, reserve_share, unseen_items_beam, unseen_items_by_first_code
    from genrec.eval.metrics import remove_seen

    model = task.model
    columns = model.num_items + 1
    head = remove_seen(model.item_head_log_probs(batch), batch)
    unseen = unseen_items_beam(model, batch, trie, unseen_beam).score_matrix(columns)
    first = unseen_items_by_first_code(model, batch, cold_items)
    rows = {"codes": model.generate(batch).score_matrix(columns), "codes_unseen": unseen,
            "codes_unseen_first": top_list(first, model.top_k),
            "head": top_list(head, model.top_k)}
    warm = among(head, ~is_cold)
    for eps in epsilons:
        rows[f"hybrid_eps{eps:g}"] = reserve_share(warm, unseen, eps, model.top_k)
    return rows


def evaluate_generator(run_dir: Path, epsilons: list[float], unseen_beam: int | None = None) -> dict:
    from genrec.dist.checkpoint import read_meta
    from genrec.models.trie import PrefixTrie
    from genrec.runs import RunFolder, file_digest
    from genrec.training.builders import load_run

    path = RunFolder.existing(run_dir).checkpoint("best")
    cfg, datamodule, task = load_run(run_dir, path)
    data, model = datamodule.data, task.model
    if data.cold_items is None:
        raise SystemExit(f"cold_start: error: {run_dir} was trained without data.split.cold_items")
    if not getattr(model, "has_item_head", False):
        raise SystemExit(f"cold_start: error: {run_dir} has no item head (model.generator.item_head=true)")
    task.exclude_history = cfg.eval.exclude_history
    cold = torch.from_numpy(data.cold_items)
    trie = PrefixTrie(model.sids.codes[cold], model.sids.codebook_sizes)
    is_cold = torch.zeros(model.num_items + 1, dtype=torch.bool)
    is_cold[cold] = True
    started, metrics = time.time(), {}
    with torch.no_grad():
        for split, loader in (("valid", datamodule.val_dataloader()), ("test", datamodule.test_dataloader())):
            ranks = Ranks(tuple(cfg.eval.ks), cfg.eval.exclude_history)
            for batch in loader:
                ranks.add(batch, generator_rows(task, batch, trie, cold, is_cold, epsilons, unseen_beam))
            metrics[split] = ranks.metrics(data.cold_items)
    meta = read_meta(path)
    return {"run": str(run_dir), "results_name": cfg.get("results_name"), "seed": cfg.seed,
            "sid_table": {"folder": str(cfg.sid_table), "content_hash": model.sids.content_hash,
                          "encoder": (model.sid_config.get("encoder") or {}).get("name")},
            "checkpoint": {"file": str(path.relative_to(run_dir)), "sha256": file_digest(path),
                           "epoch": int(meta["epoch"]), "global_step": int(meta["global_step"])},
            "metrics": metrics, "seconds": round(time.time() - started, 1)}


def evaluate_others(run_dir: Path, teacher: Path | None) -> tuple[dict, dict, dict]:
    """The baselines (and the teacher) on the first generator's data -> (metrics, dataset summary, protocol)."""
    from genrec.data.split import PROTOCOLS, split_summary
    from genrec.eval.baselines import BASELINES
    from genrec.eval.cold_start import among
    from genrec.runs import RunFolder
    from genrec.training.builders import build_datamodule, load_run

    cfg = RunFolder.existing(run_dir).config()
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    data = datamodule.data
    is_cold = torch.zeros(data.num_items + 1, dtype=torch.bool)
    is_cold[torch.from_numpy(data.cold_items)] = True
    scorers = {name: BASELINES[name](data) for name in COUNTING + ["semantic_knn"]}
    if teacher is not None:
        teacher_cfg, teacher_data, teacher_task = load_run(teacher)
        if teacher_data.data.split != data.split:
            raise SystemExit(f"cold_start: error: --teacher {teacher} has split {teacher_data.data.split}, the "
                             f"generators {data.split}")
        scorers["teacher"] = teacher_task.make_scorer()
    metrics = {}
    with torch.no_grad():
        for split, loader in (("valid", datamodule.val_dataloader()), ("test", datamodule.test_dataloader())):
            ranks = Ranks(tuple(cfg.eval.ks), cfg.eval.exclude_history)
            for batch in loader:
                rows = {name: scorer(batch) for name, scorer in scorers.items()}
                rows["semantic_knn_unseen"] = among(rows["semantic_knn"], is_cold)
                ranks.add(batch, rows)
            metrics[split] = ranks.metrics(data.cold_items)
    protocol = {"split": PROTOCOLS[data.split["kind"]], "ranking": "full corpus",
                "exclude_history": cfg.eval.exclude_history, "split_details": split_summary(data)}
    return metrics, data.summary(), protocol


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="SID generators with an item head, trained with cold items")
    parser.add_argument("--teacher", type=Path, help="a retrieval run of the same split, shown beside them")
    parser.add_argument("--epsilon", type=float, nargs="+", default=[0.05, 0.1, 0.2],
                        help="shares of the list given to the codes of unseen items (hybrid rows)")
    parser.add_argument("--unseen-beam", type=int, help="the width of the beam among the cold items (default the "
                        "model's beam; the number of cold items scores every one of them exactly)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    from genrec.utils.provenance import provenance, write_json

    torch.set_num_threads(args.threads)
    baselines, dataset, protocol = evaluate_others(args.runs[0], args.teacher)
    runs = []
    for run_dir in args.runs:
        runs.append(evaluate_generator(run_dir, args.epsilon, args.unseen_beam))
        test = runs[-1]["metrics"]["test"]
        print(run_dir, {row: (round(m["all"]["ndcg@10"], 4), round(m["cold"]["recall@10"], 4))
                        for row, m in test.items()}, flush=True)
    write_json(args.out, {"kind": "cold_start", "name": args.out.stem, "dataset": dataset, "protocol": protocol,
                          "epsilons": args.epsilon, "unseen_beam": args.unseen_beam,
                          "teacher": str(args.teacher) if args.teacher else None, "runs": runs, "baselines": baselines,
                          **provenance()})


if __name__ == "__main__":
    main()
