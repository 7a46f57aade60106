"""Small semantic-ID tables and batches for the generative-model tests."""
from __future__ import annotations

import itertools

import numpy as np
import torch

from genrec.data.batch import JaggedBatch
from genrec.tokenize.sid_table import PAD_CODE, SIDTable


def make_table(num_items: int = 40, sizes: tuple[int, ...] = (4, 5, 3), seed: int = 0) -> SIDTable:
    """``num_items`` distinct random code tuples out of every tuple the codebooks allow."""
    every = np.array(list(itertools.product(*[range(k) for k in sizes])))
    codes = every[np.random.default_rng(seed).choice(len(every), num_items, replace=False)]
    raw = np.array([None] + [f"item{i}" for i in range(1, num_items + 1)], dtype=object)
    return SIDTable(np.vstack([np.full((1, len(sizes)), PAD_CODE), codes]), sizes, raw, dataset="toy")


def eval_batch(histories: list[list[int]], targets: list[int] | None = None) -> JaggedBatch:
    """Evaluation batch: each history is also the user's seen items."""
    lengths = torch.tensor([len(h) for h in histories])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    items = torch.tensor([i for h in histories for i in h], dtype=torch.long)
    targets = torch.tensor(targets if targets is not None else [1] * len(histories))
    return JaggedBatch(item_ids=items, offsets=offsets, target_ids=targets, user_ids=torch.arange(len(histories)),
                       seen_ids=items.clone(), seen_offsets=offsets.clone())


def train_batch(sequences: list[list[int]]) -> JaggedBatch:
    """Training batch of whole sequences (``TrainSequences`` layout: inputs and next items)."""
    inputs = [s[:-1] for s in sequences]
    lengths = torch.tensor([len(s) for s in inputs])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    return JaggedBatch(item_ids=torch.tensor([i for s in inputs for i in s]), offsets=offsets,
                       target_ids=torch.tensor([i for s in sequences for i in s[1:]]),
                       user_ids=torch.arange(len(sequences)))


def one_thread():
    """A fixture body: torch on one thread for the test (on a busy 2-core machine two threads run these small
    models several times slower), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
