"""What a dataset looks like to a sequential recommender: sizes, lengths, popularity skew, how predictable the next
item is from the previous one, repeats, and how persistent a user's taste is.

Everything but the repeat rate is computed on the preprocessed :class:`SequenceData` (the sequences a model trains
on); the repeat rate is computed on the raw :class:`InteractionLog`, before any de-duplication.

Definitions (``n`` items, ``c_i`` the interaction count of item ``i``):

* **gini** — Gini coefficient of the item counts (0: every item equally popular; towards 1: a few items take all).
* **top_1pct_share / top_10pct_share** — share of interactions on the ``ceil(n / 100)`` / ``ceil(n / 10)`` most
  popular items.
* **zipf_exponent** — ``s`` of the least-squares fit ``log c = a - s log rank`` over all items.
* **next_entropy_bits** — entropy of the next item (the marginal over all consecutive pairs), in bits.
* **transition_entropy_bits** — ``H(next | previous)`` over all consecutive pairs ``(a, b)`` of a user's sequence,
  in bits (plug-in estimate: it falls with fewer pairs per item, so compare datasets of similar density).
* **top_successor_share** — leave-one-out: the share of pairs ``(a, b)`` whose ``b`` is the most frequent successor
  of ``a`` among all *other* pairs starting at ``a`` (a tie of ``k`` successors counts ``1 / k``); what a
  first-order transition table gets right at rank 1. ``top_successor_share_by_lag`` is the same for the pairs
  ``lag`` positions apart (how far back the history still tells the next item).
* **repeat_rate** — share of raw interactions whose item already appeared earlier in the same user's history.
* **taste_persistence** — items are clustered without any content: users are split in two halves by a seeded
  permutation; on the first half, item vectors are the top singular vectors of the user-item matrix (rows scaled
  by ``1 / sqrt(length)``), L2-normalised and k-means clustered into ``clusters`` groups. For every user of the
  second half with at least 4 clustered items, the cluster histograms of the first and the second half of the
  sequence are compared by cosine similarity; ``taste_persistence`` is the mean, ``taste_chance`` the same with
  the second half taken from another user (a random cyclic shift of the users), ``taste_lift`` =
  ``(persistence - chance) / (1 - chance)`` (0: no more alike than two random users; 1: identical mixes). A
  session that spans the middle of a sequence links the two halves too, so the lift is not zero without tastes.
"""
from __future__ import annotations

import math

import faiss
import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds

from genrec.data.schema import ITEM, USER, InteractionLog, SequenceData


def length_stats(data: SequenceData) -> dict:
    """Mean, median, 90th percentile and maximum of the sequence lengths."""
    lengths = data.lengths
    return {"mean": float(lengths.mean()), "median": float(np.median(lengths)),
            "p90": float(np.percentile(lengths, 90)), "max": int(lengths.max())}


def gini(counts: np.ndarray) -> float:
    """Gini coefficient of non-negative ``counts`` ``(n,)``."""
    x = np.sort(np.asarray(counts, dtype=np.float64))
    n = len(x)
    return float(2.0 * (np.arange(1, n + 1) * x).sum() / (n * x.sum()) - (n + 1) / n)


def popularity_stats(data: SequenceData) -> dict:
    """Gini, top 1% / 10% shares and fitted Zipf exponent of the item counts (see the module doc)."""
    counts = np.bincount(data.item_ids, minlength=data.num_items + 1)[1:]
    ranked = np.sort(counts)[::-1].astype(np.float64)
    seen = ranked[ranked > 0]
    slope = np.polyfit(np.log(np.arange(1, len(seen) + 1)), np.log(seen), 1)[0]

    def top_share(share: float) -> float:
        return float(ranked[:math.ceil(len(ranked) * share)].sum() / ranked.sum())

    return {"gini": gini(counts), "top_1pct_share": top_share(0.01), "top_10pct_share": top_share(0.10),
            "zipf_exponent": float(-slope)}


