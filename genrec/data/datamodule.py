"""The LightningDataModule: reader config -> cached :class:`SequenceData` -> jagged train/valid/test loaders."""
from __future__ import annotations

from typing import Any, Callable

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from genrec.data.batch import EvalSequences, IndexedExamples, TrainPrefixes, TrainSequences, collate
from genrec.data.cache import load_or_build
from genrec.data.features import EncodedFeatures, FeatureConfig, encode_features
from genrec.data.preprocess import PreprocessConfig
from genrec.data.samplers import EvenShardBatchSampler, TrainBatchSampler
from genrec.data.schema import InteractionLog, SequenceData
from genrec.data.split import SplitConfig, apply_split
from genrec.errors import UserError
from genrec.trust import call_target

TRAIN_EXAMPLES = ("sequences", "prefixes")


def _plain(cfg: Any) -> Any:
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg


def read_log(reader: dict | DictConfig) -> InteractionLog:
    """Call the reader named by ``reader["_target_"]`` with the other keys (:func:`genrec.trust.call_target`: a
    reader's :class:`DataError` reaches the CLI unwrapped, as one line)."""
    return call_target(reader, key="data.reader._target_")


def load_dataset(reader: dict | DictConfig, preprocess: dict | DictConfig | None = None,
                 cache_dir: str | None = None, split: dict | DictConfig | None = None) -> SequenceData:
    """Read with ``reader`` (a ``_target_`` config returning an InteractionLog) and preprocess, through the
    Parquet cache when ``cache_dir`` is set, then split (``data.split``, :mod:`genrec.data.split`; the cache holds
    the sequences, whatever the split)."""
    reader = _plain(reader)
    pre = PreprocessConfig.from_config(preprocess)
    split = SplitConfig.from_config(split)

    def read() -> InteractionLog:
        log_ = read_log(reader)
        split.require_timestamps(log_.has_timestamps, log_.source or log_.name)  # before preprocessing
        return log_

    return apply_split(load_or_build(reader, read, pre, cache_dir), split)


