"""The quality of dynamic item tables on real data (issue 14): admission thresholds against the static table, and
items that first appear after the training cut. Writes ``results/dynamic_quality.json``.

ML-100K is the one dataset here with event times (``../shared/data``: Amazon Beauty 2014 and Scientific 2018 hold
time-ordered sequences without timestamps, MovieLens-1M lacks its ratings). SASRec with the ml100k preset's encoder
(2 layers, D = 64, dropout 0.2) and inputs cut to the last 50 items; the item table is trained by row-wise Adagrad
(lr 0.05, FBGEMM's formula) in every variant, the rest by AdamW (lr 1e-3):

* **static**: the TorchRec table holding every item (``sharding=table_wise``: FBGEMM's fused row-wise Adagrad);
* **min_count=k** (k = 1, 2, 3, 5): the dynamic table (``embedding@model.embedding=dynamic``); an item gets a row
  once it occurred k times as an input of a training sequence (the count-min sketch; the items a loss scores are
  looked up, not counted); until then it reads the zero default.

Part ``loo`` runs genrec-train (leave-one-out, full softmax, early stopping on validation NDCG@10, patience 10) for
each variant and seed, and records the test metrics, the rows stored (the best checkpoint's live rows; the static
table: every item) and the rows after the first epoch; the most-popular and transition baselines come from the
same runs (genrec-train's own evaluation).

Part ``new_items`` (a time split; not a genrec-train protocol, so this script runs the same task, model and
Lightning trainer on its own loaders):

* cut times: ``T1`` = the 70% quantile of event times (the training cut), ``T2`` = the 85% quantile;
* training: every user's events before ``T1`` (the most recent 51), ``train_epochs`` epochs;
* online adaptation: one pass (one epoch, batches of 32) over every user's sequence cut at ``T2`` (the last 51
  events before it): the dynamic table admits the items first seen in ``[T1, T2)`` (new items) by its policy,
  counting each input occurrence once in this pass; the static table has no row for them (its rows are the items
  seen before ``T1``): they are dropped from its inputs and it cannot rank them;
* test: every event at or after ``T2`` whose user has an earlier event, predicted from the user's history before
  it (its last 50 items; the static model's without the items outside its vocabulary); each model ranks the items
  it has a row for (the static table: its vocabulary; the dynamic table: its admitted items), the user's history
  removed. Metrics over all test events and by the target's first appearance: before ``T1`` (old), in
  ``[T1, T2)`` (new, seen during adaptation), at or after ``T2`` (never seen by any model: a miss for all);
* each model's softmax runs over the items it can know in a phase: the static table's vocabulary; for the
  dynamic table, the items in the phase's data (a not-admitted item reads the default);
* references: the models right after training (before adaptation), and a static table rebuilt at ``T2``
  (vocabulary and training on everything before ``T2``: the offline remap + retrain a static table needs);
  baselines (genrec's MostPopular and ItemTransitions) counted on the events before ``T2`` (and before ``T1`` for
  the models before adaptation).

Usage::

    python -m scripts.recipes.reproduce_dynamic_quality        # both parts, seeds 0 1 2 (~2 h on 2 shared cores)
    python -m scripts.recipes.reproduce_dynamic_quality --part new_items --seeds 0 --quick   # a check of the script
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import numpy as np  # noqa: E402
import torch  # noqa: E402

THRESHOLDS = (1, 2, 3, 5)
VARIANTS = ("static",) + tuple(f"min_count={k}" for k in THRESHOLDS)
BASELINES = ("most_popular", "transitions")
MAX_LEN = 50
ROW_OPTIMIZER = {"name": "rowwise_adagrad", "lr": 0.05}
COMMON = ["experiment=ml100k_sasrec", f"data.max_len={MAX_LEN}", f"model.encoder.max_len={MAX_LEN}", "threads=1",
          "trainer.enable_progress_bar=false"]
LOO_EPOCHS = 40


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def variant_overrides(variant: str, seed: int) -> list[str]:
    """genrec-train overrides of a variant (the table's optimizer: row-wise Adagrad, lr 0.05, in both)."""
    if variant == "static":
        return ["sharding=table_wise", f"sharding.optimizer.name={ROW_OPTIMIZER['name']}",
                f"sharding.optimizer.lr={ROW_OPTIMIZER['lr']}"]
    k = int(variant.split("=")[1])
    return ["embedding@model.embedding=dynamic", "model.embedding.capacity=2000", f"model.embedding.seed={seed}",
            f"model.embedding.optimizer.name={ROW_OPTIMIZER['name']}",
            f"model.embedding.optimizer.lr={ROW_OPTIMIZER['lr']}",
            "model.embedding.admission.policy=min_count", f"model.embedding.admission.min_count={k}"]


# ---------------------------------------------------------------------------------------------------- part loo
def run_loo(variant: str, seed: int, runs: Path, epochs: int) -> dict:
    """One genrec-train run; its test metrics, baselines, rows stored and rows after the first epoch."""
    folder = runs / f"{variant.replace('=', '')}-seed{seed}"
    if not (folder / "metrics.json").exists():
        shutil.rmtree(folder, ignore_errors=True)
        args = [*COMMON, *variant_overrides(variant, seed), f"seed={seed}", f"trainer.max_epochs={epochs}",
                f"baselines=[{','.join(BASELINES)}]", f"hydra.run.dir={folder}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-m", "genrec.train", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"genrec-train {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    record = json.loads((folder / "metrics.json").read_text())
    out = {"variant": variant, "seed": seed, "run": str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT)
           else str(folder), "overrides": variant_overrides(variant, seed), "commit": record["commit"],
           "test": record["metrics"]["test"], "valid": record["metrics"]["valid"],
           "baselines": {name: record["baselines"][name]["test"] for name in BASELINES},
           "best_epoch": record["best_epoch"], "epochs_run": record["epochs_run"],
           "train_seconds": record["train_seconds"], "num_items": record["dataset"]["items"]}
    if variant == "static":
        out["rows_stored"] = out["rows_after_epoch_1"] = record["dataset"]["items"] + 1
    else:
        out["rows_stored"] = int(record["item_table"]["live_rows_tier0"])
        with open(folder / "logs" / "metrics.csv") as f:
            live = [float(r["item_table/live_rows_tier0"]) for r in csv.DictReader(f)
                    if r.get("item_table/live_rows_tier0")]
        out["rows_after_epoch_1"] = int(live[0])
        out["rows_by_epoch"] = [int(x) for x in live]
        out["item_table"] = record["item_table"]
    log(f"loo {variant} seed {seed}: test ndcg@10 {out['test']['ndcg@10']:.4f}, rows {out['rows_stored']} "
        f"(after epoch 1: {out['rows_after_epoch_1']}), best epoch {out['best_epoch']}")
    return out


def items_below(data_counts: np.ndarray, k: int) -> int:
    return int(((data_counts > 0) & (data_counts < k)).sum())


def input_occurrences(cfg) -> np.ndarray:
    """``(num_items + 1,)`` occurrences of every item as an input of a leave-one-out training sequence (the
    last ``MAX_LEN`` + 1 items of each user's training part, as TrainSequences cuts them)."""
    from genrec.data.batch import TrainSequences
    from genrec.training.builders import build_datamodule

    dm = build_datamodule(cfg)
    dm.setup()
    dataset = TrainSequences(dm.data, MAX_LEN)
    counts = np.zeros(dm.data.num_items + 1, dtype=np.int64)
    for i in range(len(dataset)):
        np.add.at(counts, dataset[i].items, 1)
    return counts


# ---------------------------------------------------------------------------------------------------- part new_items
class CatalogSoftmaxLoss(torch.nn.Module):
    """Cross-entropy over a set of item IDs (what a model can know in a phase); every positive must be in it.

    Args:
        catalog: ``(C,)`` sorted item IDs.
    """

    def __init__(self, catalog: np.ndarray):
        super().__init__()
        self.catalog = torch.from_numpy(np.asarray(catalog, dtype=np.int64))

    def item_ids(self, positive_ids: torch.Tensor, num_items: int) -> torch.Tensor:
        return self.catalog.to(positive_ids.device)

    def forward(self, queries, positive_ids, item_ids, item_vectors):
        """``queries (M, D)``, ``positive_ids (M,)``, ``item_vectors (C, D)`` -> mean loss."""
        target = torch.searchsorted(item_ids, positive_ids)
        return torch.nn.functional.cross_entropy(queries @ item_vectors.T, target)


class TimeSplit:
    """The events of a SequenceData cut at ``T1`` and ``T2`` (quantiles of the event times).

    Attributes:
        t1, t2: the cut times; first_seen: ``(num_items + 1,)`` time of each item's first event.
    """

    def __init__(self, data, q1: float, q2: float):
        self.data = data
        self.t1, self.t2 = (int(np.quantile(data.timestamps, q)) for q in (q1, q2))
        first = np.full(data.num_items + 1, np.iinfo(np.int64).max)
        np.minimum.at(first, data.item_ids, data.timestamps)
        self.first_seen = first

    def user(self, u: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = int(self.data.offsets[u]), int(self.data.offsets[u + 1])
        return self.data.item_ids[a:b], self.data.timestamps[a:b]

    def items_before(self, end: int) -> np.ndarray:
        """Sorted IDs of the items with an event before ``end``."""
        return np.flatnonzero(self.first_seen < end)

    def train_examples(self, end: int, vocabulary: np.ndarray | None) -> list:
        """One example per user: the last ``MAX_LEN`` + 1 of its events before ``end`` (only items of
        ``vocabulary`` when given), each predicting the next."""
        from genrec.data.batch import _Example

        out = []
        for u in range(self.data.num_users):
            items, times = self.user(u)
            keep = times < end
            if vocabulary is not None:
                keep &= np.isin(items, vocabulary)
            seq = items[keep][-(MAX_LEN + 1):]
            if len(seq) >= 2:
                out.append(_Example(u, seq[:-1], seq[1:], None, None, None))
        return out

    def test_targets(self) -> list[tuple[int, int]]:
        """(user, position) of every event at or after ``T2`` whose user has an earlier event."""
        out = []
        for u in range(self.data.num_users):
            _, times = self.user(u)
            out += [(u, p) for p in np.flatnonzero(times >= self.t2) if p >= 1]
        return out

    def test_examples(self, targets: list[tuple[int, int]], vocabulary: np.ndarray | None) -> list:
        """Examples of the test targets: inputs the last ``MAX_LEN`` items before the target (of ``vocabulary``
        only, when given; an empty input is left empty), seen = every item before it."""
        from genrec.data.batch import _Example

        out = []
        for u, p in targets:
            items, _ = self.user(u)
            history = items[:p]
            inputs = history if vocabulary is None else history[np.isin(history, vocabulary)]
            out.append(_Example(u, inputs[-MAX_LEN:], items[p:p + 1], None, None, history))
        return out

    def target_groups(self, targets: list[tuple[int, int]]) -> dict[str, np.ndarray]:
        """Boolean masks over the targets by the target item's first appearance."""
        first = np.array([self.first_seen[self.user(u)[0][p]] for u, p in targets])
        return {"all": np.ones(len(targets), dtype=bool), "old": first < self.t1,
                "new": (first >= self.t1) & (first < self.t2), "unseen": first >= self.t2}

    def baseline_data(self, end: int):
        """The events before ``end`` as a SequenceData that trains on all of them (its cuts at the ends of the
        sequences): the baselines then count exactly those events."""
        from dataclasses import replace

        parts = [items[times < end] for items, times in map(self.user, range(self.data.num_users))]
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
        return replace(self.data, item_ids=np.concatenate(parts).astype(np.int64), offsets=offsets, timestamps=None,
                       valid_at=offsets[1:], test_at=offsets[1:])


def _loader(examples: list, batch_size: int, seed: int | None = None):
    from torch.utils.data import DataLoader

    from genrec.data.batch import collate
    from genrec.data.samplers import TrainBatchSampler

    if seed is None:
        batches = [list(range(i, min(i + batch_size, len(examples)))) for i in range(0, len(examples), batch_size)]
        return DataLoader(examples, batch_sampler=batches, collate_fn=collate)
    sampler = TrainBatchSampler(len(examples), batch_size, seed)
    return DataLoader(examples, batch_sampler=sampler, collate_fn=collate, generator=sampler.generator)


def _build(variant: str, cfg_common: list[str], num_items: int, seed: int):
    """The RetrievalTask of a variant: the dynamic table from the embedding group, or the static table with
    TorchRec's RowWiseAdagrad applied in the backward pass (FBGEMM's formula; left out of AdamW)."""
    import lightning as L
    from torchrec.optim import RowWiseAdagrad
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    from genrec.conf import compose_config
    from genrec.training.builders import build_task

    overrides = list(cfg_common) + [f"seed={seed}"]
    if variant != "static":
        overrides += variant_overrides(variant, seed)
    L.seed_everything(seed, verbose=False)
    task = build_task(compose_config("train", overrides), num_items)
    if variant == "static":
        emb = task.model.item_embedding
        weight = emb.tables.collection.embeddings[emb.table_name].weight
        apply_optimizer_in_backward(RowWiseAdagrad, [weight], {"lr": ROW_OPTIMIZER["lr"], "eps": 1e-8})
    return task


def _fit(task, examples: list, catalog: np.ndarray, epochs: int, seed: int, batch_size: int) -> None:
    import lightning as L

    task.loss = CatalogSoftmaxLoss(catalog)
    task.train()  # Lightning keeps the modes it finds (an evaluation left the task in eval mode)
    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        gradient_clip_val=1.0, num_sanity_val_steps=0)
    trainer.fit(task, _loader(examples, batch_size, seed))


def rows_of(task) -> np.ndarray:
    """Sorted IDs of the items the task's table has a row for (dynamic: admitted; static: every item)."""
    emb = task.model.item_embedding
    if not hasattr(emb, "local_table"):
        return np.arange(1, emb.num_embeddings)
    ids = np.concatenate([chunk for chunk, _ in emb.local_table.rows()])
    return np.sort(ids[ids > 0])


@torch.no_grad()
def evaluate_split(score, split: TimeSplit, targets, vocabulary, rankable: np.ndarray, groups) -> dict:
    """Rank the ``rankable`` items for every test target with ``score(batch) -> (B, num_items + 1)``; metrics per
    target group (``ndcg@10``, ``recall@10``, ``count``)."""
    from genrec.eval.metrics import Evaluator, RankingMetrics

    examples = split.test_examples(targets, vocabulary)
    mask = torch.full((split.data.num_items + 1,), float("-inf"))
    mask[torch.from_numpy(rankable)] = 0.0
    evaluator, ranks = Evaluator(ks=(10,), exclude_history=True), []
    for batch in _loader(examples, 512):
        empty = batch.lengths == 0
        if empty.any():  # nothing the model knows in the history: it cannot rank (a miss)
            keep = ~empty
            scores = torch.full((batch.batch_size, len(mask)), float("-inf"))
            if keep.any():
                scores[keep] = score(_subset(batch, keep))
        else:
            scores = score(batch)
        ranks.append(evaluator.update(scores.float() + mask, batch))
    ranks = torch.cat(ranks)
    out = {}
    for name, where in groups.items():
        metrics = RankingMetrics((10,))
        metrics.update(ranks[torch.from_numpy(where)], len(mask))
        out[name] = {**{k: v for k, v in metrics.compute().items() if k != "mrr"}, "count": int(where.sum())}
    return out


def _subset(batch, keep: torch.Tensor):
    """The sequences of a JaggedBatch where ``keep (B,)`` (inputs only: for scoring)."""
    from genrec.data.batch import JaggedBatch

    lengths = batch.lengths[keep]
    rows = torch.repeat_interleave(keep, batch.lengths)
    return JaggedBatch(item_ids=batch.item_ids[rows], offsets=torch.cat([torch.zeros(1, dtype=torch.long),
                                                                          lengths.cumsum(0)]),
                       target_ids=batch.target_ids[keep], user_ids=batch.user_ids[keep])


def model_scorer(task):
    task.eval()
    vectors = task.model.all_item_vectors()
    return lambda batch: task.model.score_all(batch, vectors)


def run_new_items(seed: int, sizes: dict) -> dict:
    from genrec.conf import compose_config
    from genrec.models.counts import ItemTransitions, MostPopular
    from genrec.training.builders import build_datamodule

    torch.set_num_threads(1)
    cfg_common = COMMON + ["loss@model.loss=full"]
    data_module = build_datamodule(compose_config("train", cfg_common))
    data_module.setup()
    split = TimeSplit(data_module.data, sizes["q1"], sizes["q2"])
    targets = split.test_targets()
    groups = split.target_groups(targets)
    before_t1, before_t2 = split.items_before(split.t1), split.items_before(split.t2)
    train_all = split.train_examples(split.t1, None)
    adapt_all = split.train_examples(split.t2, None)
    epochs, batch = sizes["train_epochs"], sizes["batch_size"]
    out = {"seed": seed, "t1": split.t1, "t2": split.t2, "targets": {k: int(v.sum()) for k, v in groups.items()},
           "items_before_t1": len(before_t1), "items_new_in_adaptation": int(len(before_t2) - len(before_t1)),
           "train_sequences": len(train_all), "adapt_sequences": len(adapt_all), "variants": {}, "baselines": {}}
    for stage, end in (("after_training", split.t1), ("after_adaptation", split.t2)):
        bdata = split.baseline_data(end)
        out["baselines"][stage] = {
            name: evaluate_split(fn, split, targets, None, np.arange(1, split.data.num_items + 1), groups)
            for name, fn in (("most_popular", MostPopular(bdata)), ("transitions", ItemTransitions(bdata)))}
    num_items = split.data.num_items
    for variant in VARIANTS:
        started = time.perf_counter()
        static = variant == "static"
        task = _build(variant, cfg_common, num_items, seed)
        vocabulary = before_t1 if static else None
        _fit(task, split.train_examples(split.t1, vocabulary), before_t1, epochs, seed, batch)
        result = {"after_training": {"rows": len(rows_of(task)) if not static else len(before_t1)}}
        rankable = before_t1 if static else rows_of(task)
        result["after_training"]["metrics"] = evaluate_split(model_scorer(task), split, targets, vocabulary,
                                                             rankable, groups)
        adapt = split.train_examples(split.t2, vocabulary)
        _fit(task, adapt, before_t1 if static else before_t2, sizes["adapt_epochs"], seed + 1000,
             sizes["adapt_batch_size"])
        rankable = before_t1 if static else rows_of(task)
        result["after_adaptation"] = {
            "rows": len(rankable), "new_items_with_rows": int(np.isin(rankable, before_t2).sum() - np.isin(
                rankable, before_t1).sum()),
            "metrics": evaluate_split(model_scorer(task), split, targets, vocabulary, rankable, groups)}
        if not static:
            result["counters"] = task.model.item_embedding.counters()
            task.model.item_embedding.close()
        result["seconds"] = time.perf_counter() - started
        out["variants"][variant] = result
        m = result["after_adaptation"]["metrics"]
        log(f"new_items {variant} seed {seed}: ndcg@10 all {m['all']['ndcg@10']:.4f}, new-item targets "
            f"recall@10 {m['new']['recall@10']:.4f}; rows {result['after_adaptation']['rows']} "
            f"({result['after_adaptation']['new_items_with_rows']} new)")
    # the static table rebuilt at T2: vocabulary and training on everything before T2
    started = time.perf_counter()
    task = _build("static", cfg_common, num_items, seed)
    _fit(task, split.train_examples(split.t2, before_t2), before_t2, epochs, seed, batch)
    out["variants"]["static_rebuilt_t2"] = {"after_adaptation": {
        "rows": len(before_t2), "new_items_with_rows": int(len(before_t2) - len(before_t1)),
        "metrics": evaluate_split(model_scorer(task), split, targets, before_t2, before_t2, groups)},
        "seconds": time.perf_counter() - started}
    return out


# ---------------------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("loo", "new_items", "all"), default="all")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", default=str(ROOT / "runs" / "dynamic_quality"), help="genrec-train run folders "
                        "(a finished run found there is read, not rerun)")
    parser.add_argument("--quick", action="store_true", help="few epochs (checks the script, not the results)")
    parser.add_argument("--epochs", type=int, default=LOO_EPOCHS, help="part loo: genrec-train's max_epochs")
    parser.add_argument("--train-epochs", type=int, default=10, help="part new_items: training epochs before T1")
    parser.add_argument("--out", default=str(ROOT / "results" / "dynamic_quality.json"))

    args = parser.parse_args()
    logging.getLogger("lightning").setLevel(logging.ERROR)
    from genrec.conf import compose_config
    from genrec.utils.provenance import provenance
    from genrec.utils.results import load_result, write_result

    out_path = Path(args.out)
    results = load_result(out_path) if out_path.exists() else {}
    results.update({"kind": "dynamic_quality", "dataset": "ml100k", "quick": args.quick, "seeds": args.seeds,
                    "max_len": MAX_LEN, "row_optimizer": ROW_OPTIMIZER, "common_overrides": COMMON,
                    "machine_note": "2 cores shared with other engineers' jobs; one torch thread per run"})
    if args.part in ("loo", "all"):
        epochs = 2 if args.quick else args.epochs
        runs = [run_loo(v, s, Path(args.runs), epochs) for s in args.seeds for v in VARIANTS]
        counts = input_occurrences(compose_config("train", COMMON))
        results["loo"] = {"max_epochs": epochs, "early_stopping_patience": 10, "runs": runs,
                          "items": int(len(counts) - 1), "items_with_input_occurrences": int((counts > 0).sum()),
                          "items_below": {str(k): items_below(counts, k) for k in THRESHOLDS}}
    if args.part in ("new_items", "all"):
        sizes = {"q1": 0.7, "q2": 0.85, "train_epochs": 2 if args.quick else args.train_epochs, "batch_size": 128,
                 "adapt_epochs": 1, "adapt_batch_size": 32}
        results["new_items"] = {"sizes": sizes, "runs": [run_new_items(s, sizes) for s in args.seeds],
                                "commit": provenance()["commit"]}
    write_result(out_path, "dynamic_quality", {**results, **provenance()})
    log(f"wrote {out_path}")


if __name__ == "__main__":
    main()
