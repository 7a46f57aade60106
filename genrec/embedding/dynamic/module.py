"""The dynamic item table behind the interface models already use (:class:`genrec.embedding.ItemEmbeddingInterface`).

``forward``, ``forward_with_items``, ``lookup`` and ``table`` behave as ItemEmbedding's, so SequentialRecommender
(SASRec, HSTU) trains on it unchanged. In training mode (with gradients) each call is one table step: its IDs are
mapped (admitted, fetched, evicted for) and the backward pass applies the row optimizer to the rows it read, so a
training step makes ONE call (``forward_with_items``), as with a sharded TorchRec table. In evaluation mode a call
only reads: admitted rows from whichever tier holds them, the default vector for any other ID.

The table has no ``nn.Parameter``: the dense optimizer (``RetrievalTask.configure_optimizers``) never sees it.
With several processes (a default process group of more than one process at the first call) the rows are
sharded by raw-ID hash (:class:`~genrec.embedding.dynamic.sharded.ShardedDynamicTable`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torchrec import KeyedJaggedTensor

from genrec.data.batch import ITEM_FEATURE
from genrec.embedding.item_embedding import ItemEmbeddingInterface
from genrec.embedding.dynamic.checkpoint import load_state, shard_state
from genrec.embedding.dynamic.config import DynamicTableConfig
from genrec.embedding.dynamic.prefetch import Prefetcher
from genrec.embedding.dynamic.sharded import ShardedDynamicTable
from genrec.embedding.dynamic.table import DynamicTable, as_bytes, lookup


class DynamicItemEmbedding(ItemEmbeddingInterface):
    """Item IDs ``0..num_items`` (or any raw int64 IDs) -> rows of a dynamic table.

    Args:
        num_items: what the models sample negatives from and rank (``table()`` has ``num_items + 1`` rows);
            the table itself holds any raw int64 ID it is given.
        dim: embedding width ``D``.
        capacity: tier-0 rows (per process).
        init_std: a new row is uniform in ``±sqrt(3) * init_std``, from (seed, raw ID).
        feature: the KeyedJaggedTensor key of the input items.
        settings: the rest of :class:`~genrec.embedding.dynamic.config.DynamicTableConfig` (``seed``,
            ``admission``, ``eviction``, ``default``, ``optimizer``, ``store``, ``pinned_batches``,
            ``prefetch_depth``), checked: a bad value raises ``genrec.errors.ConfigError`` naming its key.
    """

    def __init__(self, num_items: int, dim: int, capacity: int, init_std: float = 0.02, feature: str = ITEM_FEATURE,
                 **settings: Any):
        super().__init__()
        self.num_embeddings, self.dim, self.feature = num_items + 1, dim, feature
        self.config = DynamicTableConfig.build(dim, capacity, init_std=init_std, **settings)
        self._table: DynamicTable | ShardedDynamicTable | None = None
        self._prefetcher: Prefetcher | None = None
        self._event_time: int | None = None
        #: set by a trainer that checkpoints the table itself, beside its checkpoint files (genrec-train does:
        #: genrec.training.tables); the module's state dict then holds a marker instead of the rows
        self.external_checkpoint = False

    @property
    def dynamic(self) -> DynamicTable | ShardedDynamicTable:
        """The table, built at first use (sharded when a process group of several processes exists then)."""
        if self._table is None:
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                self._table = ShardedDynamicTable(self.config)
            else:
                self._table = DynamicTable(self.config)
        return self._table

    @property
    def local_table(self) -> DynamicTable:
        """This process's shard (the whole table in one process)."""
        table = self.dynamic
        return table.local if isinstance(table, ShardedDynamicTable) else table

    def set_event_time(self, time: int) -> None:
        """The event time (e.g. the batch's largest timestamp) of the next training batches, for TTL eviction."""
        self._event_time = int(time)

    def _times(self) -> np.ndarray | None:
        return None if self._event_time is None else np.array([self._event_time])

    def _rows(self, ids: torch.Tensor, counted: torch.Tensor | None = None) -> torch.Tensor:
        """``(B,)`` -> ``(B, D)``: a training step (mapped now, or taken from the prefetcher) or a read.
        ``counted``: ``(B,)`` bool, the IDs that count towards admission (None: all)."""
        table = self.dynamic
        if not (self.training and torch.is_grad_enabled()):
            return table.read(ids)
        if isinstance(table, ShardedDynamicTable):
            return table.lookup(ids, self._times(), counted)
        if self._prefetcher is not None and self._prefetcher.pending:
            mapped = self._prefetcher.take(ids)
        else:
            mapped = table.map(ids, self._times(), counted)
        return lookup(table, mapped)

    def prefetch(self, features: KeyedJaggedTensor, item_ids: torch.Tensor, event_time: int | None = None) -> None:
        """Map a future training step's IDs now, in the background (``prefetch_depth`` steps at most): the step
        must then call :meth:`forward_with_items` with the same inputs, in the same order. ``event_time``: that
        step's event time (default: the one set now)."""
        if self.config.prefetch_depth == 0:
            raise ValueError("prefetch needs embedding.prefetch_depth >= 1")
        if isinstance(self.dynamic, ShardedDynamicTable):
            raise ValueError("prefetching a sharded dynamic table is not supported (its mapping is collective)")
        if self._prefetcher is None:
            self._prefetcher = Prefetcher(self.dynamic, self.config.prefetch_depth)
        times = self._times() if event_time is None else np.array([int(event_time)])
        ids, counted = self._values(features, item_ids)
        self._prefetcher.submit(ids, times, counted)

    def _values(self, features: KeyedJaggedTensor, item_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The IDs of one :meth:`forward_with_items` call ``(N + C,)`` and which count towards admission
        ``(N + C,)``: the inputs (occurrences of the feature), not the loss's candidates."""
        inputs = features[self.feature].values()
        counted = torch.arange(inputs.numel() + item_ids.numel()) < inputs.numel()
        return torch.cat([inputs, item_ids.reshape(-1)]), counted

    def forward_with_items(self, features: KeyedJaggedTensor, item_ids: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """One lookup of the inputs ``features[feature]`` (``N`` values) and of ``item_ids (*,)``
        -> ``((N, D), (*, D))``. Only the inputs count towards admission (``min_count``, ``probability``): the
        items a loss scores are looked up, not seen."""
        n = features[self.feature].values().numel()
        ids, counted = self._values(features, item_ids)
        out = self._rows(ids, counted)
        return out[:n], out[n:].reshape(*item_ids.shape, self.dim)

    def forward(self, features: KeyedJaggedTensor) -> torch.Tensor:
        """Jagged lookup: ``features[feature]`` with ``N`` values -> ``(N, D)``."""
        return self._rows(features[self.feature].values())

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """Dense lookup: ``(*,)`` int64 IDs -> ``(*, D)``."""
        return self._rows(ids.reshape(-1)).reshape(*ids.shape, self.dim)

    @torch.no_grad()
    def table(self) -> torch.Tensor:
        """``(num_items + 1, D)``: every item ID's vector (its admitted row, or the default)."""
        return self.dynamic.read(torch.arange(self.num_embeddings))

    def counters(self) -> dict[str, float]:
        """This process's counters (see :meth:`DynamicTable.counters`)."""
        return self.local_table.counters()

    def get_extra_state(self) -> dict:
        """The whole table in the module's state dict as tensors (loadable with ``weights_only=True``), for one
        process without tier 2; a marker when the trainer checkpoints the table itself (:attr:`external_checkpoint`).
        A sharded table or one with a store is checkpointed by
        :func:`genrec.embedding.dynamic.checkpoint.save_checkpoint` instead."""
        if self.external_checkpoint:
            return {"external": True}
        table = self.dynamic
        if isinstance(table, ShardedDynamicTable) or table.store is not None:
            raise RuntimeError("a sharded dynamic table, or one with a store, does not fit in a state dict: save it "
                               "with genrec.embedding.dynamic.checkpoint.save_checkpoint")
        arrays, meta = shard_state(table)
        return {"arrays": {k: torch.from_numpy(as_bytes(v) if v.dtype.names else np.ascontiguousarray(v))
                           for k, v in arrays.items()}, "meta": meta}

    def set_extra_state(self, state: dict) -> None:
        if state.get("external"):
            return  # the trainer loads the table from beside the checkpoint
        table = self.local_table
        arrays = {k: v.numpy() for k, v in state["arrays"].items()}
        arrays["records"] = arrays["records"].reshape(-1).view(table.dtype)
        load_state(table, [arrays], [state["meta"]], snapshots=[None])

    def close(self) -> None:
        """Stop the background threads and close the store."""
        if self._prefetcher is not None:
            self._prefetcher.close()
        if self._table is not None:
            self.local_table.close()

    def reset(self) -> None:
        """Close the table; the next use builds a fresh one (to load a checkpoint into: tables load fresh)."""
        self.close()
        self._table = self._prefetcher = None