def _pairs(data: SequenceData, lag: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(earlier, later)`` dense item IDs ``lag`` positions apart within every user's sequence: two ``(P,)``
    arrays."""
    position = np.arange(data.num_interactions) - np.repeat(data.offsets[:-1], data.lengths)
    keep = position[lag:] >= lag  # the later item has an item ``lag`` positions before it, of the same user
    return data.item_ids[:-lag][keep], data.item_ids[lag:][keep]


def _entropy_bits(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def _successor_table(data: SequenceData, lag: int) -> tuple[float, float, int]:
    """``(H(later | earlier) in bits, leave-one-out top-successor share, pairs)`` over the pairs ``lag`` apart."""
    prev, nxt = _pairs(data, lag)
    size = data.num_items + 1
    counts = sp.csr_matrix((np.ones(len(prev)), (prev, nxt)), shape=(size, size))
    counts.sum_duplicates()
    row_totals = np.asarray(counts.sum(axis=1)).ravel()
    conditional, hits = 0.0, 0.0
    for a in np.flatnonzero(row_totals):
        row = counts.data[counts.indptr[a]:counts.indptr[a + 1]]
        conditional += row_totals[a] * _entropy_bits(row)
        hits += _top_successor_hits(row)
    return float(conditional / len(prev)), float(hits / len(prev)), int(len(prev))


def transition_stats(data: SequenceData, lags: tuple[int, ...] = (1, 2, 3, 5, 8)) -> dict:
    """Entropy of the next item, alone and given the previous one, and the leave-one-out top-successor share of
    consecutive pairs and of the pairs ``lags`` apart (see the module doc)."""
    tables = {lag: _successor_table(data, lag) for lag in sorted({1, *lags})}
    entropy, top, pairs = tables[1]
    return {"pairs": pairs, "next_entropy_bits": _entropy_bits(np.bincount(_pairs(data)[1]).astype(np.float64)),
            "transition_entropy_bits": entropy, "top_successor_share": top,
            "top_successor_share_by_lag": {str(lag): tables[lag][1] for lag in lags}}


def _top_successor_hits(row: np.ndarray) -> float:
    """For the successor counts ``row`` of one item: how many of its pairs are predicted at rank 1 by the others.

    Leaving one pair ``(a, b)`` out lowers ``b``'s count by one; ``b`` is then the top successor only if it was the
    unique maximum ``m`` and ``m - 1`` still reaches the runner-up ``s`` (sharing the top with the items at ``s``
    when ``m - 1 == s``); nothing is predicted when no other pair starts at ``a``.
    """
    values = np.sort(row)[::-1]
    top = values[0]
    if len(values) > 1 and values[1] == top:
        return 0.0
    runner_up = values[1] if len(values) > 1 else 0.0
    if top - 1 > runner_up:
        return float(top)
    if top - 1 == runner_up and runner_up > 0:
        return float(top) / (1 + int((values[1:] == runner_up).sum()))
    return 0.0


def repeat_rate(log: InteractionLog) -> float:
    """Share of interactions whose item the user already had: ``1 - distinct (user, item) pairs / interactions``
    (how many repeats there are does not depend on their order)."""
    events = log.events
    return float(1.0 - len(events[[USER, ITEM]].drop_duplicates()) / len(events))


def item_clusters(data: SequenceData, users: np.ndarray, clusters: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    """``(num_items + 1,)`` cluster of every item from the user-item matrix of ``users`` (see the module doc);
    ``-1`` for items none of them had."""
    lengths = data.lengths[users]
    rows = np.repeat(np.arange(len(users)), lengths)
    cols = np.concatenate([data.sequence(u) for u in users])
    matrix = sp.csr_matrix((np.repeat(1.0 / np.sqrt(lengths), lengths), (rows, cols)),
                           shape=(len(users), data.num_items + 1))
    seen = np.flatnonzero(np.asarray((matrix > 0).sum(axis=0)).ravel())
    matrix = matrix[:, seen]
    _, singular, vt = svds(matrix, k=min(dim, min(matrix.shape) - 1), random_state=seed)
    vectors = (vt.T * singular).astype(np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    km = faiss.Kmeans(vectors.shape[1], clusters, niter=25, seed=seed, verbose=False, min_points_per_centroid=1,
                      max_points_per_centroid=1 << 30)
    km.train(np.ascontiguousarray(vectors))
    _, assigned = km.index.search(np.ascontiguousarray(vectors), 1)
    cluster = np.full(data.num_items + 1, -1, dtype=np.int64)
    cluster[seen] = assigned[:, 0]
    return cluster


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of ``(U, K)`` histograms."""
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def taste_persistence(data: SequenceData, clusters: int = 20, seed: int = 0) -> dict:
    """Mean cosine similarity of the item-cluster mix of the two halves of a user's sequence, against the same for
    two users (see the module doc)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(data.num_users)
    fit, measure = order[:data.num_users // 2], order[data.num_users // 2:]
    cluster = item_clusters(data, fit, clusters, seed=seed)
    first, second = [], []
    for u in measure:
        codes = cluster[data.sequence(u)]
        codes = codes[codes >= 0]
        if len(codes) < 4:
            continue
        half = len(codes) // 2
        first.append(np.bincount(codes[:half], minlength=clusters))
        second.append(np.bincount(codes[half:], minlength=clusters))
    if len(first) < 2:
        raise ValueError(f"taste persistence needs 2 or more users with 4 or more clustered items, got {len(first)}")
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    own = float(_cosine(first, second).mean())
    other = (np.arange(len(second)) + rng.integers(1, len(second))) % len(second)  # never the user itself
    chance = float(_cosine(first, second[other]).mean())
    return {"clusters": clusters, "users": len(first), "taste_persistence": own, "taste_chance": chance,
            "taste_lift": (own - chance) / (1.0 - chance)}


def dataset_stats(data: SequenceData, log: InteractionLog, clusters: int = 20, seed: int = 0) -> dict:
    """All of the above for one dataset: ``data`` preprocessed as for training, ``log`` as read."""
    return {
        "users": data.num_users, "items": data.num_items, "interactions": data.num_interactions,
        "length": length_stats(data),
        "popularity": popularity_stats(data),
        "transitions": transition_stats(data),
        "repeat_rate": repeat_rate(log),
        "taste": taste_persistence(data, clusters, seed),
    }
