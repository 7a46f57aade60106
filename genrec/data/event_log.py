"""A seeded synthetic event log of any size, written to Parquet chunk by chunk (bounded memory): the input of the
out-of-core preprocessing benchmark (``scripts/make_event_log.py``, ``scripts/bench/bench_preprocess.py``).

What it looks like (a production click log, not a dataset to learn from):

* **users with a long tail of activity** — a user's share of the events is log-normal (``user_sigma``): a median
  user has a fraction of the mean, a few have hundreds of times more, and about one in ten falls under a 5-core;
* **items with a power-law popularity** — Zipf ``(rank) ** -item_exponent`` over shuffled ranks, so most of the
  catalogue is a tail of items seen a few times (dropped by a k-core), and a user meets popular items again
  (repeated user-item pairs, which ``dedupe`` removes);
* **raw IDs like a warehouse's** — distinct random 40-bit integers (``id_type="int"``) or their hexadecimal text
  (``id_type="str"``), unrelated to activity or popularity;
* **time** — unix seconds over ``days`` days; chunk ``k`` covers the ``k``-th slice of that span, with its events
  in random order inside the slice (a log appended hour by hour, not sorted within an hour).

Chunk ``k`` is drawn from a generator seeded by ``(seed, k)``, so the file depends on ``(num_events, seed,
chunk_size)`` and the settings only, and memory is bounded by one chunk plus the ID tables
(``(num_users + num_items,)`` values).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from genrec.errors import ConfigError

START = 1_704_067_200  # 2024-01-01T00:00:00Z
_SECONDS_PER_DAY = 86_400
_ID_BITS = 40


def _distinct_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    """``(n,)`` distinct random int64 IDs below ``2 ** 40``, in random order."""
    ids = np.unique(rng.integers(1, 2 ** _ID_BITS, size=n + n // 8 + 16))
    while len(ids) < n:  # practically never: 2 ** 40 values leave few collisions
        ids = np.unique(np.concatenate([ids, rng.integers(1, 2 ** _ID_BITS, size=n)]))
    return rng.permutation(ids)[:n]


def _as_column(ids: np.ndarray, id_type: str) -> pa.Array:
    if id_type == "int":
        return pa.array(ids, pa.int64())
    return pa.array(np.char.mod("%010x", ids), pa.string())


def write_event_log(path: str | Path, num_events: int, *, num_users: int | None = None,
                    num_items: int | None = None, user_sigma: float = 1.2, item_exponent: float = 1.1,
                    days: int = 90, id_type: str = "int", seed: int = 0, chunk_size: int = 1_000_000,
                    compression: str = "snappy") -> Path:
    """Write ``num_events`` events (``user_id``, ``item_id``, ``timestamp``) to the Parquet file ``path``.

    Args:
        num_users / num_items: default ``num_events // 50`` each (50 events per user on average; most items are
            a tail that a 5-core drops).
        user_sigma: log-normal spread of the users' activity.
        item_exponent: Zipf exponent of item popularity.
        days: time span of the log.
        id_type: ``"int"`` (int64 IDs) or ``"str"`` (their ten-digit hexadecimal text).
        chunk_size: events per generated chunk and per Parquet row group.
    """
    if num_events < 1 or chunk_size < 1:
        raise ConfigError("num_events", f"num_events and chunk_size must be positive, got {num_events}, "
                                        f"{chunk_size}")
    if id_type not in ("int", "str"):
        raise ConfigError("id_type", f"expected 'int' or 'str', got {id_type!r}")
    num_users = num_users or max(num_events // 50, 1)
    num_items = num_items or max(num_events // 50, 1)
    rng = np.random.default_rng([seed, 2 ** 32])  # the tables; chunk k uses [seed, k]
    user_ids, item_ids = _distinct_ids(rng, num_users), _distinct_ids(rng, num_items)
    user_cdf = np.cumsum(rng.lognormal(0.0, user_sigma, size=num_users))
    item_cdf = np.cumsum(np.arange(1, num_items + 1, dtype=np.float64) ** -item_exponent)
    item_ids = item_ids[rng.permutation(num_items)]  # popularity rank -> a random ID
    user_cdf /= user_cdf[-1]
    item_cdf /= item_cdf[-1]
    span = days * _SECONDS_PER_DAY
    schema = pa.schema([("user_id", pa.int64() if id_type == "int" else pa.string()),
                        ("item_id", pa.int64() if id_type == "int" else pa.string()), ("timestamp", pa.int64())])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, schema, compression=compression) as writer:
        for k, start in enumerate(range(0, num_events, chunk_size)):
            n = min(chunk_size, num_events - start)
            chunk_rng = np.random.default_rng([seed, k])
            users = np.searchsorted(user_cdf, chunk_rng.random(n), side="right").clip(max=num_users - 1)
            items = np.searchsorted(item_cdf, chunk_rng.random(n), side="right").clip(max=num_items - 1)
            t0 = START + span * start // num_events
            t1 = START + span * (start + n) // num_events
            times = chunk_rng.integers(t0, max(t1, t0 + 1), size=n)
            writer.write_table(pa.table([_as_column(user_ids[users], id_type), _as_column(item_ids[items], id_type),
                                         pa.array(times, pa.int64())], schema=schema), row_group_size=chunk_size)
    return path
