"""A residual head over the item-transition heuristic (the FPMC / Fossil lineage: a sequence model plus an
item-to-item transition term, trained together).

With ``model.prior.enabled=true`` a retrieval model scores item ``i`` after history ``h`` as

    ``score(h, i) = sim(user_state(h), item(i)) + w * log(1 + s(h, i))``

where ``s`` is the score of the ``transitions_last3_skip`` baseline (:class:`~genrec.models.counts.ItemTransitions`
with :data:`~genrec.models.counts.LAST3_SKIP`: transition counts of the training parts only, voted by the user's
last three items, popularity as tie-break) and ``w`` one learned scalar. ``log(1 + s)`` keeps the heuristic's
order, so a model whose own scores are still near zero (at initialisation) ranks as the heuristic does; training
learns what the counts miss. The loss (the full softmax) sees the same sum, divided by its temperature.

The counts include every training transition, the ones the training positions predict among them: left in, the
prior of a training position would always vote for its target (the pair being predicted is counted), which it
never can for a validation or test target (those pairs are not counted), and ``w`` would learn to trust it too much.
So a training position's prior leaves out the position's own contribution to its target's score: ``1`` from the
last item's direct transition and ``decay * skip_weight`` from the skip-one transition of the item before it (the
leave-one-out counts, the view the evaluation gets).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from genrec.data.batch import JaggedBatch
from genrec.data.schema import SequenceData
from genrec.models.counts import LAST3_SKIP, ItemTransitions
from genrec.ops.jagged import jagged_index


class TransitionPrior(nn.Module):
    """``w * log(1 + s(h, i))`` for every item ``i``, from transition counts held as CSR buffers (rebuilt from the
    data whenever the model is built, not saved in checkpoints; ``w`` is).

    Args:
        transitions: the heuristic whose counts, vote weights and popularity fill are used.
        weight: the initial ``w``.
    """

    def __init__(self, transitions: ItemTransitions, weight: float = 1.0):
        super().__init__()
        counts = transitions.counts.tocsr()
        counts.sort_indices()
        self.num_last, self.decay, self.skip_weight = transitions.num_last, transitions.decay, transitions.skip_weight
        self.register_buffer("crow", torch.from_numpy(counts.indptr.astype(np.int64)), persistent=False)
        self.register_buffer("col", torch.from_numpy(counts.indices.astype(np.int64)), persistent=False)
        self.register_buffer("values", torch.from_numpy(counts.data.astype(np.float32)), persistent=False)
        self.register_buffer("fill", torch.from_numpy(transitions.fill.astype(np.float32)), persistent=False)
        self.weight = nn.Parameter(torch.tensor(float(weight)))

    @classmethod
    def from_data(cls, data: SequenceData, weight: float = 1.0) -> "TransitionPrior":
        """The prior of ``transitions_last3_skip`` counted on ``data``'s training parts."""
        return cls(ItemTransitions(data, **LAST3_SKIP), weight)

    @property
    def num_columns(self) -> int:
        """``num_items + 1`` (column 0: padding)."""
        return len(self.fill)

    def _add_rows(self, out: torch.Tensor, rows: torch.Tensor, voters: torch.Tensor, scale: float) -> None:
        """``out[rows[k]] += scale * counts[voters[k]]`` for every ``k``, in place (sparse rows, no dense copy)."""
        start, sizes = self.crow[voters], self.crow[voters + 1] - self.crow[voters]
        first = torch.cumsum(sizes, 0) - sizes  # where each voter's entries start in the flat list
        flat = torch.arange(int(sizes.sum()), device=out.device)
        index = torch.repeat_interleave(start - first, sizes) + flat
        out.index_put_((torch.repeat_interleave(rows, sizes), self.col[index]), self.values[index] * scale,
                       accumulate=True)

    def heuristic_scores(self, item_ids: torch.Tensor, offsets: torch.Tensor, positions: torch.Tensor,
                         targets: torch.Tensor | None = None) -> torch.Tensor:
        """``s(h, ·)`` ``(P, num_items + 1)`` after each of ``positions (P,)`` (indices into the jagged
        ``item_ids (N,)`` of sequences ``offsets (B + 1,)``): the items at the position and before it in its
        sequence vote. With ``targets (P,)`` (training), each target's count leaves out the transitions from the
        position's own items to it (see the module doc)."""
        depth = jagged_index(offsets)[1][positions]  # (P,) items before the position in its sequence
        counts = torch.zeros(len(positions), self.num_columns, device=item_ids.device)
        for j in range(self.num_last):
            voting = torch.nonzero(depth >= j).squeeze(1)
            self._add_rows(counts, voting, item_ids[positions[voting] - j], self.decay ** j)
        if targets is not None:
            own = 1.0 + (depth >= 1).float() * (self.decay * self.skip_weight if self.num_last > 1 else 0.0)
            counts[torch.arange(len(positions), device=counts.device), targets] -= own
        return counts + self.fill

    def forward(self, batch: JaggedBatch, training: bool) -> torch.Tensor:
        """``w * log(1 + s)``: ``(N, num_items + 1)`` at every position of a training batch (``training``: each
        target's own transitions left out) or ``(B, num_items + 1)`` after the last item of each evaluation
        sequence."""
        if training:
            positions = torch.arange(len(batch.item_ids), device=batch.item_ids.device)
            scores = self.heuristic_scores(batch.item_ids, batch.offsets, positions, batch.target_ids)
        else:
            scores = self.heuristic_scores(batch.item_ids, batch.offsets, batch.last_positions())
        return self.weight * torch.log1p(scores)
