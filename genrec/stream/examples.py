"""Training examples from new events: each user's kept history followed by the user's new events of the batch,
with the new events as the targets.

For a user with history ``H`` (at most ``max_len`` events, oldest first) and ``k`` new events, the sequence is
``S = H + new``; every new event at position ``p >= 1`` of ``S`` is a target, predicted from the events before it
(the first event of a new user has nothing before it: it only starts the history, a *cold* event). Targets are
taken in chunks of at most ``max_len``; a chunk whose last target is at ``e`` gives one input sequence
``S[max(0, e - max_len):e]`` whose positions predict ``S[q + 1]``, and only the positions predicting a target of the
chunk count (the rest were targets of earlier batches: every event is a target once). The same sequences give the
prequential predictions (a target's query is the state at the position before it) and, in training mode, the loss.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from genrec.data.batch import JaggedBatch
from genrec.stream.events import Events


@dataclass
class Examples:
    """The sequences of one micro-batch (``B`` sequences, ``N`` positions, ``M`` targets).

    Attributes:
        batch: ``item_ids / timestamps (N,)`` inputs (raw item IDs), ``offsets (B + 1,)``, ``target_ids (N,)`` the
            next item at every position, ``query_timestamps (N,)`` its time, ``user_ids (B,)`` raw user IDs.
        mask: ``(N,)`` bool, the positions that predict a target.
        target_events: ``(M,)`` index (into the batch's events) of each target, in position order.
        seen_ids / seen_offsets: ``(S,)`` / ``(M + 1,)`` each target's kept history before it (for removing seen
            items from its ranking).
        cold: ``(C,)`` index of the events that are no target (a new user's first event).
        users: ``(U,)`` the batch's distinct users; ``lengths (U,)``, ``items / times (U, max_len)``: their histories
            after the batch (what the state store keeps).
        sequences / history_lengths: each user's kept history followed by its new events (raw item IDs), and how
            many of those were history (``(U,)``).
    """

    batch: JaggedBatch
    mask: torch.Tensor
    target_events: np.ndarray
    seen_ids: np.ndarray
    seen_offsets: np.ndarray
    cold: np.ndarray
    users: np.ndarray
    lengths: np.ndarray
    items: np.ndarray
    times: np.ndarray
    sequences: list[np.ndarray]
    history_lengths: np.ndarray

    @property
    def num_targets(self) -> int:
        return len(self.target_events)

    def steps(self, max_targets: int) -> list["Step"]:
        """The sequences in training steps of at most ``max_targets`` targets each (a sequence is never split: one
        with more targets is a step of its own), shortest sequences first: a step's tensors are padded to its
        longest sequence, so similar lengths together pad least. Every target is in exactly one step."""
        offsets = self.batch.offsets.numpy()
        lengths = offsets[1:] - offsets[:-1]
        masked = np.concatenate([[0], np.cumsum(self.mask.numpy(), dtype=np.int64)])
        targets = masked[offsets[1:]] - masked[offsets[:-1]]  # (B,) per sequence
        order = np.argsort(lengths, kind="stable")
        groups, group, count = [], [], 0
        for b in order.tolist():
            if group and count + targets[b] > max_targets:
                groups.append(group)
                group, count = [], 0
            group.append(b)
            count += int(targets[b])
        if group:
            groups.append(group)
        return [Step.of(self.batch, self.mask, masked, np.asarray(g)) for g in groups]


@dataclass
class Step:
    """One training step's share of a micro-batch (``n`` positions, ``m`` targets).

    Attributes:
        batch: some of the micro-batch's sequences (the fields :func:`build_examples` fills).
        mask: ``(n,)`` bool, their target positions.
        targets: ``(m,)`` each target's index among the micro-batch's targets (their order in ``Examples.mask``).
    """

    batch: JaggedBatch
    mask: torch.Tensor
    targets: torch.Tensor

    @property
    def num_targets(self) -> int:
        return len(self.targets)

    @classmethod
    def of(cls, batch: JaggedBatch, mask: torch.Tensor, masked: np.ndarray, sequences: np.ndarray) -> "Step":
        """The ``sequences (k,)`` of ``batch`` with their part of ``mask (N,)``; ``masked (N + 1,)`` counts the
        targets before every position."""
        offsets = batch.offsets.numpy()
        lengths = offsets[sequences + 1] - offsets[sequences]
        starts = np.repeat(offsets[sequences] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        at = torch.from_numpy(starts + np.arange(lengths.sum()))  # (n,) positions in the micro-batch
        step_mask = mask[at]
        part = JaggedBatch(item_ids=batch.item_ids[at], target_ids=batch.target_ids[at],
                           offsets=torch.from_numpy(np.concatenate([[0], lengths.cumsum()])),
                           user_ids=batch.user_ids[torch.from_numpy(sequences)], timestamps=batch.timestamps[at],
                           query_timestamps=batch.query_timestamps[at])
        return cls(part, step_mask, torch.from_numpy(masked[:-1])[at][step_mask])


def build_examples(events: Events, users: np.ndarray, lengths: np.ndarray, items: np.ndarray, times: np.ndarray,
                   max_len: int) -> Examples:
    """``events`` (accepted, in stream order) and the histories before them of their distinct ``users (U,)``
    (sorted; ``lengths (U,)``, ``items / times (U, max_len)``) -> :class:`Examples`.

    Vectorised over users: every user's ``S`` is a block of one flat array (histories, then new events), and the
    windows, targets and kept histories are index arithmetic on it."""
    num_users = len(users)
    slot = np.searchsorted(users, events.users)
    order = np.argsort(slot, kind="stable")  # events grouped by user, stream order within a user
    bounds = np.searchsorted(slot[order], np.arange(num_users + 1))
    h = np.asarray(lengths, dtype=np.int64)
    k = np.diff(bounds)  # (U,) new events per user
    size = h + k  # (U,) len(S)
    start = np.concatenate([[0], np.cumsum(size)]).astype(np.int64)  # (U + 1,) each S in the flat array
    s_items = np.empty(start[-1], dtype=np.int64)
    s_times = np.empty(start[-1], dtype=np.int64)
    hist_u, hist_j = np.nonzero(np.arange(items.shape[1]) < h[:, None])  # row-major: user, then position
    s_items[start[hist_u] + hist_j] = items[hist_u, hist_j]
    s_times[start[hist_u] + hist_j] = times[hist_u, hist_j]
    event_u = slot[order]
    position = h[event_u] + np.arange(len(order)) - bounds[event_u]  # (n,) of each event (in ``order``) in its S
    s_items[start[event_u] + position] = events.items[order]
    s_times[start[event_u] + position] = events.times[order]
    # targets: the new events at positions >= 1, in windows of at most max_len targets per user
    is_target = position >= 1
    first_target = np.maximum(h, 1)  # (U,)
    num_targets = size - np.minimum(first_target, size)
    windows = -(-num_targets // max_len)  # (U,)
    window_u = np.repeat(np.arange(num_users), windows)  # (B,)
    window_index = np.arange(len(window_u)) - np.repeat(np.cumsum(windows) - windows, windows)
    first = first_target[window_u] + window_index * max_len  # (B,) the window's first target in S
    last = np.minimum(first + max_len, size[window_u]) - 1  # (B,) its last target
    lo = np.maximum(0, last - max_len)
    lens = last - lo
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)  # (B + 1,)
    q = np.repeat(lo, lens) + np.arange(offsets[-1]) - np.repeat(offsets[:-1], lens)  # (N,) position in S
    at = np.repeat(start[window_u], lens) + q  # (N,) in the flat array
    mask = q + 1 >= np.repeat(first, lens)
    batch = JaggedBatch(item_ids=torch.from_numpy(s_items[at]), offsets=torch.from_numpy(offsets),
                        target_ids=torch.from_numpy(s_items[at + 1]),
                        user_ids=torch.from_numpy(np.asarray(users, dtype=np.int64)[window_u]),
                        timestamps=torch.from_numpy(s_times[at]), query_timestamps=torch.from_numpy(s_times[at + 1]))
    # each target's kept history before it: S[:p]
    seen_len = position[is_target]
    seen_offsets = np.concatenate([[0], np.cumsum(seen_len)]).astype(np.int64)
    seen_at = (np.repeat(start[event_u[is_target]], seen_len) + np.arange(seen_offsets[-1])
               - np.repeat(seen_offsets[:-1], seen_len))
    # the histories after the batch: the last max_len events of S
    keep = np.minimum(size, max_len)
    new_items, new_times = np.zeros_like(items), np.zeros_like(times)
    kept_u, kept_j = np.nonzero(np.arange(items.shape[1]) < keep[:, None])
    kept_at = start[kept_u] + size[kept_u] - keep[kept_u] + kept_j
    new_items[kept_u, kept_j] = s_items[kept_at]
    new_times[kept_u, kept_j] = s_times[kept_at]
    new_lengths = np.asarray(lengths).copy()
    new_lengths[:] = keep
    return Examples(batch, torch.from_numpy(mask), order[is_target].astype(np.int64), s_items[seen_at], seen_offsets,
                    np.sort(order[~is_target]).astype(np.int64), users, new_lengths, new_items, new_times,
                    np.split(s_items, start[1:-1]) if num_users else [], lengths.copy())


def sequence_examples(sequences: list[tuple[np.ndarray, np.ndarray]], max_len: int) -> Examples:
    """Offline examples: whole ``(items, times)`` sequences, every position after the first a target (each
    sequence cut into windows of at most ``max_len`` targets, as :func:`build_examples` does for a new user)."""
    users = np.arange(len(sequences), dtype=np.int64)
    lengths = np.zeros(len(sequences), dtype=np.int64)
    empty = np.zeros((len(sequences), max_len), dtype=np.int64)
    owners = np.concatenate([np.full(len(s[0]), u, dtype=np.int64) for u, s in enumerate(sequences)])
    items = np.concatenate([s[0] for s in sequences]).astype(np.int64)
    times = np.concatenate([s[1] for s in sequences]).astype(np.int64)
    n = len(items)
    events = Events(np.arange(n), np.zeros(n, dtype=object), np.zeros(n, dtype=np.int64), owners, items, times)
    return build_examples(events, users, lengths, empty, empty, max_len)
