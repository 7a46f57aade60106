"""The LightningDataModule: reader config -> cached :class:`SequenceData` -> jagged train/valid/test loaders."""
from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
from hydra.utils import get_method
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from genrec.data.batch import EvalSequences, LengthBucketSampler, TrainPrefixes, TrainSequences, collate
from genrec.data.cache import load_or_build
from genrec.data.preprocess import PreprocessConfig
from genrec.data.schema import InteractionLog, SequenceData

TRAIN_EXAMPLES = ("sequences", "prefixes")


def _plain(cfg: Any) -> Any:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def read_log(reader: dict | DictConfig) -> InteractionLog:
    """Call the reader named by ``reader["_target_"]`` with the other keys. Unlike ``hydra.utils.instantiate``
    this lets a reader's :class:`DataError` through unwrapped, so the CLI can print it as one line."""
    kwargs = dict(_plain(reader))
    return get_method(kwargs.pop("_target_"))(**kwargs)


def load_dataset(reader: dict | DictConfig, preprocess: dict | DictConfig | None = None,
                 cache_dir: str | None = None) -> SequenceData:
    """Read with ``reader`` (a ``_target_`` config returning an InteractionLog) and preprocess, through the
    Parquet cache when ``cache_dir`` is set."""
    reader = _plain(reader)
    pre = PreprocessConfig(**(_plain(preprocess) or {}))
    return load_or_build(reader, lambda: read_log(reader), pre, cache_dir)


class SequenceDataModule(L.LightningDataModule):
    """Leave-one-out sequential data: train on each user's sequence minus its last two items, validate on the
    second-to-last item, test on the last.

    Args:
        reader: Hydra config of the reader (``_target_`` + arguments), e.g. ``genrec.data.movielens.read_movielens``.
        preprocess: :class:`PreprocessConfig` fields.
        max_len: most recent items kept per input sequence.
        batch_size / eval_batch_size: sequences per training / evaluation batch.
        num_workers: DataLoader workers.
        cache_dir: Parquet cache root (``None``: no cache).
        train_examples: ``"sequences"`` (every position of a training part predicts the next item) or
            ``"prefixes"`` (one example per target, :class:`TrainPrefixes`).
        bucket_by_length: batch sequences of similar length together, to cut padding: shuffled length buckets
            (:class:`LengthBucketSampler`) for training, evaluation users sorted by history length.
    """

    def __init__(self, reader: dict | DictConfig, preprocess: dict | DictConfig | None = None, max_len: int = 50,
                 batch_size: int = 128, eval_batch_size: int = 512, num_workers: int = 0,
                 cache_dir: str | None = None, train_examples: str = "sequences", bucket_by_length: bool = False):
        super().__init__()
        if train_examples not in TRAIN_EXAMPLES:
            raise ValueError(f"train_examples must be one of {TRAIN_EXAMPLES}, got {train_examples!r}")
        self.train_examples, self.bucket_by_length = train_examples, bucket_by_length
        self.reader, self.preprocess = _plain(reader), _plain(preprocess) or {}
        self.max_len, self.batch_size, self.eval_batch_size = max_len, batch_size, eval_batch_size
        self.num_workers, self.cache_dir = num_workers, cache_dir
        self.data: SequenceData | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            self.data = load_dataset(self.reader, self.preprocess, self.cache_dir)

    def _loader(self, dataset, batch_size: int, shuffle: bool) -> DataLoader:
        workers = {"collate_fn": collate, "num_workers": self.num_workers,
                   "persistent_workers": self.num_workers > 0}
        if not self.bucket_by_length:
            return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, **workers)
        if shuffle:
            return DataLoader(dataset, batch_sampler=LengthBucketSampler(dataset.lengths, batch_size), **workers)
        order = np.argsort(dataset.lengths, kind="stable")
        return DataLoader(dataset, batch_sampler=[order[i:i + batch_size].tolist()
                                                  for i in range(0, len(order), batch_size)], **workers)

    def train_dataloader(self) -> DataLoader:
        dataset = (TrainPrefixes if self.train_examples == "prefixes" else TrainSequences)(self.data, self.max_len)
        return self._loader(dataset, self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(EvalSequences(self.data, self.max_len, "valid"), self.eval_batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(EvalSequences(self.data, self.max_len, "test"), self.eval_batch_size, shuffle=False)
