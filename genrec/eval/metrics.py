"""Full-corpus ranking metrics with one target item per user.

Ranks are 0-based. Ties are broken towards the lower item ID (as a stable sort by descending score would), so
constant scores never give a free hit. Items removed from the ranking have score ``-inf``; a target with score
``-inf`` is never a hit and its reciprocal rank is 0.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

from genrec.data.batch import JaggedBatch
from genrec.data.schema import PAD_ITEM


def target_ranks(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``scores (B, I)``, ``targets (B,)`` -> ``(B,)`` int64 0-based rank of each target (``I`` when removed)."""
    target_scores = scores.gather(1, targets[:, None])  # (B, 1)
    ids = torch.arange(scores.shape[1], device=scores.device)[None, :]
    ahead = (scores > target_scores) | ((scores == target_scores) & (ids < targets[:, None]))
    ranks = ahead.sum(dim=1)
    return torch.where(target_scores[:, 0] == float("-inf"), torch.full_like(ranks, scores.shape[1]), ranks)


def remove_seen(scores: torch.Tensor, batch: JaggedBatch) -> torch.Tensor:
    """Set the scores of padding and of every item in each user's history to ``-inf`` (in place)."""
    scores[:, PAD_ITEM] = float("-inf")
    if batch.seen_ids is not None and batch.seen_ids.numel():
        rows = torch.repeat_interleave(torch.arange(batch.batch_size, device=scores.device),
                                       batch.seen_offsets[1:] - batch.seen_offsets[:-1])
        scores[rows, batch.seen_ids] = float("-inf")
    return scores


class RankingMetrics:
    """Accumulates Recall@K (= HR@K with one target), NDCG@K and MRR over batches of ranks.

    Args:
        ks: cut-offs, e.g. ``(5, 10, 20)``.
    """

    def __init__(self, ks: tuple[int, ...] = (5, 10, 20)):
        self.ks = tuple(sorted(int(k) for k in ks))
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.sums = {name: 0.0 for name in self.names()}

    def names(self) -> list[str]:
        return [f"{m}@{k}" for k in self.ks for m in ("recall", "ndcg")] + ["mrr"]

    def update(self, ranks: torch.Tensor, num_items: int) -> None:
        """``ranks (B,)`` from :func:`target_ranks` over ``num_items`` columns (rank ``num_items`` = removed)."""
        ranks = ranks.double()
        found = ranks < num_items
        for k in self.ks:
            hit = ranks < k
            self.sums[f"recall@{k}"] += float(hit.sum())
            self.sums[f"ndcg@{k}"] += float((hit / torch.log2(ranks + 2)).sum())
        self.sums["mrr"] += float((found / (ranks + 1)).sum())
        self.count += len(ranks)

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            return {name: math.nan for name in self.names()}
        return {name: total / self.count for name, total in self.sums.items()}

    def merge(self, reduce_sum: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Replace the local count and sums by their totals over processes: ``reduce_sum`` maps the
        ``(1 + num_metrics,)`` float64 tensor of this process to the sum over all processes."""
        totals = reduce_sum(torch.tensor([self.count, *self.sums.values()], dtype=torch.float64)).tolist()
        self.count, self.sums = int(totals[0]), dict(zip(self.sums, totals[1:]))


class Evaluator:
    """Scores -> ranks -> metrics, with the user's history optionally removed from the ranking.

    Args:
        ks: metric cut-offs.
        exclude_history: remove items the user has already interacted with (Meta's protocol; the default).
    """

    def __init__(self, ks: tuple[int, ...] = (5, 10, 20), exclude_history: bool = True):
        self.metrics, self.exclude_history = RankingMetrics(ks), exclude_history

    def update(self, scores: torch.Tensor, batch: JaggedBatch) -> torch.Tensor:
        """``scores (B, num_items + 1)`` for an evaluation batch; returns the ``(B,)`` target ranks."""
        if self.exclude_history:
            remove_seen(scores, batch)
        else:
            scores[:, PAD_ITEM] = float("-inf")
        ranks = target_ranks(scores, batch.target_ids)
        self.metrics.update(ranks, scores.shape[1])
        return ranks

    def compute(self) -> dict[str, float]:
        return self.metrics.compute()

    def reset(self) -> None:
        self.metrics.reset()


@torch.no_grad()
def evaluate(score_fn, loader, ks: tuple[int, ...] = (5, 10, 20), exclude_history: bool = True,
             device: torch.device | str = "cpu") -> dict[str, float]:
    """Run ``score_fn(batch) -> (B, num_items + 1)`` over every batch of ``loader`` and return the metrics."""
    evaluator = Evaluator(ks, exclude_history)
    for batch in loader:
        batch = batch.to(device)
        evaluator.update(score_fn(batch).float().clone(), batch)
    return evaluator.compute()
