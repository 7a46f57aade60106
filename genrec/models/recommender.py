"""A retrieval recommender: item embeddings (from outside) + a sequence encoder + a similarity."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from genrec.data.batch import JaggedBatch
from genrec.data.schema import PAD_ITEM
from genrec.embedding import ItemEmbedding
from genrec.embedding.features import FeatureEmbedding
from genrec.errors import UserError
from genrec.models.encoder import SequenceEncoder

SIMILARITIES = ("dot", "cosine")


class SequentialRecommender(nn.Module):
    """Scores items for a user as ``sim(user_state, item_embedding)``.

    Args:
        item_embedding: the item table (unsharded :class:`ItemEmbedding`, or a sharded one with the same interface).
        encoder: any :class:`SequenceEncoder` of the same width.
        similarity: ``"dot"`` or ``"cosine"`` (both sides L2-normalised); the loss and the ranking use the same.
        features: side features and actions (:class:`FeatureEmbedding`), or ``None``: item IDs only. Item side
            features are added to the item's vector on both sides; actions and user features to the inputs only.
        prior: a residual prior added to every item's score in training and ranking
            (:class:`~genrec.models.prior_head.TransitionPrior`, which needs the full softmax), or ``None``.
    """

    def __init__(self, item_embedding: ItemEmbedding, encoder: SequenceEncoder, similarity: str = "dot",
                 features: FeatureEmbedding | None = None, prior: nn.Module | None = None):
        super().__init__()
        if similarity not in SIMILARITIES:
            raise UserError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")
        if item_embedding.dim != encoder.dim:
            raise UserError(f"item embedding dim {item_embedding.dim} != encoder dim {encoder.dim}")
        self.item_embedding, self.encoder, self.similarity = item_embedding, encoder, similarity
        self.features, self.prior = features, prior

    @property
    def num_items(self) -> int:
        return self.item_embedding.num_embeddings - 1

    def sequence_stacks(self) -> list[nn.Module]:
        """The modules that carry the training step's compute (``compile=true`` compiles their forward)."""
        return [self.encoder]

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1) if self.similarity == "cosine" else x

    def _add_features(self, batch: JaggedBatch, features, inputs: torch.Tensor, lookup: torch.Tensor | None = None,
                      items: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``inputs (N, D)`` and the looked-up ``items (*, D)`` of ``lookup (*,)`` with the side features added
        (one call into the feature tables); unchanged without features."""
        if self.features is None:
            return inputs, items
        per_position, side = self.features(features)
        if per_position is not None:
            inputs = inputs + per_position
        if side is not None:
            inputs = inputs + side[batch.item_ids]
            items = None if items is None else items + side[lookup]
        return inputs, items

    def _item_side(self, ids: torch.Tensor | None = None) -> torch.Tensor | None:
        """What item side features add to the vectors of ``ids (*,)`` (all items when ``None``), or ``None``."""
        if self.features is None or not self.features.has_item_side:
            return None
        side = self.features(None)[1]
        return side if ids is None else side[ids]

    def encode(self, batch: JaggedBatch) -> torch.Tensor:
        """``(N, D)`` user state after every position of the batch (normalised for cosine similarity)."""
        features = batch.to_kjt()
        embeddings, _ = self._add_features(batch, features, self.item_embedding(features))
        return self._norm(self.encoder(embeddings, batch.offsets, batch.timestamps, batch.query_timestamps))

    def training_loss(self, batch: JaggedBatch, loss: nn.Module) -> torch.Tensor:
        """Mean next-item loss over the ``N`` positions of a training batch. The input items and the items
        ``loss`` scores (or, when it asks for ``None``, the whole table, normalised once for cosine similarity)
        are looked up together: one call into the embedding collection per step."""
        item_ids = loss.item_ids(batch.target_ids, self.num_items)  # None: the whole table
        lookup = self.item_embedding.all_ids if item_ids is None else item_ids
        features = batch.to_kjt()
        inputs, items = self.item_embedding.forward_with_items(features, lookup)
        inputs, items = self._add_features(batch, features, inputs, lookup, items)
        return self.loss_from_embeddings(batch, loss, item_ids, inputs, items)

    def loss_from_embeddings(self, batch: JaggedBatch, loss: nn.Module, item_ids: torch.Tensor | None,
                             inputs: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """The rest of :meth:`training_loss` once the ``(N, D)`` input embeddings and the ``(C, D)`` embeddings of
        ``item_ids`` (``None``: the whole table, ``C = num_items + 1``) were looked up (genrec.dist.pipeline looks
        them up ahead, from a batch that carries them as a KeyedJaggedTensor; side features are refused there)."""
        states = self._norm(self.encoder(inputs, batch.offsets, batch.timestamps, batch.query_timestamps))
        items = self._norm(items)
        if self.prior is None:
            return loss(states, batch.target_ids, item_ids, items)

        def bias(logits: torch.Tensor, scale: float) -> None:  # the full softmax's logits score items 1..num_items
            self.prior.add_to(logits, batch, True, first_item=1, scale=scale)

        if self.prior.fit == "stacked":  # the model learns alone, the prior's weights on its detached scores
            return (loss(states, batch.target_ids, item_ids, items)
                    + loss(states.detach(), batch.target_ids, item_ids, items.detach(), bias=bias))
        return loss(states, batch.target_ids, item_ids, items, bias=bias)

    def user_embeddings(self, batch: JaggedBatch) -> torch.Tensor:
        """``(B, D)`` state after each sequence's most recent item: the query for the next item."""
        return self.encode(batch)[batch.last_positions()]

    def item_vectors(self, ids: torch.Tensor) -> torch.Tensor:
        """``(*,)`` item IDs -> ``(*, D)`` vectors on the scoring side."""
        vectors, side = self.item_embedding.lookup(ids), self._item_side(ids)
        return self._norm(vectors if side is None else vectors + side)

    def all_item_vectors(self) -> torch.Tensor:
        """``(num_items + 1, D)`` every item's vector (row 0 is padding)."""
        table, side = self.item_embedding.table(), self._item_side()
        return self._norm(table if side is None else table + side)

    def score_all(self, batch: JaggedBatch, item_vectors: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, num_items + 1)`` score of every item for each sequence; the padding column is ``-inf``.
        ``item_vectors``: :meth:`all_item_vectors`, when the caller computed it once for many batches."""
        item_vectors = self.all_item_vectors() if item_vectors is None else item_vectors
        scores = self.user_embeddings(batch) @ item_vectors.T
        if self.prior is not None:
            self.prior.add_to(scores, batch, training=False)
        scores[:, PAD_ITEM] = float("-inf")
        return scores
