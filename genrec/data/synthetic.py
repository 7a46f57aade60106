"""A seeded synthetic interaction log: genrec's embedded default dataset (no download).

It is calibrated against the real datasets here: ``scripts/analysis/data_stats.py`` measures the same statistics on it
and on MovieLens-100K, Amazon Beauty and Amazon Scientific (docs/results.md, "Data statistics"), and its defaults put
them within the range of the real ones — lengths, popularity skew, interactions per item, transition entropy, the
share of next items a first-order table predicts (from the item 1 to 3 steps back), repeat rate, taste
persistence — except that single items 5 or more steps back predict the next item less well than in the real
logs. What a model can learn from it, by construction:

* **Popularity** — item weights follow a Zipf-Mandelbrot law, ``(rank + zipf_offset) ** -zipf_exponent`` (ranks
  shuffled over items): a power-law tail under a flatter head, as in the real logs.
* **Tastes that drift** — every item belongs to one of ``num_clusters`` clusters of varied size, with its own
  vocabulary, category and brands, so item text carries the cluster. A user has ``tastes_per_user`` taste
  clusters (drawn by cluster popularity) with Dirichlet(``taste_concentration``) weights. Every session (a run of
  events minutes apart; a new one starts with probability ``p_new_session``) follows one cluster: one of the
  user's tastes, or with probability ``p_explore`` any cluster; it is redrawn inside a session with probability
  ``p_switch``, and at a new session one of the user's tastes is replaced with probability ``p_drift``. Which
  tastes come back, and when, only the longer history reveals.
* **Related items, a few steps back** — items lie in a latent space around their cluster's centre
  (``item_spread``); an item's related items are its ``num_related`` nearest ones, drawn with probability
  proportional to ``weight * exp(similarity / related_temperature)``. With probability ``p_related`` the next
  item is a related item of one of the user's last ``len(related_lags)`` items (the last with weight
  ``related_lags[0]``, the one before with ``related_lags[1]``, ...), otherwise an item of the session's cluster
  by popularity. So the last item alone narrows the next one down only partly (a first-order transition table
  sees only the related-item steps that start from it), the items before it tell more, and similar items having
  similar related items is structure an embedding model can share across sparse counts.
* **No repeats** — a user never interacts with an item twice (none of the real datasets here has repeats).
* **Time** — gaps are minutes inside a session and days between sessions.

Lengths are ``min_length`` plus a log-normal with mean ``mean_length - min_length`` (capped at ``max_length``
and at half the catalogue): a long tail like the real logs'. Generation is vectorised over users (one NumPy step
per sequence position); the default takes about two seconds.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from genrec.data.schema import ITEM, TIMESTAMP, USER, InteractionLog
from genrec.errors import ConfigError

_SYLLABLES = ["ka", "lo", "mi", "ra", "ven", "tor", "sil", "qua", "ber", "dun", "fel", "gar", "hol", "jin", "mar",
              "nor", "pel", "ros", "sta", "tuv", "ul", "wex", "yor", "zan", "bri", "cal", "dro", "esk", "fin", "glo"]
_PRODUCT_TYPES = ["cream", "serum", "lotion", "mask", "oil", "gel", "spray", "balm", "powder", "kit", "set",
                  "brush", "soap", "tonic", "polish", "wash"]
_SECONDS_PER_MINUTE = 60
_SECONDS_PER_DAY = 86_400
_REDRAWS = 8          # draws of the generative process before a repeated item is replaced by an unseen one
_LENGTH_SIGMA = 1.0   # log-normal shape of the sequence lengths
_LATENT_DIM = 16      # dimension of the item space that defines related items


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


def _draw_rows(rng: np.random.Generator, cdf: np.ndarray) -> np.ndarray:
    """One column index per row of the row-wise cumulative distributions ``cdf`` ``(n, k)``."""
    u = rng.random(len(cdf))[:, None] * cdf[:, -1:]
    return np.minimum((cdf < u).sum(axis=1), cdf.shape[1] - 1)


def _related_items(position: np.ndarray, weight: np.ndarray, k: int, temperature: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Every item's ``k`` nearest other items by cosine similarity of ``position`` ``(n, d)`` (unit rows), and the
    cumulative probabilities ``(n, k)`` of drawing each: proportional to ``weight * exp(similarity / temperature)``.
    Computed in blocks of rows, so memory stays ``O(block * n)``."""
    n = len(position)
    neighbours = np.empty((n, k), dtype=np.int64)
    logits = np.empty((n, k))
    for start in range(0, n, 1024):
        similarity = position[start:start + 1024] @ position.T
        similarity[np.arange(len(similarity)), np.arange(start, start + len(similarity))] = -np.inf  # not itself
        top = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
        neighbours[start:start + 1024] = top
        logits[start:start + 1024] = np.take_along_axis(similarity, top, axis=1) / temperature + np.log(weight[top])
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return neighbours, np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)


