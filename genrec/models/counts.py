"""Count-based recommenders: no parameters, no training. They count only the training part of each sequence
(:class:`~genrec.data.schema.SequenceData`'s split: leave-one-out, the sequence minus its last two items; a time split,
the events before ``valid_from``), so none sees a validation or test target. They are the baselines every results
table carries (:mod:`genrec.eval.baselines`) and the prior a neural model may start from
(:mod:`genrec.models.prior_head`, :mod:`genrec.models.item_init`).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from genrec.data.batch import JaggedBatch
from genrec.data.schema import SequenceData


def item_popularity(data: SequenceData) -> np.ndarray:
    """``(num_items + 1,)`` training-part interaction count of every item."""
    return np.bincount(data.item_ids[data.training_positions()], minlength=data.num_items + 1).astype(np.float64)


class MostPopular:
    """Ranks every item by its training-part popularity, the same list for every user."""

    def __init__(self, data: SequenceData):
        self.scores = torch.from_numpy(item_popularity(data)).float()

    def __call__(self, batch: JaggedBatch) -> torch.Tensor:
        """-> ``(B, num_items + 1)``"""
        return self.scores.to(batch.item_ids.device).expand(batch.batch_size, -1)


class ItemTransitions:
    """Item-to-item transition counts (a first-order Markov chain with extensions), popularity as tie-break.

    ``score(i) = sum_{j < num_last} decay**j * C[h_{-1-j}, i] + popularity(i) / (1 + max popularity) * 1e-3``
    where ``h_{-1}`` is the user's most recent item and ``C[a, b]`` counts how often ``b`` directly followed ``a``
    in a training part (plus, with ``skip=True``, how often ``b`` came two steps after ``a``, weighted
    ``skip_weight``).

    Args:
        data: the dataset (only training parts are counted).
        num_last: how many of the user's most recent items vote.
        decay: weight ratio between consecutive voters.
        skip: also count skip-one transitions.
        skip_weight: weight of a skip-one transition.
    """

    def __init__(self, data: SequenceData, num_last: int = 1, decay: float = 0.5, skip: bool = False,
                 skip_weight: float = 0.5):
        self.num_last, self.decay = num_last, decay
        self.skip_weight = skip_weight if skip else 0.0
        size = data.num_items + 1
        train = data.training_positions()
        user_of = np.repeat(np.arange(data.num_users), data.lengths)
        src, dst, weight = [], [], []
        for gap, w in [(1, 1.0)] + ([(2, skip_weight)] if skip else []):
            ok = train[:-gap] & train[gap:] & (user_of[:-gap] == user_of[gap:])
            src.append(data.item_ids[:-gap][ok])
            dst.append(data.item_ids[gap:][ok])
            weight.append(np.full(int(ok.sum()), w))
        self.counts = sp.csr_matrix((np.concatenate(weight), (np.concatenate(src), np.concatenate(dst))),
                                    shape=(size, size))
        popularity = item_popularity(data)
        self.fill = popularity / (1.0 + popularity.max()) * 1e-3

    def __call__(self, batch: JaggedBatch) -> torch.Tensor:
        """-> ``(B, num_items + 1)``"""
        items = batch.item_ids.cpu().numpy()
        offsets = batch.offsets.cpu().numpy()
        lengths = np.diff(offsets)
        scores = np.broadcast_to(self.fill, (batch.batch_size, len(self.fill))).copy()
        for j in range(self.num_last):
            rows = np.flatnonzero(lengths > j)
            voters = items[offsets[1:][rows] - 1 - j]
            scores[rows] += self.decay ** j * self.counts[voters].toarray()
        return torch.from_numpy(scores).float().to(batch.item_ids.device)


#: the settings of ``transitions_last3_skip``, the strongest baseline (also the prior of genrec.models.prior_head)
LAST3_SKIP = {"num_last": 3, "decay": 0.5, "skip": True, "skip_weight": 0.5}