class SequenceDataModule(L.LightningDataModule):
    """Sequential data split by ``split``: leave-one-out (train on each user's sequence minus its last two
    items, validate on the second-to-last item, test on the last) or a time split (:mod:`genrec.data.split`).

    Args:
        reader: Hydra config of the reader (``_target_`` + arguments), e.g. ``genrec.data.movielens.read_movielens``.
        preprocess: :class:`PreprocessConfig` fields.
        split: :class:`~genrec.data.split.SplitConfig` fields (``None``: leave-one-out).
        max_len: most recent items kept per input sequence.
        batch_size / eval_batch_size: sequences per training / evaluation batch.
        num_workers: DataLoader workers.
        cache_dir: Parquet cache root (``None``: no cache).
        seed: the training order's seed (:class:`TrainBatchSampler`: the order of an epoch depends on the seed and
            the epoch only, so a resumed run replays it).
        train_examples: ``"sequences"`` (every position of a training part predicts the next item) or
            ``"prefixes"`` (one example per target, :class:`TrainPrefixes`).
        bucket_by_length: batch sequences of similar length together, to cut padding: shuffled length buckets for
            training (:class:`TrainBatchSampler`), evaluation users sorted by history length (one process only;
            several processes evaluate in the usual order).
        features: the side features and actions a model uses (``model.features``, see
            :mod:`genrec.data.features`); ``setup`` checks them against the data and encodes them into
            :attr:`features`, and the batches carry the actions and user features.

    Under a Trainer with several processes each loader serves this process's share (the Trainer runs with
    ``use_distributed_sampler=False``): training users are shuffled and split by :class:`TrainBatchSampler` (batch
    size per process); evaluation users are split so that every user is scored exactly once and every process
    runs the same number of batches (a sharded table's lookups are collective calls).
    """

    def __init__(self, reader: dict | DictConfig, preprocess: dict | DictConfig | None = None, max_len: int = 50,
                 batch_size: int = 128, eval_batch_size: int = 512, num_workers: int = 0,
                 cache_dir: str | None = None, seed: int = 0, train_examples: str = "sequences",
                 bucket_by_length: bool = False, split: dict | DictConfig | None = None,
                 features: dict | DictConfig | None = None):
        super().__init__()
        if train_examples not in TRAIN_EXAMPLES:
            raise UserError(f"train_examples must be one of {TRAIN_EXAMPLES}, got {train_examples!r}")
        SplitConfig.from_config(split)  # a bad split fails here, before the data loads
        self.train_examples, self.bucket_by_length = train_examples, bucket_by_length
        self.reader, self.preprocess, self.split = _plain(reader), _plain(preprocess) or {}, _plain(split)
        self.max_len, self.batch_size, self.eval_batch_size = max_len, batch_size, eval_batch_size
        self.num_workers, self.cache_dir, self.seed = num_workers, cache_dir, seed
        self.feature_config = FeatureConfig.from_config(_plain(features))
        self.data: SequenceData | None = None
        #: a training collation over :class:`IndexedExamples` batches, ``(indices, examples) -> batch`` (a retrieval
        #: task sets one that draws its loss's candidates: genrec.data.candidates); None: plain :func:`collate`
        self.train_collate: Callable[[tuple[list[int], list]], Any] | None = None
        #: wraps the training loader (genrec.training.prefetch reads its batches ahead); None: the loader as it is
        self.train_wrap: Callable[[DataLoader], Any] | None = None
        self.features: EncodedFeatures | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.data is None:
            data = load_dataset(self.reader, self.preprocess, self.cache_dir, self.split)
            if self.feature_config.enabled:
                data, self.features = encode_features(data, self.feature_config)
            self.data = data

    def _rank_and_world(self) -> tuple[int, int]:
        return (self.trainer.global_rank, self.trainer.world_size) if self.trainer is not None else (0, 1)

    def _loader(self, dataset, batch_sampler, generator: torch.Generator | None = None,
                collate_fn: Callable = collate) -> DataLoader:
        # every loader has its own generator: creating an iterator then draws its worker seed from it, not from the
        # global random state that dropout and negative sampling use (a resumed run restores that state)
        return DataLoader(dataset, batch_sampler=batch_sampler, collate_fn=collate_fn, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0, generator=generator or torch.Generator())

    def train_dataloader(self) -> DataLoader:
        dataset = (TrainPrefixes if self.train_examples == "prefixes" else TrainSequences)(self.data, self.max_len)
        rank, world = self._rank_and_world()
        sampler = TrainBatchSampler(len(dataset), self.batch_size, self.seed, rank, world,
                                    dataset.lengths if self.bucket_by_length else None)
        if self.train_collate is not None:
            loader = self._loader(IndexedExamples(dataset), sampler, sampler.generator, self.train_collate)
        else:
            loader = self._loader(dataset, sampler, sampler.generator)
        return loader if self.train_wrap is None else self.train_wrap(loader)

    def eval_dataloader(self, split: str, rank: int = 0, world: int = 1) -> DataLoader:
        """Process ``rank``'s share of the ``"valid"`` or ``"test"`` users (by default: all of them)."""
        dataset = EvalSequences(self.data, self.max_len, split)
        if world == 1 and self.bucket_by_length:
            order = np.argsort(dataset.lengths, kind="stable")
            return self._loader(dataset, [order[i:i + self.eval_batch_size].tolist()
                                          for i in range(0, len(order), self.eval_batch_size)])
        return self._loader(dataset, EvenShardBatchSampler(len(dataset), self.eval_batch_size, rank, world))

    def val_dataloader(self) -> DataLoader:
        return self.eval_dataloader("valid", *self._rank_and_world())

    def test_dataloader(self) -> DataLoader:
        return self.eval_dataloader("test", *self._rank_and_world())
