"""The item-embedding module every model gets from outside: the interface (:class:`ItemEmbeddingInterface`) and its
static implementation, one item table in :class:`EmbeddingTables` (:class:`ItemEmbedding`; the dynamic one is
:class:`genrec.embedding.dynamic.DynamicItemEmbedding`).

Models only call :meth:`~ItemEmbeddingInterface.forward` (jagged lookup of the input items),
:meth:`~ItemEmbeddingInterface.lookup`, :meth:`~ItemEmbeddingInterface.forward_with_items` and
:meth:`~ItemEmbeddingInterface.table`, so the same model code runs on the unsharded collection, on a sharded one and
on a dynamic table. The static table serves two features: ``item`` (the users' input sequences) and
``item_candidates`` (items a loss or a ranking scores). A training step looks both up in ONE call
(:meth:`~ItemEmbeddingInterface.forward_with_items`): a sharded or dynamic table's optimizer is fused into the
lookup's backward, so two lookups in one step would apply it twice.
"""
from __future__ import annotations

import abc

import torch
from torch import nn
from torchrec import KeyedJaggedTensor

from genrec.data.batch import ITEM_FEATURE
from genrec.embedding.tables import EmbeddingTables, TableConfig


def lookup_features(feature: str, values: torch.Tensor, lengths: torch.Tensor, item_ids: torch.Tensor
                    ) -> KeyedJaggedTensor:
    """What one lookup of the item table reads: the input items ``values (N,)`` jagged by ``lengths (B,)`` under
    ``feature``, and ``item_ids (*,)`` as the first bag of ``<feature>_candidates`` (the other ``B - 1`` bags
    empty)."""
    stride = max(len(lengths), 1)
    lengths = lengths if len(lengths) else lengths.new_zeros(1)
    candidate_lengths = lengths.new_zeros(stride)
    candidate_lengths[0] = item_ids.numel()
    return KeyedJaggedTensor.from_lengths_sync(keys=[feature, f"{feature}_candidates"],
                                               values=torch.cat([values, item_ids.reshape(-1)]),
                                               lengths=torch.cat([lengths, candidate_lengths]))


class ItemEmbeddingInterface(abc.ABC, nn.Module):
    """What a model reads of its item table (ID ``0`` is padding; real items are ``1..num_items``).

    Attributes:
        num_embeddings: ``num_items + 1`` (the rows :meth:`table` returns).
        dim: the embedding width ``D``.
        feature: the KeyedJaggedTensor key of the input items.
    """

    num_embeddings: int
    dim: int
    feature: str

    @abc.abstractmethod
    def forward_with_items(self, features: KeyedJaggedTensor, item_ids: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """One lookup of the inputs ``features[feature]`` (``N`` values) and of ``item_ids (*,)``
        -> ``((N, D), (*, D))``: a training step's only call into the table."""

    @abc.abstractmethod
    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """Dense lookup: ``(*,)`` int64 IDs -> ``(*, D)``."""

    @abc.abstractmethod
    def table(self) -> torch.Tensor:
        """The whole table ``(num_items + 1, D)``, for full-corpus scoring and export."""

    def forward(self, features: KeyedJaggedTensor) -> torch.Tensor:
        """Jagged lookup: ``features[feature]`` with ``N`` values -> ``(N, D)``."""
        ids = features[self.feature].values()
        return self.forward_with_items(features, ids.new_zeros(0))[0]

    @property
    def all_ids(self) -> torch.Tensor:
        """``(num_items + 1,)`` every ID, for a lookup of the whole table."""
        return torch.arange(self.num_embeddings)

    def set_event_time(self, time: int) -> None:
        """The event time of the next training batches (a table that expires rows by event time uses it)."""

    def counters(self) -> dict[str, float]:
        """The table's own counters for the run's logs (admissions, evictions, hits per tier...): none here."""
        return {}


class ItemEmbedding(ItemEmbeddingInterface):
    """One table of ``num_items + 1`` rows (row 0 is padding and is never looked up by jagged inputs).

    Args:
        num_items: number of real items; valid IDs are ``0..num_items``.
        dim: embedding dimension ``D``.
        init_std: standard deviation of the uniform initialisation (bounds ``±sqrt(3) * init_std``).
        feature: the KeyedJaggedTensor key of the input items; the candidates' key is ``<feature>_candidates``.
        out_of_range: ``"error"`` (an ID outside ``[0, num_items]`` raises, naming the feature) or ``"hash"``.
    """

    def __init__(self, num_items: int, dim: int, init_std: float = 0.02, feature: str = ITEM_FEATURE,
                 out_of_range: str = "error", device: torch.device | str | None = None):
        super().__init__()
        self.num_embeddings, self.dim, self.feature = num_items + 1, dim, feature
        self.candidates = f"{feature}_candidates"
        self.table_name = f"{feature}_table"
        self.tables = EmbeddingTables([TableConfig(self.table_name, num_items + 1, dim, (feature, self.candidates),
                                                   init_std, out_of_range)], device=device)
        self.register_buffer("_all_ids", torch.arange(num_items + 1, device=device), persistent=False)

    @property
    def all_ids(self) -> torch.Tensor:
        return self._all_ids

    def forward_with_items(self, features: KeyedJaggedTensor, item_ids: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """One lookup of the inputs ``features[feature]`` (``N`` values) and of ``item_ids (*,)``
        -> ``((N, D), (*, D))``."""
        inputs = features[self.feature]
        out = self.tables(lookup_features(self.feature, inputs.values(), inputs.lengths(), item_ids))
        return out[self.feature], out[self.candidates].reshape(*item_ids.shape, self.dim)

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """Dense lookup: ``(*,)`` int64 IDs -> ``(*, D)``."""
        empty = ids.new_zeros(0)
        looked_up = self.tables(lookup_features(self.feature, empty, empty, ids))
        return looked_up[self.candidates].reshape(*ids.shape, self.dim)

    @classmethod
    def weight_key(cls, feature: str = ITEM_FEATURE) -> str:
        """The state-dict key of the table's weight, relative to this module (read off a 2-row table)."""
        return next(k for k in cls(1, 1, feature=feature).state_dict() if k.endswith(".weight"))

    def table(self) -> torch.Tensor:
        """The whole table ``(num_items + 1, D)`` for full-corpus scoring: the weight itself when this process
        holds it, else every row looked up from the processes that own them (see docs/ARCHITECTURE.md)."""
        weight = self.tables.weight(self.table_name)
        if weight is not None:
            return weight
        return self.lookup(self._all_ids)
