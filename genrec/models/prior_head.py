"""A residual head over the item-transition counts (the FPMC / Fossil lineage: a sequence model plus an
item-to-item transition term with a learned weight per order, trained together).

With ``model.prior.enabled=true`` a retrieval model scores item ``i`` after history ``h`` as

    ``score(h, i) = sim(user_state(h), item(i)) + sum_j w_j * log(1 + C[h_{-1-j}, i])``,  ``j = 0, 1, 2``

where ``C`` holds the transition counts of the ``transitions_last3_skip`` baseline
(:class:`~genrec.models.counts.ItemTransitions` with :data:`~genrec.models.counts.LAST3_SKIP`: direct and
skip-one transitions of the training parts only), ``h_{-1-j}`` is the user's ``j``-th most recent item and ``w_j``
are learned, starting at the baseline's vote weights ``1, 0.5, 0.25`` (times ``model.prior.weight``). Each voter's
counts are damped by their own log, so the term is a sum over the three voters' sparse count rows: it is added to
the logits in place, never materialising a dense ``(positions, items)`` prior (a dense one, the log of the summed
votes, cost as much as the rest of a training step on ML-100K, where the count rows are long). A model whose own
scores are still near zero (at initialisation) ranks by the counts alone, much as the baseline does; training
learns what the counts miss. The loss (the full softmax) sees the same sum, divided by its temperature.

The counts include every training transition, the ones the training positions predict among them: left in, each
training position's prior would always vote for its target (the pair being predicted is counted), which it never
can for a validation or test target (those pairs are not counted), and the ``w_j`` would learn to trust the counts
too much. So at a training position voter ``j``'s count of the target leaves out the position's own transition to
it (``1`` for the direct one from the last item, ``skip_weight`` for the skip-one from the item before): the
leave-one-out counts, the view the evaluation gets.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from genrec.data.batch import JaggedBatch
from genrec.data.schema import SequenceData
from genrec.errors import ConfigError
from genrec.models.counts import LAST3_SKIP, ItemTransitions
from genrec.ops.jagged import jagged_index

#: ``model.prior.fit`` values (see :class:`TransitionPrior`)
FITS = ("joint", "stacked")


class TransitionPrior(nn.Module):
    """``sum_j w_j * log(1 + C[h_{-1-j}, i])`` (see the module doc) from transition counts held as CSR buffers
    (rebuilt from the data whenever the model is built, not saved in checkpoints; the weights are).

    Args:
        transitions: the baseline whose counts, number of voters, vote weights and skip weight are used.
        weight: the initial weights are ``weight * decay ** j``.
        fit: how training fits the sum (one of :data:`FITS`): ``joint``, the model and the weights learn on the
            summed scores (the model learns what the counts miss); ``stacked``, the model learns alone (today's
            loss) and the weights learn on the sum with the model's scores detached (a second softmax over the same
            logits, without the model's gradient), so the prior is an ensemble member fitted to the model.
    """

    def __init__(self, transitions: ItemTransitions, weight: float = 1.0, fit: str = "joint"):
        super().__init__()
        if fit not in FITS:
            raise ConfigError("model.prior.fit", f"got {fit!r}, expected one of {', '.join(FITS)}")
        self.fit = fit
        counts = transitions.counts.tocsr()
        counts.sort_indices()
        self.num_columns = counts.shape[1]
        #: the count a training position's own transition adds to voter j's entry of its target (gap j + 1)
        self.own = (1.0, transitions.skip_weight) + (0.0,) * max(0, transitions.num_last - 2)
        self.register_buffer("crow", torch.from_numpy(counts.indptr.astype(np.int64)), persistent=False)
        self.register_buffer("col", torch.from_numpy(counts.indices.astype(np.int64)), persistent=False)
        self.register_buffer("log_counts", torch.from_numpy(np.log1p(counts.data).astype(np.float32)),
                             persistent=False)
        row = np.repeat(np.arange(self.num_columns, dtype=np.int64), np.diff(counts.indptr))
        self.register_buffer("keys", torch.from_numpy(row * self.num_columns + counts.indices), persistent=False)
        self.register_buffer("counts", torch.from_numpy(counts.data.astype(np.float32)), persistent=False)
        self.weights = nn.Parameter(weight * transitions.decay ** torch.arange(transitions.num_last,
                                                                                dtype=torch.float32))

    @classmethod
    def from_data(cls, data: SequenceData, weight: float = 1.0, fit: str = "joint") -> "TransitionPrior":
        """The prior of ``transitions_last3_skip``'s counts on ``data``'s training parts."""
        return cls(ItemTransitions(data, **LAST3_SKIP), weight, fit)

    def _count(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """``C[rows, cols]`` ``(K,)`` (0 where not counted)."""
        keys = rows * self.num_columns + cols
        at = torch.searchsorted(self.keys, keys).clamp(max=len(self.keys) - 1)
        return torch.where(self.keys[at] == keys, self.counts[at], torch.zeros_like(self.counts[at]))

    def add_to(self, scores: torch.Tensor, batch: JaggedBatch, training: bool, first_item: int = 0,
               scale: float = 1.0) -> torch.Tensor:
        """Add ``scale`` times the prior to ``scores`` in place (autograd follows) and return it.

        Args:
            scores: ``(N, C')`` at every position of a training batch (``training``: each target's own transitions
                left out, see the module doc) or ``(B, C')`` after the last item of each evaluation sequence;
                column ``c`` scores item ``first_item + c``.
            batch: the batch ``scores`` score.
            training: which of the two.
            first_item: the item of column 0 (1 for a loss that leaves the padding out).
            scale: e.g. ``1 / temperature`` for logits.
        """
        if training:
            positions = torch.arange(len(batch.item_ids), device=scores.device)
        else:
            positions = batch.last_positions()
        depth = jagged_index(batch.offsets)[1][positions]  # (P,) items before each position in its sequence
        for j, weight in enumerate(self.weights * scale):
            voting = torch.nonzero(depth >= j).squeeze(1)
            voters = batch.item_ids[positions[voting] - j]
            start, sizes = self.crow[voters], self.crow[voters + 1] - self.crow[voters]
            entry = torch.repeat_interleave(start - (torch.cumsum(sizes, 0) - sizes), sizes) + torch.arange(
                int(sizes.sum()), device=scores.device)  # each voter's CSR entries, voter after voter
            scores.index_put_((torch.repeat_interleave(voting, sizes), self.col[entry] - first_item),
                              weight * self.log_counts[entry], accumulate=True)
            if training and self.own[j]:  # the targets' entries, made leave-one-out
                targets = batch.target_ids[voting]
                counted = self._count(voters, targets)
                correction = torch.log1p((counted - self.own[j]).clamp(min=0)) - torch.log1p(counted)
                scores.index_put_((voting, targets - first_item), weight * correction, accumulate=True)
        return scores

    def forward(self, batch: JaggedBatch, training: bool) -> torch.Tensor:
        """The prior alone, dense: ``(N, num_items + 1)`` at every position of a training batch or
        ``(B, num_items + 1)`` after each evaluation sequence (see :meth:`add_to`)."""
        rows = len(batch.item_ids) if training else batch.batch_size
        zeros = torch.zeros(rows, self.num_columns, device=batch.item_ids.device)
        return self.add_to(zeros, batch, training)
