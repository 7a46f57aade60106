"""Embedding tables for jagged ID features: one TorchRec EmbeddingCollection built from table configs.

:class:`EmbeddingTables` is the one interface models use for sparse features, sharded or not: ``forward`` maps a
KeyedJaggedTensor to one ``(N_f, D)`` tensor per feature. genrec.dist replaces the inner ``collection`` by a
``ShardedEmbeddingCollection`` (DistributedModelParallel does that in place), so the code around it is unchanged;
IDs are checked (or hashed) here, before the collection, so a bad ID is caught the same way in both cases.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torchrec import EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor

from genrec.errors import UserError

#: What to do with an ID outside ``[0, num_embeddings)``: raise, or map it to ``id mod num_embeddings``.
OUT_OF_RANGE = ("error", "hash")


@dataclass(frozen=True)
class TableConfig:
    """One embedding table and the jagged features that look it up.

    Attributes:
        name: table name (the key of its weight and of its entry in a sharding plan).
        num_embeddings: rows; valid IDs are ``0..num_embeddings - 1``.
        dim: embedding width ``D``.
        features: KeyedJaggedTensor keys served by this table (several features may share one table).
        init_std: standard deviation of the uniform initialisation (bounds ``±sqrt(3) * init_std``).
        out_of_range: ``"error"`` (raise, naming the feature) or ``"hash"`` (``id mod num_embeddings``).
    """

    name: str
    num_embeddings: int
    dim: int
    features: tuple[str, ...]
    init_std: float = 0.02
    out_of_range: str = "error"

    def __post_init__(self) -> None:
        if self.num_embeddings < 1 or self.dim < 1:
            raise UserError(f"table {self.name!r}: num_embeddings and dim must be positive, got "
                            f"{self.num_embeddings} and {self.dim}")
        if hasattr(nn.ModuleDict, self.name):  # TorchRec keeps tables in a ModuleDict keyed by name
            raise UserError(f"table name {self.name!r} clashes with torch.nn.ModuleDict.{self.name}: rename the table")
        if not self.features:
            raise UserError(f"table {self.name!r} serves no feature")
        if self.out_of_range not in OUT_OF_RANGE:
            raise UserError(f"table {self.name!r}: out_of_range must be one of {OUT_OF_RANGE}, "
                            f"got {self.out_of_range!r}")


def _checked_values(table: TableConfig, feature: str, ids: torch.Tensor) -> torch.Tensor:
    if ids.numel() == 0:
        return ids
    low, high = int(ids.min()), int(ids.max())
    if 0 <= low and high < table.num_embeddings:
        return ids
    if table.out_of_range == "hash":
        return torch.remainder(ids, table.num_embeddings)
    raise UserError(f"feature {feature!r}: IDs must lie in [0, {table.num_embeddings}) (table {table.name!r}), "
                    f"got values in [{low}, {high}]")


def checked_ids(features: KeyedJaggedTensor, tables: tuple[TableConfig, ...]) -> KeyedJaggedTensor:
    """``features`` with exactly the keys the ``tables`` serve, in that order (a sharded collection distributes
    its input by key position), every ID checked against its table: an ID outside ``[0, num_embeddings)`` raises
    a :class:`UserError` naming the feature, or is hashed (``out_of_range="hash"``). Returns ``features`` itself
    when no ID was hashed."""
    names = [f for t in tables for f in t.features]
    if features.keys() != names:
        raise ValueError(f"expected features {names} (in this order), got {features.keys()}")
    table_of = {f: t for t in tables for f in t.features}
    given = [features[f].values() for f in names]
    values = [_checked_values(table_of[f], f, ids) for f, ids in zip(names, given)]
    if all(v is g for v, g in zip(values, given)):
        return features
    return KeyedJaggedTensor.from_lengths_sync(keys=names, values=torch.cat(values), lengths=features.lengths())


class EmbeddingTables(nn.Module):
    """Tables of one width ``D`` in one TorchRec ``EmbeddingCollection`` (a model with tables of several widths
    holds several of these).

    Args:
        tables: the tables; names and feature names must be unique.
        device: where the unsharded weights live.
    """

    def __init__(self, tables: list[TableConfig], device: torch.device | str | None = None):
        super().__init__()
        names = [t.name for t in tables]
        self.feature_names = [f for t in tables for f in t.features]
        if not tables or len(set(names)) != len(names) or len(set(self.feature_names)) != len(self.feature_names):
            raise UserError(f"tables need unique names and features, got tables {names} with features "
                            f"{self.feature_names}")
        dims = {t.dim for t in tables}
        if len(dims) > 1:
            raise UserError(f"tables of one EmbeddingTables share one width, got {sorted(dims)}: "
                            "build one EmbeddingTables per width")
        self.dim = dims.pop()
        self.configs = tuple(tables)
        self.collection = EmbeddingCollection(
            tables=[EmbeddingConfig(name=t.name, embedding_dim=t.dim, num_embeddings=t.num_embeddings,
                                    feature_names=list(t.features), weight_init_min=-math.sqrt(3.0) * t.init_std,
                                    weight_init_max=math.sqrt(3.0) * t.init_std) for t in tables],
            device=torch.device(device) if device is not None else None,
        )

    def forward(self, features: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        """``features`` with exactly the keys :attr:`feature_names`, in that order (a sharded collection
        distributes its input by key position) -> ``{feature: (N_f, D)}`` embeddings of its ``N_f`` IDs."""
        looked_up = self.collection(checked_ids(features, self.configs))
        return {name: jagged.values() for name, jagged in looked_up.items()}

    def weight(self, table: str) -> torch.Tensor | None:
        """The whole ``(num_embeddings, D)`` weight of ``table`` when this process holds it unsharded, else
        ``None`` (a sharded table is read through :meth:`forward`, which gathers the rows from their owners)."""
        if isinstance(self.collection, EmbeddingCollection):
            return self.collection.embeddings[table].weight
        return None
