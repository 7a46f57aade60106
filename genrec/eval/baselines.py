"""Non-neural baselines scored by the same evaluation code as the models, by name (:data:`BASELINES`).

The counting baselines (:mod:`genrec.models.counts`) count only the training part of each sequence, so none sees a
validation or test target. :class:`SemanticKNN` counts nothing: it ranks items by the similarity of their content to
the user's last items, so it reaches items training never saw (``data.split.cold_items``) like any other.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from genrec.data.batch import JaggedBatch
from genrec.data.schema import SequenceData
from genrec.models.counts import LAST3_SKIP, ItemTransitions, MostPopular


def content_embeddings(data: SequenceData) -> np.ndarray:
    """``(num_items, D)`` the items' text embeddings with the text encoder's defaults (the embeddings a text SID
    table is made from: ``genrec-tokenize encoder.on_empty=raw_id``; read from its cache when one made them)."""
    from genrec.tokenize.encoders import TextEncoder

    cache = os.path.join(os.environ.get("GENREC_CACHE_DIR", ".cache/genrec"), "embeddings")
    return TextEncoder(on_empty="raw_id", cache_dir=cache).encode(data).vectors


class SemanticKNN:
    """Content nearest neighbours of the user's last items (TIGER §4.3's semantic-KNN baseline):
    ``score(i) = sum_{j < num_last} decay**j * cos(e(h_{-1-j}), e(i))`` over item content embeddings ``e``.

    Args:
        data: the dataset (its item content; no interaction is counted).
        embeddings: ``(num_items, D)`` content embeddings in dense-ID order (``None``: :func:`content_embeddings`).
        num_last: how many of the user's most recent items vote.
        decay: weight ratio between consecutive voters.
    """

    def __init__(self, data: SequenceData, embeddings: np.ndarray | None = None, num_last: int = 3,
                 decay: float = 0.5):
        vectors = torch.from_numpy(np.asarray(content_embeddings(data) if embeddings is None else embeddings,
                                              dtype=np.float32))
        if vectors.shape[0] != data.num_items:
            raise ValueError(f"embeddings: {vectors.shape[0]} rows for {data.num_items} items")
        vectors = torch.nn.functional.normalize(vectors, dim=1)
        self.vectors = torch.cat([vectors.new_zeros(1, vectors.shape[1]), vectors])  # row 0: padding
        self.num_last, self.decay = num_last, decay

    def __call__(self, batch: JaggedBatch) -> torch.Tensor:
        """-> ``(B, num_items + 1)``"""
        vectors = self.vectors.to(batch.item_ids.device)
        lengths = batch.offsets[1:] - batch.offsets[:-1]
        scores = torch.zeros(batch.batch_size, len(vectors), device=vectors.device)
        for j in range(self.num_last):
            rows = torch.nonzero(lengths > j)[:, 0]
            voters = batch.item_ids[batch.offsets[1:][rows] - 1 - j]
            scores[rows] += self.decay ** j * (vectors[voters] @ vectors.T)
        scores[:, 0] = float("-inf")
        return scores


#: The baselines every results table carries, by name (``semantic_knn`` needs item text: name it where there is).
BASELINES = {
    "most_popular": MostPopular,
    "transitions": lambda data: ItemTransitions(data, num_last=1),
    "transitions_last3_skip": lambda data: ItemTransitions(data, **LAST3_SKIP),
    "semantic_knn": lambda data: SemanticKNN(data),
}
