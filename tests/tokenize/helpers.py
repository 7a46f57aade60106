"""Inputs for the tokenizer tests: clustered points, small SequenceData objects with item content, purity."""
from __future__ import annotations

import numpy as np
import pandas as pd

from genrec.data.schema import ITEM, SequenceData


def make_blobs(n: int, k: int, dim: int, seed: int = 0, spread: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """``n`` float32 points around ``k`` random unit-scale centres (Gaussian noise ``spread``) and their labels."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, dim))
    labels = np.arange(n) % k
    x = centres[labels] + spread * rng.normal(size=(n, dim))
    return x.astype(np.float32), labels


def make_data(items: pd.DataFrame | None, raw_ids: list | None = None, name: str = "toy") -> SequenceData:
    """A SequenceData whose items are ``items`` (rows in dense-ID order 1..N); one user who saw every item."""
    n = len(items) if items is not None else len(raw_ids)
    raw = np.empty(n + 1, dtype=object)
    raw[1:] = raw_ids if raw_ids is not None else [f"raw{i}" for i in range(1, n + 1)]
    if items is not None:
        items = items.reset_index(drop=True)
        items.index = pd.RangeIndex(1, n + 1, name=ITEM)
    return SequenceData(name=name, item_ids=np.arange(1, n + 1, dtype=np.int64),
                        offsets=np.array([0, n], dtype=np.int64), timestamps=None, item_raw_ids=raw,
                        user_raw_ids=np.array([0]), items=items)


def purity(codes: np.ndarray, labels: np.ndarray) -> float:
    """Share of items whose code's most common label is their own label."""
    hits = 0
    for code in np.unique(codes):
        hits += np.bincount(labels[codes == code]).max()
    return hits / len(codes)


