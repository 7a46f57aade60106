"""Next-item losses over user states. Each loss gets the recommender to fetch the item vectors it needs, so
similarity (dot or cosine) and the item table are defined in one place."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from genrec.models.recommender import SequentialRecommender

NEGATIVE_SOURCES = ("uniform", "in_batch", "mixed")


class SampledSoftmaxLoss(nn.Module):
    """Softmax over the positive and sampled negatives, with accidental hits masked.

    Args:
        num_negatives: uniform negatives drawn per batch (shared by every position: one ``(R, D)`` lookup), or per
            position with ``per_position`` (an ``(M, R, D)`` lookup, as in Meta's HSTU code).
        negatives: ``"uniform"`` (from ``1..num_items``), ``"in_batch"`` (the batch's other positives, with logQ
            correction for their in-batch frequency), or ``"mixed"`` (both).
        temperature: logits are divided by it (e.g. 0.05 with cosine similarity).
        per_position: draw the uniform negatives separately for every position.
    """

    def __init__(self, num_negatives: int = 128, negatives: str = "uniform", temperature: float = 1.0,
                 per_position: bool = False):
        super().__init__()
        if negatives not in NEGATIVE_SOURCES:
            raise ValueError(f"negatives must be one of {NEGATIVE_SOURCES}, got {negatives!r}")
        self.num_negatives, self.negatives, self.temperature = num_negatives, negatives, temperature
        self.per_position = per_position

    def forward(self, queries: torch.Tensor, positive_ids: torch.Tensor, model: SequentialRecommender
                ) -> torch.Tensor:
        """``queries (M, D)``, ``positive_ids (M,)`` -> mean loss (scalar)."""
        pos_logits = (queries * model.item_vectors(positive_ids)).sum(-1, keepdim=True)  # (M, 1)
        neg_logits = []
        if self.negatives in ("uniform", "mixed"):
            if self.per_position:
                ids = torch.randint(1, model.num_items + 1, (len(queries), self.num_negatives), device=queries.device)
                logits = torch.einsum("md,mrd->mr", queries, model.item_vectors(ids))  # (M, R)
                hits = ids == positive_ids[:, None]
            else:
                ids = torch.randint(1, model.num_items + 1, (self.num_negatives,), device=queries.device)
                logits = queries @ model.item_vectors(ids).T  # (M, R)
                hits = ids[None, :] == positive_ids[:, None]
            neg_logits.append(logits.masked_fill(hits, float("-inf")))
        if self.negatives in ("in_batch", "mixed"):
            ids, counts = torch.unique(positive_ids, return_counts=True)
            logits = queries @ model.item_vectors(ids).T - torch.log(counts / len(positive_ids))[None, :]
            neg_logits.append(logits.masked_fill(ids[None, :] == positive_ids[:, None], float("-inf")))
        logits = torch.cat([pos_logits, *neg_logits], dim=1) / self.temperature
        return F.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long, device=logits.device))


class FullSoftmaxLoss(nn.Module):
    """Cross-entropy over the whole catalogue (padding excluded); exact, for small catalogues."""

    def __init__(self, temperature: float = 1.0):
        super().__init__()
        self.temperature = temperature

    def forward(self, queries: torch.Tensor, positive_ids: torch.Tensor, model: SequentialRecommender
                ) -> torch.Tensor:
        # the temperature scales the (M, D) queries, not the (M, num_items) logits: the same logits for one pass
        # over the small side (bit-identical at temperature 1)
        logits = (queries / self.temperature) @ model.all_item_vectors()[1:].T  # (M, num_items): padding left out
        return F.cross_entropy(logits, positive_ids - 1)
