"""The item-embedding module every model gets from outside: a TorchRec EmbeddingCollection over item IDs.

Models only call :meth:`ItemEmbedding.forward` (jagged lookup), :meth:`ItemEmbedding.lookup` and
:meth:`ItemEmbedding.table`, so the same model code runs on the unsharded collection here and on a sharded one.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torchrec import EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor

from genrec.data.batch import ITEM_FEATURE


class ItemEmbedding(nn.Module):
    """One table of ``num_items + 1`` rows (row 0 is padding and is never looked up by jagged inputs).

    Args:
        num_items: number of real items; valid IDs are ``0..num_items``.
        dim: embedding dimension ``D``.
        init_std: standard deviation of the uniform initialisation (bounds ``±sqrt(3) * init_std``).
        feature: the KeyedJaggedTensor key this table serves.
    """

    def __init__(self, num_items: int, dim: int, init_std: float = 0.02, feature: str = ITEM_FEATURE,
                 device: torch.device | str | None = None):
        super().__init__()
        bound = math.sqrt(3.0) * init_std
        self.num_embeddings, self.dim, self.feature = num_items + 1, dim, feature
        self.collection = EmbeddingCollection(
            tables=[EmbeddingConfig(name=f"{feature}_table", embedding_dim=dim, num_embeddings=num_items + 1,
                                    feature_names=[feature], weight_init_min=-bound, weight_init_max=bound)],
            device=torch.device(device) if device is not None else None,
        )

    def _check_range(self, ids: torch.Tensor) -> None:
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_embeddings):
            raise ValueError(f"feature {self.feature!r}: IDs must lie in [0, {self.num_embeddings}), got values in "
                             f"[{int(ids.min())}, {int(ids.max())}]")

    def forward(self, features: KeyedJaggedTensor) -> torch.Tensor:
        """Jagged lookup: ``features[self.feature]`` with ``N`` values -> ``(N, D)``."""
        self._check_range(features[self.feature].values())
        return self.collection(features)[self.feature].values()

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """Dense lookup: ``(*,)`` int64 IDs -> ``(*, D)``."""
        flat = ids.reshape(-1)
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=[self.feature], values=flat,
                                                  lengths=torch.tensor([flat.numel()], device=flat.device))
        return self.forward(kjt).reshape(*ids.shape, self.dim)

    def table(self) -> torch.Tensor:
        """The whole table ``(num_items + 1, D)`` for full-corpus scoring."""
        return self.collection.embeddings[f"{self.feature}_table"].weight
