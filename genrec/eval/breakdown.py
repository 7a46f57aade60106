"""Metrics by group of test users: history length, popularity of the target item, cold target items.

The ranks come from the same :class:`~genrec.eval.metrics.Evaluator` as the overall metrics, so each group's
metrics are the overall metrics restricted to its users (the groups of one breakdown partition the users, and
their user-weighted mean is the overall value). Popularity is counted in training parts only (the split's, as
the baselines count it): a target with 0 training interactions is absent from training.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from genrec.data.schema import SequenceData
from genrec.errors import UserError
from genrec.models.counts import item_popularity
from genrec.eval.metrics import Evaluator, RankingMetrics


@dataclass
class RankedUsers:
    """One evaluation pass kept per user (``U`` users).

    Attributes:
        ranks: ``(U,)`` 0-based rank of each target (``num_columns`` when the target was removed).
        targets: ``(U,)`` dense ID of each target item.
        history_lengths: ``(U,)`` items in each user's history before the target (not truncated).
        num_columns: columns of the score matrix (``num_items + 1``).
        metrics: the overall metrics of the pass.
    """

    ranks: np.ndarray
    targets: np.ndarray
    history_lengths: np.ndarray
    num_columns: int
    metrics: dict[str, float]


@torch.no_grad()
def rank_users(score_fn, loader, ks: tuple[int, ...], exclude_history: bool) -> RankedUsers:
    """Run ``score_fn(batch) -> (B, num_items + 1)`` over ``loader`` (evaluation batches) keeping every rank."""
    evaluator = Evaluator(ks, exclude_history)
    ranks, targets, lengths, columns = [], [], [], 0
    for batch in loader:
        scores = score_fn(batch).float().clone()
        columns = scores.shape[1]
        ranks.append(evaluator.update(scores, batch).numpy())
        targets.append(batch.target_ids.numpy())
        lengths.append((batch.seen_offsets[1:] - batch.seen_offsets[:-1]).numpy())
    return RankedUsers(np.concatenate(ranks), np.concatenate(targets), np.concatenate(lengths), columns,
                       evaluator.compute())


def bucket_names(edges: list[int]) -> list[str]:
    """Names of the integer buckets ``<= e0``, ``(e0, e1]``, ..., ``> e_last`` for increasing ``edges``."""
    names = ["0" if edges[0] == 0 else f"≤{edges[0]}"]
    for low, high in zip(edges[:-1], edges[1:]):
        names.append(str(high) if high == low + 1 else f"{low + 1}–{high}")
    return names + [f">{edges[-1]}"]


def bucketize(values: np.ndarray, edges: list[int]) -> np.ndarray:
    """``(U,)`` integer values -> ``(U,)`` bucket index into :func:`bucket_names` ``(edges)``."""
    if list(edges) != sorted(set(edges)):
        raise UserError(f"bucket edges must be strictly increasing, got {list(edges)}")
    return np.searchsorted(np.asarray(edges), values, side="left")


def group_metrics(ranked: RankedUsers, groups: np.ndarray, names: list[str], ks: tuple[int, ...]
                  ) -> dict[str, dict[str, float]]:
    """``groups (U,)`` index into ``names`` -> ``{name: {"users": n, metric: value}}``, every name listed
    (a group without users has ``users = 0`` and NaN metrics)."""
    out = {}
    for index, name in enumerate(names):
        metrics = RankingMetrics(ks)
        mask = groups == index
        if mask.any():
            metrics.update(torch.from_numpy(ranked.ranks[mask]), ranked.num_columns)
        out[name] = {"users": int(mask.sum()), **metrics.compute()}
    return out


def breakdowns(ranked: RankedUsers, data: SequenceData, ks: tuple[int, ...], history_edges: list[int],
               popularity_edges: list[int], cold_max_count: int) -> dict[str, dict[str, dict[str, float]]]:
    """The three breakdowns of one evaluation pass.

    Args:
        history_edges: bucket edges on the user's history length, e.g. ``[5, 10, 20, 50]``.
        popularity_edges: bucket edges on the target's training interaction count, e.g. ``[0, 5, 20, 100]``.
        cold_max_count: a target with at most this many training interactions is cold.
    """
    popularity = item_popularity(data)[ranked.targets].astype(np.int64)
    return {
        "history_length": group_metrics(ranked, bucketize(ranked.history_lengths, history_edges),
                                        bucket_names(history_edges), ks),
        "target_popularity": group_metrics(ranked, bucketize(popularity, popularity_edges),
                                           bucket_names(popularity_edges), ks),
        "cold_items": group_metrics(ranked, (popularity > cold_max_count).astype(np.int64),
                                    [f"cold ≤{cold_max_count}", f"warm >{cold_max_count}"], ks),
    }
