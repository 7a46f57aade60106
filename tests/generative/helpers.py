"""Small semantic-ID tables and batches for the generative-model tests."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import torch

from genrec.conf import compose_config
from genrec.data.batch import JaggedBatch
from genrec.data.datamodule import load_dataset
from genrec.tokenize.sid_table import PAD_CODE, SIDTable

#: a tiny synthetic genrec-train run (one epoch) and small generator sizes for the end-to-end tests
TINY = ["data.reader.num_users=300", "data.reader.num_items=120", "data.reader.num_clusters=6",
        "trainer.max_epochs=1", "trainer.enable_progress_bar=false", "+trainer.enable_model_summary=false",
        "data.max_len=10", "data.batch_size=64", "threads=1"]
SMALL = {"tiger": ["model.generator.d_model=16", "model.generator.d_ff=32", "model.generator.num_heads=2",
                   "model.generator.d_kv=8", "model.generator.num_layers=1", "model.generator.num_decoder_layers=1"],
         "sid_gpt": ["model.dim=16", "model.backbone.num_layers=1", "model.backbone.ffn_dim=32"]}


def make_table(num_items: int = 40, sizes: tuple[int, ...] = (4, 5, 3), seed: int = 0) -> SIDTable:
    """``num_items`` distinct random code tuples out of every tuple the codebooks allow."""
    every = np.array(list(itertools.product(*[range(k) for k in sizes])))
    codes = every[np.random.default_rng(seed).choice(len(every), num_items, replace=False)]
    raw = np.array([None] + [f"item{i}" for i in range(1, num_items + 1)], dtype=object)
    return SIDTable(np.vstack([np.full((1, len(sizes)), PAD_CODE), codes]), sizes, raw, dataset="toy")


def tiny_sid_table(folder: Path, cache_dir: Path | None = None) -> Path:
    """A random SID table (3 levels of 8 x 8 x 4 codes) for the items of the ``TINY`` dataset, saved in ``folder``
    (the dataset cached in ``cache_dir``, by default ``folder / "cache"``)."""
    cfg = compose_config("train", TINY + [f"data.cache_dir={cache_dir or folder / 'cache'}"])
    data = load_dataset(cfg.data.reader, cfg.data.preprocess, cfg.data.cache_dir)
    every = np.array(np.meshgrid(*[np.arange(k) for k in (8, 8, 4)], indexing="ij")).reshape(3, -1).T
    codes = every[np.random.default_rng(0).choice(len(every), data.num_items, replace=False)]
    table = SIDTable(np.vstack([np.full((1, 3), PAD_CODE), codes]), (8, 8, 4), data.item_raw_ids, dataset=data.name)
    table.save(folder)
    return folder


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
