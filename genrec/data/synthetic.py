"""A seeded synthetic interaction log: genrec's embedded default dataset (no download).

What a model can learn from it, by construction:

* **Popularity** — item weights follow a power law (Zipf exponent ``zipf_exponent``).
* **Latent clusters** — every item belongs to one of ``num_clusters`` clusters. A cluster has its own vocabulary,
  category and brands, so item text carries the cluster (a text tokenizer has real signal), and users prefer a
  few clusters (Dirichlet preferences).
* **Sequential dynamics** — every cluster leads to ``num_successors`` "next" clusters, and every item has one
  successor item in each of them. Within a session, with probability ``p_successor`` the user follows a
  successor of the current item, otherwise moves to one of the current cluster's next clusters or back to a
  preferred cluster. Which successor / next cluster is taken depends on the user's cluster preferences, which
  only the user's history reveals: the last item alone (a transition model) narrows the next item down to a
  few candidates, the history picks among them.
* **Time** — gaps are short inside a session and long between sessions; a new session restarts from the user's
  preferences, so the gap to the previous event changes what comes next (signal for time-aware models).

Generation is vectorised over users (one NumPy step per sequence position), so millions of interactions take
seconds.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from genrec.data.schema import ITEM, TIMESTAMP, USER, InteractionLog

_SYLLABLES = ["ka", "lo", "mi", "ra", "ven", "tor", "sil", "qua", "ber", "dun", "fel", "gar", "hol", "jin", "mar",
              "nor", "pel", "ros", "sta", "tuv", "ul", "wex", "yor", "zan", "bri", "cal", "dro", "esk", "fin", "glo"]
_PRODUCT_TYPES = ["cream", "serum", "lotion", "mask", "oil", "gel", "spray", "balm", "powder", "kit", "set",
                  "brush", "soap", "tonic", "polish", "wash"]
_SECONDS_PER_MINUTE = 60
_SECONDS_PER_DAY = 86_400
_REDRAWS = 4


def _words(rng: np.random.Generator, n: int) -> list[str]:
    """``n`` distinct pseudo-words of two or three syllables."""
    words: set[str] = set()
    while len(words) < n:
        k = int(rng.integers(2, 4))
        words.add("".join(rng.choice(_SYLLABLES, size=k)))
    return sorted(words)


def _sample_in_clusters(rng: np.random.Generator, clusters: np.ndarray, cluster_start: np.ndarray,
                        cum_weight: np.ndarray) -> np.ndarray:
    """Draw one item per entry of ``clusters`` with probability proportional to item weight within the cluster.

    ``cum_weight`` is the running sum of item weights with items sorted by cluster; ``cluster_start[c]`` is the
    position of cluster ``c``'s first item in that order (``cluster_start[-1]`` = number of items).
    """
    lo = np.where(cluster_start[clusters] > 0, cum_weight[cluster_start[clusters] - 1], 0.0)
    hi = cum_weight[cluster_start[clusters + 1] - 1]
    target = lo + rng.random(len(clusters)) * (hi - lo)
    pos = np.searchsorted(cum_weight, target, side="right")
    return np.minimum(pos, cluster_start[clusters + 1] - 1)


def generate_synthetic(num_users: int = 6000, num_items: int = 2000, num_clusters: int = 20,
                       mean_length: float = 20.0, min_length: int = 5, max_length: int = 200,
                       zipf_exponent: float = 1.1, preference_concentration: float = 0.3,
                       num_successors: int = 4, p_successor: float = 0.5, p_next_cluster: float = 0.5,
                       p_new_session: float = 0.25, seed: int = 0, name: str = "synthetic") -> InteractionLog:
    """Generate the log. Item IDs are ``0..num_items-1``, user IDs ``0..num_users-1``; see the module doc."""
    if num_items < num_clusters or num_clusters < 2:
        raise ValueError(f"synthetic data needs num_items >= num_clusters >= 2, got {num_items=} {num_clusters=}")
    if not 1 <= num_successors < num_clusters:
        raise ValueError(f"need 1 <= num_successors < num_clusters, got {num_successors=} {num_clusters=}")
    if not 1 <= min_length <= max_length:
        raise ValueError(f"need 1 <= min_length <= max_length, got {min_length=} {max_length=}")
    rng = np.random.default_rng(seed)

    # Items: clusters (items sorted by cluster so a cluster is a contiguous range), power-law weights.
    cluster_of = np.sort(np.concatenate([np.arange(num_clusters),  # every cluster non-empty
                                         rng.integers(0, num_clusters, size=num_items - num_clusters)]))
    cluster_start = np.searchsorted(cluster_of, np.arange(num_clusters + 1))
    weight = rng.permutation(np.arange(1, num_items + 1, dtype=np.float64) ** -zipf_exponent)
    cum_weight = np.cumsum(weight)
    # next_cluster[c, s]: the s-th cluster that cluster c leads to (never c itself).
    shift = np.stack([rng.choice(np.arange(1, num_clusters), size=num_successors, replace=False)
                      for _ in range(num_clusters)])
    next_cluster = (np.arange(num_clusters)[:, None] + shift) % num_clusters
    successors = _sample_in_clusters(rng, next_cluster[cluster_of].reshape(-1), cluster_start,
                                     cum_weight).reshape(num_items, num_successors)

    # Users: cluster preferences and sequence lengths.
    preference = rng.dirichlet(np.full(num_clusters, preference_concentration), size=num_users)
    pref_cdf = np.cumsum(preference, axis=1)
    extra = rng.geometric(1.0 / max(mean_length - min_length + 1, 1.0), size=num_users) - 1
    lengths = np.minimum(min_length + extra, max_length)

    def preferred_cluster(users: np.ndarray) -> np.ndarray:
        u = rng.random(len(users))[:, None]
        return np.minimum((pref_cdf[users] < u).sum(axis=1), num_clusters - 1)

    def preferred_successor(users: np.ndarray, prev: np.ndarray) -> np.ndarray:
        """Index ``s`` of the next cluster to take from ``prev``'s cluster, drawn by the user's preferences."""
        weight = preference[users[:, None], next_cluster[cluster_of[prev]]] + 1e-3  # (n, num_successors)
        cdf = np.cumsum(weight, axis=1)
        u = rng.random(len(users))[:, None] * cdf[:, -1:]
        return np.minimum((cdf < u).sum(axis=1), num_successors - 1)

    def next_step(users: np.ndarray, prev: np.ndarray, new_session: np.ndarray) -> np.ndarray:
        roll = rng.random(len(users))
        follow = ~new_session & (roll < p_successor)
        to_next = ~new_session & ~follow & (roll < p_successor + (1 - p_successor) * p_next_cluster)
        s = preferred_successor(users, prev)
        cluster = np.where(to_next, next_cluster[cluster_of[prev], s], preferred_cluster(users))
        chosen = _sample_in_clusters(rng, cluster, cluster_start, cum_weight)
        return np.where(follow, successors[prev, s], chosen)

    longest = int(lengths.max())
    items = np.zeros((num_users, longest), dtype=np.int64)
    times = np.zeros((num_users, longest), dtype=np.int64)
    all_users = np.arange(num_users)
    items[:, 0] = _sample_in_clusters(rng, preferred_cluster(all_users), cluster_start, cum_weight)
    times[:, 0] = rng.integers(0, 365 * _SECONDS_PER_DAY, size=num_users)
    for t in range(1, longest):
        users = all_users[lengths > t]
        prev = items[users, t - 1]
        new_session = rng.random(len(users)) < p_new_session
        gap = np.where(new_session,
                       rng.lognormal(np.log(2 * _SECONDS_PER_DAY), 0.8, size=len(users)),
                       rng.exponential(10 * _SECONDS_PER_MINUTE, size=len(users)))
        times[users, t] = times[users, t - 1] + 1 + gap.astype(np.int64)
        next_item = np.empty(len(users), dtype=np.int64)
        todo = np.arange(len(users))
        for _ in range(_REDRAWS):  # redraw items the user already has, as real catalogues rarely repeat
            next_item[todo] = next_step(users[todo], prev[todo], new_session[todo])
            todo = todo[(items[users[todo], :t] == next_item[todo, None]).any(axis=1)]
            if len(todo) == 0:
                break
        items[users, t] = next_item
    valid = np.arange(longest)[None, :] < lengths[:, None]
    events = pd.DataFrame({
        USER: np.repeat(all_users, lengths),
        ITEM: items[valid],
        TIMESTAMP: times[valid],
    })
    return InteractionLog(name=name, events=events, items=_item_content(rng, cluster_of, num_clusters),
                          source=f"synthetic(seed={seed})")


def _item_content(rng: np.random.Generator, cluster_of: np.ndarray, num_clusters: int) -> pd.DataFrame:
    """Titles, brands, categories and descriptions whose words are drawn from the item's cluster vocabulary."""
    vocab = rng.permutation(_words(rng, num_clusters * 14)).reshape(num_clusters, 14)
    category = [f"{vocab[c, 0].capitalize()} {vocab[c, 1].capitalize()}" for c in range(num_clusters)]
    brands = np.array([[f"{vocab[c, 2 + b].capitalize()}Co" for b in range(3)] for c in range(num_clusters)])
    n = len(cluster_of)
    topic = 5 + np.argsort(rng.random((n, 9)), axis=1)[:, :5]  # five distinct topic words per item
    brand = rng.integers(0, 3, size=n)
    kind = rng.integers(0, len(_PRODUCT_TYPES), size=n)
    titles, descriptions = [], []
    for i, c in enumerate(cluster_of):
        words = vocab[c, topic[i]]
        titles.append(f"{brands[c, brand[i]]} {words[0]} {words[1]} {_PRODUCT_TYPES[kind[i]]}")
        descriptions.append(f"A {words[2]} {_PRODUCT_TYPES[kind[i]]} with {words[3]} and {words[4]}.")
    return pd.DataFrame({
        "title": titles,
        "brand": brands[cluster_of, brand],
        "categories": ["Synthetic," + category[c] for c in cluster_of],
        "description": descriptions,
        "latent_cluster": cluster_of.astype(np.int64),
    }, index=pd.RangeIndex(n, name=ITEM))