def _check(ok: bool, key: str, message: str) -> None:
    """:class:`ConfigError` for the generator's parameter ``key`` (``data.reader.<key>`` in the config)."""
    if not ok:
        raise ConfigError(f"data.reader.{key}", message)


def _lengths(rng: np.random.Generator, n: int, mean_length: float, min_length: int, max_length: int) -> np.ndarray:
    """``(n,)`` sequence lengths: ``min_length`` + a log-normal with mean ``mean_length - min_length``, capped."""
    excess = max(mean_length - min_length, 0.5)
    extra = rng.lognormal(np.log(excess) - _LENGTH_SIGMA ** 2 / 2, _LENGTH_SIGMA, size=n)
    return np.minimum(min_length + np.round(extra).astype(np.int64), max_length)


def generate_synthetic(num_users: int = 6000, num_items: int = 6000, num_clusters: int = 40,
                       mean_length: float = 20.0, min_length: int = 5, max_length: int = 200,
                       zipf_exponent: float = 0.8, zipf_offset: float = 40.0, tastes_per_user: int = 3,
                       taste_concentration: float = 1.0, p_new_session: float = 0.2, p_explore: float = 0.5,
                       p_switch: float = 0.1, p_drift: float = 0.3, num_related: int = 50, item_spread: float = 0.5,
                       related_temperature: float = 0.2, p_related: float = 0.5,
                       related_lags: tuple[float, ...] = (0.5, 0.3, 0.2), seed: int = 0,
                       name: str = "synthetic") -> InteractionLog:
    """Generate the log. Item IDs are ``0..num_items-1``, user IDs ``0..num_users-1``; see the module doc for
    every parameter."""
    _check(num_clusters >= 2 and num_items >= num_clusters, "num_items",
           f"need num_items >= num_clusters >= 2, got num_items={num_items}, num_clusters={num_clusters}")
    _check(1 <= tastes_per_user <= num_clusters, "tastes_per_user",
           f"need 1 <= tastes_per_user <= num_clusters ({num_clusters}), got {tastes_per_user}")
    _check(1 <= min_length <= max_length, "min_length",
           f"need 1 <= min_length <= max_length, got min_length={min_length}, max_length={max_length}")
    _check(num_related >= 1, "num_related", f"need at least 1 related item per item, got {num_related}")
    _check(len(related_lags) > 0 and min(related_lags) >= 0 and sum(related_lags) > 0, "related_lags",
           f"need non-negative weights with a positive sum, got {list(related_lags)}")
    for key, value in dict(p_new_session=p_new_session, p_explore=p_explore, p_switch=p_switch, p_drift=p_drift,
                           p_related=p_related).items():
        _check(0.0 <= value <= 1.0, key, f"a probability must lie in [0, 1], got {value}")
    rng = np.random.default_rng(seed)

    # Items: clusters of varied size (items sorted by cluster so a cluster is a contiguous range), Zipf-Mandelbrot
    # weights, and the related items of every item.
    share = rng.dirichlet(np.full(num_clusters, 2.0))
    cluster_of = np.sort(np.concatenate([np.arange(num_clusters),  # every cluster non-empty
                                         rng.choice(num_clusters, size=num_items - num_clusters, p=share)]))
    cluster_start = np.searchsorted(cluster_of, np.arange(num_clusters + 1))
    weight = rng.permutation((np.arange(1, num_items + 1, dtype=np.float64) + zipf_offset) ** -zipf_exponent)
    cum_weight = np.cumsum(weight)
    cluster_p = np.bincount(cluster_of, weights=weight, minlength=num_clusters) / weight.sum()
    position = rng.normal(size=(num_clusters, _LATENT_DIM))[cluster_of] + item_spread * rng.normal(
        size=(num_items, _LATENT_DIM))
    position /= np.linalg.norm(position, axis=1, keepdims=True)
    related, related_cdf = _related_items(position, weight, min(num_related, num_items - 1), related_temperature)

    # Users: taste clusters (by cluster popularity) and their weights, sequence lengths (never the whole catalogue).
    tastes = np.stack([rng.choice(num_clusters, size=tastes_per_user, replace=False, p=cluster_p)
                       for _ in range(num_users)])
    taste_cdf = np.cumsum(rng.dirichlet(np.full(tastes_per_user, taste_concentration), size=num_users), axis=1)
    lengths = np.minimum(_lengths(rng, num_users, mean_length, min_length, max_length), num_items // 2 + 1)
    lag_cdf = np.cumsum(np.asarray(related_lags, dtype=np.float64))

    def session_clusters(users: np.ndarray) -> np.ndarray:
        """The cluster a session of each of ``users`` follows: one of their tastes, or any (``p_explore``)."""
        own = tastes[users, _draw_rows(rng, taste_cdf[users])]
        return np.where(rng.random(len(users)) < p_explore, rng.choice(num_clusters, size=len(users), p=cluster_p),
                        own)

    longest = int(lengths.max())
    items = np.zeros((num_users, longest), dtype=np.int64)
    times = np.zeros((num_users, longest), dtype=np.int64)
    all_users = np.arange(num_users)
    current = session_clusters(all_users)
    items[:, 0] = _sample_in_clusters(rng, current, cluster_start, cum_weight)
    times[:, 0] = rng.integers(0, 365 * _SECONDS_PER_DAY, size=num_users)
    for t in range(1, longest):
        users = all_users[lengths > t]
        new_session = rng.random(len(users)) < p_new_session
        drift = users[new_session & (rng.random(len(users)) < p_drift)]
        tastes[drift, rng.integers(0, tastes_per_user, size=len(drift))] = rng.choice(num_clusters, size=len(drift),
                                                                                      p=cluster_p)
        redraw = users[new_session | (rng.random(len(users)) < p_switch)]
        current[redraw] = session_clusters(redraw)
        gap = np.where(new_session,
                       rng.lognormal(np.log(2 * _SECONDS_PER_DAY), 0.8, size=len(users)),
                       rng.exponential(10 * _SECONDS_PER_MINUTE, size=len(users)))
        times[users, t] = times[users, t - 1] + 1 + gap.astype(np.int64)

        def next_items(rows: np.ndarray) -> np.ndarray:
            """The next item of ``users[rows]``: a related item of a recent one, or one of the session's cluster."""
            u = users[rows]
            lag = 1 + np.minimum((rng.random(len(rows))[:, None] * lag_cdf[-1] > lag_cdf).sum(axis=1), t - 1)
            anchor = items[u, t - lag]
            follow = related[anchor, _draw_rows(rng, related_cdf[anchor])]
            in_session = _sample_in_clusters(rng, current[u], cluster_start, cum_weight)
            return np.where(rng.random(len(rows)) < p_related, follow, in_session)

        chosen = np.empty(len(users), dtype=np.int64)
        todo = np.arange(len(users))
        for _ in range(_REDRAWS):  # redraw items the user already has: no repeats
            chosen[todo] = next_items(todo)
            todo = todo[(items[users[todo], :t] == chosen[todo, None]).any(axis=1)]
            if len(todo) == 0:
                break
        for row in todo:  # still a repeat after the redraws: an unseen item of the session's cluster (or any)
            u, cluster = users[row], current[users[row]]
            pool = np.setdiff1d(np.arange(cluster_start[cluster], cluster_start[cluster + 1]), items[u, :t])
            chosen[row] = rng.choice(pool if len(pool) else np.setdiff1d(np.arange(num_items), items[u, :t]))
        items[users, t] = chosen
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
