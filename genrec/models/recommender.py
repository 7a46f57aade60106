"""A retrieval recommender: item embeddings (from outside) + a sequence encoder + a similarity."""
from __future__ import annotations

import torch
from torch import nn

from genrec.data.batch import JaggedBatch
from genrec.data.schema import PAD_ITEM
from genrec.embedding import ItemEmbedding, ItemEmbeddingInterface
from genrec.embedding.features import FeatureEmbedding
from genrec.errors import UserError
from genrec.models.encoder import SequenceEncoder
from genrec.models.losses import Draw
from genrec.models.similarity import Similarity, as_similarity


class SequentialRecommender(nn.Module):
    """Scores items for a user as ``sim(user_state, item_embedding)``.

    Args:
        item_embedding: the item table (an :class:`~genrec.embedding.ItemEmbeddingInterface`: the static table,
            sharded or not, or the dynamic one).
        encoder: any :class:`SequenceEncoder` of the same width.
        similarity: a :class:`~genrec.models.similarity.Similarity` or its name (``"dot"``, ``"cosine"``); the loss,
            the ranking and the export use the same.
        features: side features and actions (:class:`FeatureEmbedding`), or ``None``: item IDs only. Item side
            features are added to the item's vector on both sides; actions and user features to the inputs only.
        prior: a residual prior added to every item's score in training and ranking
            (:class:`~genrec.models.prior_head.TransitionPrior`, which needs the full softmax), or ``None``.
    """

    def __init__(self, item_embedding: ItemEmbeddingInterface, encoder: SequenceEncoder,
                 similarity: str | Similarity = "dot", features: FeatureEmbedding | None = None,
                 prior: nn.Module | None = None):
        super().__init__()
        if item_embedding.dim != encoder.dim:
            raise UserError(f"item embedding dim {item_embedding.dim} != encoder dim {encoder.dim}")
        self.item_embedding, self.encoder, self.similarity = item_embedding, encoder, as_similarity(similarity)
        self.features, self.prior = features, prior

    @staticmethod
    def item_table_key(prefix: str = "model.") -> str:
        """The state-dict key of a static item table's weight in a checkpoint whose recommender sits at ``prefix``
        (a retrieval task holds it as ``model``): what reads a trained item table without building the task."""
        return f"{prefix}item_embedding.{ItemEmbedding.weight_key()}"

    @property
    def num_items(self) -> int:
        return self.item_embedding.num_embeddings - 1

    def sequence_stacks(self) -> list[nn.Module]:
        """The modules that carry the training step's compute (``compile=true`` compiles their forward)."""
        return [self.encoder]

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
        return self.similarity.prepare(self.encoder(embeddings, batch.offsets, batch.timestamps,
                                                    batch.query_timestamps))

    def training_loss(self, batch: JaggedBatch, loss: nn.Module, targets: torch.Tensor | None = None,
                      draw: Draw | None = None) -> torch.Tensor:
        """Mean next-item loss over the target positions of a training batch: every position, or those of the
        ``(N,)`` bool mask ``targets``. ``loss.item_ids`` names the items it scores (negatives from ``1..num_items``,
        or from ``draw``); see :meth:`candidates_loss`."""
        positives = batch.target_ids if targets is None else batch.target_ids[targets]
        return self.candidates_loss(batch, loss, loss.item_ids(positives, self.num_items, draw=draw), targets)

    def candidates_loss(self, batch: JaggedBatch, loss: nn.Module, item_ids: torch.Tensor | None,
                        targets: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`training_loss` with the loss's candidates already drawn: ``item_ids (C,)``, or ``None`` for the
        whole table (normalised once for cosine similarity). The input items and the candidates are looked up
        together: one call into the embedding collection per step."""
        lookup = self.item_embedding.all_ids if item_ids is None else item_ids
        features = batch.to_kjt()
        inputs, items = self.item_embedding.forward_with_items(features, lookup)
        inputs, items = self._add_features(batch, features, inputs, lookup, items)
        return self.loss_from_embeddings(batch, loss, item_ids, inputs, items, targets)

    def loss_from_embeddings(self, batch: JaggedBatch, loss: nn.Module, item_ids: torch.Tensor | None,
                             inputs: torch.Tensor, items: torch.Tensor, targets: torch.Tensor | None = None
                             ) -> torch.Tensor:
        """The rest of :meth:`candidates_loss` once the ``(N, D)`` input embeddings and the ``(C, D)`` embeddings of
        ``item_ids`` (``None``: the whole table, ``C = num_items + 1``) were looked up (genrec.dist.pipeline looks
        them up ahead, from a batch that carries them as a KeyedJaggedTensor; side features are refused there)."""
        states = self.similarity.prepare(self.encoder(inputs, batch.offsets, batch.timestamps,
                                                      batch.query_timestamps))
        positives, items = batch.target_ids, self.similarity.prepare(items)
        if targets is not None:
            if self.prior is not None:
                raise UserError("model.prior scores every position of a batch; it cannot train on a subset of "
                                "the positions (genrec-stream refuses it)")
            states, positives = states[targets], positives[targets]
        if self.prior is None:
            return loss(states, positives, item_ids, items)

        def bias(logits: torch.Tensor, scale: float) -> None:  # the full softmax's logits score items 1..num_items
            self.prior.add_to(logits, batch, True, first_item=1, scale=scale)

        if self.prior.fit == "stacked":  # the model learns alone, the prior's weights on its detached scores
            return (loss(states, positives, item_ids, items)
                    + loss(states.detach(), positives, item_ids, items.detach(), bias=bias))
        return loss(states, positives, item_ids, items, bias=bias)

    def user_embeddings(self, batch: JaggedBatch) -> torch.Tensor:
        """``(B, D)`` state after each sequence's most recent item: the query for the next item."""
        return self.encode(batch)[batch.last_positions()]

    def item_vectors(self, ids: torch.Tensor) -> torch.Tensor:
        """``(*,)`` item IDs -> ``(*, D)`` vectors on the scoring side."""
        vectors, side = self.item_embedding.lookup(ids), self._item_side(ids)
        return self.similarity.prepare(vectors if side is None else vectors + side)

    def all_item_vectors(self) -> torch.Tensor:
        """``(num_items + 1, D)`` every item's vector (row 0 is padding)."""
        table, side = self.item_embedding.table(), self._item_side()
        return self.similarity.prepare(table if side is None else table + side)

    def score_all(self, batch: JaggedBatch, item_vectors: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, num_items + 1)`` score of every item for each sequence; the padding column is ``-inf``.
        ``item_vectors``: :meth:`all_item_vectors`, when the caller computed it once for many batches."""
        item_vectors = self.all_item_vectors() if item_vectors is None else item_vectors
        scores = self.user_embeddings(batch) @ item_vectors.T
        if self.prior is not None:
            self.prior.add_to(scores, batch, training=False)
        scores[:, PAD_ITEM] = float("-inf")
        return scores
