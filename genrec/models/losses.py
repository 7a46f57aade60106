"""Next-item losses over user states.

A loss works in two steps so that a training step looks items up once (see ItemEmbedding.forward_with_items):
``item_ids(positive_ids, num_items)`` names the items whose vectors it needs -- or ``None`` for the whole table,
rows ``0..num_items`` -- the recommender looks them up with the input items, and
``forward(queries, positive_ids, item_ids, item_vectors)`` computes the loss. The vectors come from the
recommender, so the similarity (dot or cosine) used to train is the one used to rank.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from genrec.errors import UserError
from genrec.ops.sampled_softmax import sampled_logits

NEGATIVE_SOURCES = ("uniform", "in_batch", "mixed")
#: ``count -> (count,)`` item IDs: where a caller's uniform negatives come from (e.g. the stream's resident rows)
Draw = Callable[[int], torch.Tensor]


class SampledSoftmaxLoss(nn.Module):
    """Softmax over the positive and sampled negatives, with accidental hits masked.

    Args:
        num_negatives: uniform negatives drawn per batch (shared by every position), or per position with
            ``per_position`` (as in Meta's HSTU code).
        negatives: ``"uniform"`` (from ``1..num_items``), ``"in_batch"`` (the batch's other positives, with logQ
            correction for their in-batch frequency), or ``"mixed"`` (both).
        temperature: logits are divided by it (e.g. 0.05 with cosine similarity).
        per_position: draw the uniform negatives separately for every position.

    Where the vectors come from: when the whole table (``num_items + 1`` rows) is smaller than the rows the loss
    would otherwise look up (``M`` positives + ``R`` or ``M * R`` uniform negatives + the in-batch ones),
    :meth:`item_ids` asks for the whole table and :meth:`forward` draws the uniform negatives and gathers every
    row it scores from it: a step then normalises ``num_items + 1`` rows (cosine similarity) instead of
    ``M * (R + 1)``. Otherwise it names the rows, the uniform negatives drawn in :meth:`item_ids`. Either way the
    per-position scores go through :func:`~genrec.ops.sampled_softmax.sampled_logits`, which never materialises
    the ``(M, R, D)`` gathered rows or their gradient.
    """

    def __init__(self, num_negatives: int = 128, negatives: str = "uniform", temperature: float = 1.0,
                 per_position: bool = False):
        super().__init__()
        if negatives not in NEGATIVE_SOURCES:
            raise UserError(f"negatives must be one of {NEGATIVE_SOURCES}, got {negatives!r}")
        self.num_negatives, self.negatives, self.temperature = num_negatives, negatives, temperature
        self.per_position = per_position

    @property
    def _uniform(self) -> bool:
        return self.negatives in ("uniform", "mixed")

    @property
    def _in_batch(self) -> bool:
        return self.negatives in ("in_batch", "mixed")

    def _num_uniform(self, m: int) -> int:
        """How many uniform negatives a step draws for ``m`` positives: ``R`` or ``M * R``."""
        return m * self.num_negatives if self.per_position else self.num_negatives

    def _draw(self, m: int, num_items: int, device: torch.device,
              generator: torch.Generator | None = None) -> torch.Tensor:
        """``(M * R,)`` (per position, position-major) or ``(R,)`` uniform negatives from ``1..num_items``, drawn
        from ``generator`` (default: the global random state)."""
        return torch.randint(1, num_items + 1, (self._num_uniform(m),), device=device, generator=generator)

    def item_ids(self, positive_ids: torch.Tensor, num_items: int, generator: torch.Generator | None = None,
                 draw: Draw | None = None) -> torch.Tensor | None:
        """``(M,)`` positives -> ``None`` (the whole table, when it has fewer rows than the lookup below: see the
        class doc) or ``(M + R' + U,)``: the positives, then ``R' = R`` (or ``M * R`` per position,
        position-major) uniform negatives (from ``generator``; default: the global random state) and/or the
        ``U <= M`` distinct positives (in-batch negatives). ``draw``: where the uniform negatives come from
        instead of ``1..num_items`` (then the IDs are always named, never the whole table)."""
        m = len(positive_ids)
        if draw is None and num_items + 1 < m + self._uniform * self._num_uniform(m) + self._in_batch * m:
            return None
        parts = [positive_ids]
        if self._uniform:
            parts.append(self._draw(m, num_items, positive_ids.device, generator) if draw is None
                         else draw(self._num_uniform(m)).to(positive_ids.device))
        if self._in_batch:
            parts.append(torch.unique(positive_ids))
        return torch.cat(parts)

    def forward(self, queries: torch.Tensor, positive_ids: torch.Tensor, item_ids: torch.Tensor | None,
                item_vectors: torch.Tensor) -> torch.Tensor:
        """``queries (M, D)``, ``positive_ids (M,)``, ``item_ids`` from :meth:`item_ids` and their ``item_vectors``
        (``(num_items + 1, D)`` for ``None``) -> mean loss (scalar)."""
        m, device = len(positive_ids), queries.device
        if item_ids is None:  # item_vectors[i] is item i's vector
            uniform = self._draw(m, len(item_vectors) - 1, device) if self._uniform else None
            in_batch = torch.unique(positive_ids) if self._in_batch else None
            positive_rows, uniform_rows, batch_rows = positive_ids, uniform, in_batch
        else:  # item_vectors[j] is item_ids[j]'s vector, in the layout item_ids() made
            count = self._num_uniform(m) if self._uniform else 0
            rows = torch.arange(len(item_ids), device=device)
            positive_rows, uniform_rows, batch_rows = rows[:m], rows[m:m + count], rows[m + count:]
            uniform = item_ids[m:m + count] if self._uniform else None
            in_batch = item_ids[m + count:] if self._in_batch else None
        if self.per_position and uniform is not None:  # one fused pass: the positive and the M x R negatives
            uniform, uniform_rows = uniform.view(m, -1), uniform_rows.view(m, -1)
            logits = [sampled_logits(queries, item_vectors, torch.cat([positive_rows[:, None], uniform_rows], 1))]
            hits = [torch.cat([torch.zeros_like(uniform[:, :1], dtype=torch.bool), uniform == positive_ids[:, None]],
                              1)]
        else:
            logits = [sampled_logits(queries, item_vectors, positive_rows[:, None])]  # (M, 1)
            hits = [torch.zeros(m, 1, dtype=torch.bool, device=device)]
            if uniform is not None:
                logits.append(queries @ item_vectors.index_select(0, uniform_rows).T)  # (M, R)
                hits.append(uniform[None, :] == positive_ids[:, None])
        if in_batch is not None:
            counts = torch.unique(positive_ids, return_counts=True)[1]  # same order as in_batch
            logits.append(queries @ item_vectors.index_select(0, batch_rows).T - torch.log(counts / m)[None, :])
            hits.append(in_batch[None, :] == positive_ids[:, None])
        logits = torch.cat(logits, dim=1).masked_fill(torch.cat(hits, dim=1), float("-inf")) / self.temperature
        return F.cross_entropy(logits, torch.zeros(m, dtype=torch.long, device=device))


class FullSoftmaxLoss(nn.Module):
    """Cross-entropy over the whole catalogue (padding excluded); exact, for small catalogues."""

    def __init__(self, temperature: float = 1.0):
        super().__init__()
        self.temperature = temperature

    def item_ids(self, positive_ids: torch.Tensor, num_items: int, generator: torch.Generator | None = None,
                 draw: Draw | None = None) -> torch.Tensor:
        """Every item ``1..num_items`` (padding left out): ``(num_items,)`` (nothing is drawn: ``generator`` and
        ``draw`` are accepted for the interface's sake)."""
        return torch.arange(1, num_items + 1, device=positive_ids.device)

    def forward(self, queries: torch.Tensor, positive_ids: torch.Tensor, item_ids: torch.Tensor,
                item_vectors: torch.Tensor, bias: Callable[[torch.Tensor, float], object] | None = None
                ) -> torch.Tensor:
        """``queries (M, D)``, ``positive_ids (M,)``, ``item_vectors (num_items, D)`` of items ``1..num_items``
        -> mean loss (scalar). ``bias(logits, scale)``: adds ``scale`` times a term in similarity units to the
        ``(M, num_items)`` logits in place, called with ``scale = 1 / temperature`` (a residual prior,
        genrec.models.prior_head)."""
        # the temperature scales the (M, D) queries, not the (M, num_items) logits: the same logits for one pass
        # over the small side (bit-identical at temperature 1)
        logits = (queries / self.temperature) @ item_vectors.T  # (M, num_items)
        if bias is not None:
            bias(logits, 1.0 / self.temperature)
        return F.cross_entropy(logits, positive_ids - 1)
