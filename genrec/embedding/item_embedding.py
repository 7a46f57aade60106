"""The item-embedding module every model gets from outside: one item table in :class:`EmbeddingTables`.

Models only call :meth:`ItemEmbedding.forward` (jagged lookup of the input items), :meth:`lookup`,
:meth:`forward_with_items` and :meth:`table`, so the same model code runs on the unsharded collection and on a
sharded one. The table serves two features: ``item`` (the users' input sequences) and ``item_candidates`` (items a
loss or a ranking scores). A training step looks both up in ONE collection call (:meth:`forward_with_items`): a
sharded table's optimizer is fused into the lookup's backward, so two lookups in one step would apply it twice.
"""
from __future__ import annotations

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


class ItemEmbedding(nn.Module):
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
        self.register_buffer("all_ids", torch.arange(num_items + 1, device=device), persistent=False)

    def forward_with_items(self, features: KeyedJaggedTensor, item_ids: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """One lookup of the inputs ``features[feature]`` (``N`` values) and of ``item_ids (*,)``
        -> ``((N, D), (*, D))``."""
        inputs = features[self.feature]
        out = self.tables(lookup_features(self.feature, inputs.values(), inputs.lengths(), item_ids))
        return out[self.feature], out[self.candidates].reshape(*item_ids.shape, self.dim)

    def forward(self, features: KeyedJaggedTensor) -> torch.Tensor:
        """Jagged lookup: ``features[feature]`` with ``N`` values -> ``(N, D)``."""
        ids = features[self.feature].values()
        return self.forward_with_items(features, ids.new_zeros(0))[0]

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """Dense lookup: ``(*,)`` int64 IDs -> ``(*, D)``."""
        empty = ids.new_zeros(0)
        looked_up = self.tables(lookup_features(self.feature, empty, empty, ids))
        return looked_up[self.candidates].reshape(*ids.shape, self.dim)

    def table(self) -> torch.Tensor:
        """The whole table ``(num_items + 1, D)`` for full-corpus scoring: the weight itself when this process
        holds it, else every row looked up from the processes that own them (see docs/ARCHITECTURE.md)."""
        weight = self.tables.weight(self.table_name)
        if weight is not None:
            return weight
        return self.lookup(self.all_ids)
