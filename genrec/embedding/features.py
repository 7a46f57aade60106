"""Embeddings of side features and actions (see :mod:`genrec.data.features`), in one :class:`EmbeddingTables`.

Up to three tables of the model's width ``D``, each present only when its feature is on:

* ``action_table`` serves ``"action"``: one row per action; a position adds the embedding of its input event's
  action.
* ``user_table`` serves ``"user"``: ``F`` IDs per sequence, summed; the sum is added to every position of the
  sequence (not a prefix token: positions, timestamps and lengths stay as they are, and the first position already
  knows the user).
* ``item_side_table`` serves ``"item_side"``: every item's side-feature IDs, looked up together once per call as one
  bag; per item, each column adds the mean of its IDs' embeddings. The result ``(num_items + 1, D)`` is added to
  the item's ID embedding wherever the item appears: as an input and on the scoring side, so an item's vector stays
  a function of the item alone and full-corpus ranking is unchanged.

One call of :meth:`FeatureEmbedding.forward` per step looks up all three.
"""
from __future__ import annotations

import torch
from torch import nn
from torchrec import KeyedJaggedTensor

from genrec.data.batch import ACTION_FEATURE, ITEM_FEATURE, USER_FEATURE
from genrec.data.features import EncodedFeatures
from genrec.embedding.tables import EmbeddingTables, TableConfig

ITEM_SIDE_FEATURE = "item_side"


class FeatureEmbedding(nn.Module):
    """
    Args:
        features: vocabulary sizes and item side features from :func:`genrec.data.features.encode_features`.
        dim: embedding width ``D`` (the item embedding's).
        init_std: standard deviation of the uniform initialisation, as for the item table.
    """

    def __init__(self, features: EncodedFeatures, dim: int, init_std: float = 0.02,
                 device: torch.device | str | None = None):
        super().__init__()
        tables = []
        if features.num_actions:
            tables.append(TableConfig("action_table", features.num_actions + 1, dim, (ACTION_FEATURE,), init_std))
        if features.user_vocab_size:
            tables.append(TableConfig("user_table", features.user_vocab_size, dim, (USER_FEATURE,), init_std))
        items = features.items
        if items is not None:
            tables.append(TableConfig("item_side_table", items.vocab_size, dim, (ITEM_SIDE_FEATURE,), init_std))
        self.dim = dim
        self.tables = EmbeddingTables(tables, device=device)
        self.has_item_side = items is not None
        if items is not None:
            offsets = torch.as_tensor(items.offsets)
            self.num_items = len(offsets) - 2
            self.register_buffer("side_values", torch.as_tensor(items.values), persistent=False)
            self.register_buffer("side_weights", torch.as_tensor(items.weights)[:, None], persistent=False)
            self.register_buffer("side_items", torch.repeat_interleave(torch.arange(len(offsets) - 1),
                                                                       offsets.diff()), persistent=False)

    def _features(self, inputs: KeyedJaggedTensor | None) -> KeyedJaggedTensor:
        """The tables' keys: ``action`` and ``user`` from ``inputs`` (empty when ``None``), every item's side IDs
        as the first bag of ``item_side``."""
        stride = inputs.stride() if inputs is not None else 1
        values, lengths = [], []
        for key in self.tables.feature_names:
            if key == ITEM_SIDE_FEATURE:
                bag = torch.zeros(stride, dtype=torch.int64, device=self.side_values.device)
                bag[0] = len(self.side_values)
                values.append(self.side_values)
                lengths.append(bag)
            elif inputs is None:  # only the item side is asked for (and it is on)
                values.append(self.side_values.new_zeros(0))
                lengths.append(self.side_values.new_zeros(1))
            else:
                if key not in inputs.keys():
                    raise ValueError(f"the model embeds the feature {key!r} but the batch does not carry it")
                values.append(inputs[key].values())
                lengths.append(inputs[key].lengths())
        return KeyedJaggedTensor.from_lengths_sync(keys=self.tables.feature_names, values=torch.cat(values),
                                                   lengths=torch.cat(lengths))

    def _item_side(self, side: torch.Tensor) -> torch.Tensor:
        """``(V, D)`` embeddings of every item's side IDs -> ``(num_items + 1, D)`` per-column means, summed."""
        out = side.new_zeros(self.num_items + 1, self.dim)
        return out.index_add(0, self.side_items, side * self.side_weights)

    def forward(self, inputs: KeyedJaggedTensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``inputs`` (a batch's :meth:`~genrec.data.batch.JaggedBatch.to_kjt`, ``N`` items in ``B`` sequences,
        or ``None`` for the item side only) -> (``(N, D)`` what actions and user features add to every input
        position, or ``None``; ``(num_items + 1, D)`` what item side features add to every item, or ``None``)."""
        out = self.tables(self._features(inputs))
        per_position = None
        if inputs is not None:
            if ACTION_FEATURE in out:
                per_position = out[ACTION_FEATURE]
            if USER_FEATURE in out:
                users = inputs[USER_FEATURE]
                per_user = out[USER_FEATURE].view(len(users.lengths()), -1, self.dim).sum(1)  # (B, D)
                per_user = torch.repeat_interleave(per_user, inputs[ITEM_FEATURE].lengths(), dim=0)
                per_position = per_user if per_position is None else per_position + per_user
        side = self._item_side(out[ITEM_SIDE_FEATURE]) if ITEM_SIDE_FEATURE in out else None
        return per_position, side
