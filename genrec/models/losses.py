"""Next-item losses over user states.

A loss works in two steps so that a training step looks items up once (see ItemEmbedding.forward_with_items):
``item_ids(positive_ids, num_items)`` names the items whose vectors it needs, the recommender looks them up with
the input items, and ``forward(queries, positive_ids, item_ids, item_vectors)`` computes the loss. The vectors come
from the recommender, so the similarity (dot or cosine) used to train is the one used to rank."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from genrec.errors import UserError

NEGATIVE_SOURCES = ("uniform", "in_batch", "mixed")


class SampledSoftmaxLoss(nn.Module):
    """Softmax over the positive and sampled negatives, with accidental hits masked.

    Args:
        num_negatives: uniform negatives drawn per batch (shared by every position: one ``(R, D)`` lookup), or per
            position with ``per_position`` (an ``(M * R, D)`` lookup, as in Meta's HSTU code).
        negatives: ``"uniform"`` (from ``1..num_items``), ``"in_batch"`` (the batch's other positives, with logQ
            correction for their in-batch frequency), or ``"mixed"`` (both).
        temperature: logits are divided by it (e.g. 0.05 with cosine similarity).
        per_position: draw the uniform negatives separately for every position.
    """

    def __init__(self, num_negatives: int = 128, negatives: str = "uniform", temperature: float = 1.0,
                 per_position: bool = False):
        super().__init__()
        if negatives not in NEGATIVE_SOURCES:
            raise UserError(f"negatives must be one of {NEGATIVE_SOURCES}, got {negatives!r}")
        self.num_negatives, self.negatives, self.temperature = num_negatives, negatives, temperature
        self.per_position = per_position

    def _num_uniform(self, m: int) -> int:
        """How many uniform negatives :meth:`item_ids` draws for ``m`` positives: ``R`` or ``M * R``."""
        return m * self.num_negatives if self.per_position else self.num_negatives

    def item_ids(self, positive_ids: torch.Tensor, num_items: int) -> torch.Tensor:
        """``(M,)`` positives -> ``(M + R' + U,)``: the positives, then ``R' = R`` (or ``M * R`` per position,
        position-major) uniform negatives from ``1..num_items`` and/or the ``U`` distinct positives (in-batch
        negatives), as configured."""
        parts = [positive_ids]
        if self.negatives in ("uniform", "mixed"):
            count = self._num_uniform(len(positive_ids))
            parts.append(torch.randint(1, num_items + 1, (count,), device=positive_ids.device))
        if self.negatives in ("in_batch", "mixed"):
            parts.append(torch.unique(positive_ids))
        return torch.cat(parts)

    def forward(self, queries: torch.Tensor, positive_ids: torch.Tensor, item_ids: torch.Tensor,
                item_vectors: torch.Tensor) -> torch.Tensor:
        """``queries (M, D)``, ``positive_ids (M,)``, ``item_ids (C,)`` from :meth:`item_ids` and their
        ``item_vectors (C, D)`` -> mean loss (scalar)."""
        m = len(positive_ids)
        pos_logits = (queries * item_vectors[:m]).sum(-1, keepdim=True)  # (M, 1)
        neg_logits, start = [], m
        if self.negatives in ("uniform", "mixed"):
            count = self._num_uniform(m)
            ids, vectors = item_ids[start:start + count], item_vectors[start:start + count]
            start += count
            if self.per_position:
                ids = ids.view(m, self.num_negatives)  # (M, R)
                logits = torch.einsum("md,mrd->mr", queries, vectors.view(m, self.num_negatives, -1))
                hits = ids == positive_ids[:, None]
            else:
                logits = queries @ vectors.T  # (M, R)
                hits = ids[None, :] == positive_ids[:, None]
            neg_logits.append(logits.masked_fill(hits, float("-inf")))
        if self.negatives in ("in_batch", "mixed"):
            ids, vectors = item_ids[start:], item_vectors[start:]
            counts = torch.unique(positive_ids, return_counts=True)[1]  # same order as ids
            logits = queries @ vectors.T - torch.log(counts / m)[None, :]
            neg_logits.append(logits.masked_fill(ids[None, :] == positive_ids[:, None], float("-inf")))
        logits = torch.cat([pos_logits, *neg_logits], dim=1) / self.temperature
        return F.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long, device=logits.device))


class FullSoftmaxLoss(nn.Module):
    """Cross-entropy over the whole catalogue (padding excluded); exact, for small catalogues."""

    def __init__(self, temperature: float = 1.0):
        super().__init__()
        self.temperature = temperature

    def item_ids(self, positive_ids: torch.Tensor, num_items: int) -> torch.Tensor:
        """Every item ``1..num_items`` (padding left out): ``(num_items,)``."""
        return torch.arange(1, num_items + 1, device=positive_ids.device)

    def forward(self, queries: torch.Tensor, positive_ids: torch.Tensor, item_ids: torch.Tensor,
                item_vectors: torch.Tensor) -> torch.Tensor:
        """``queries (M, D)``, ``positive_ids (M,)``, ``item_vectors (num_items, D)`` of items ``1..num_items``
        -> mean loss (scalar)."""
        # the temperature scales the (M, D) queries, not the (M, num_items) logits: the same logits for one pass
        # over the small side (bit-identical at temperature 1)
        logits = (queries / self.temperature) @ item_vectors.T  # (M, num_items)
        return F.cross_entropy(logits, positive_ids - 1)
