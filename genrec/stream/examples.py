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


def build_examples(events: Events, users: np.ndarray, lengths: np.ndarray, items: np.ndarray, times: np.ndarray,
                   max_len: int) -> Examples:
    """``events`` (accepted, in stream order) and the histories before them of their distinct ``users (U,)``
    (sorted; ``lengths (U,)``, ``items / times (U, max_len)``) -> :class:`Examples`."""
    slot = np.searchsorted(users, events.users)
    order = np.argsort(slot, kind="stable")  # events grouped by user, stream order within a user
    bounds = np.searchsorted(slot[order], np.arange(len(users) + 1))
    inputs, input_times, targets, query_times, masks, lens, owners = [], [], [], [], [], [], []
    target_events, seen, cold, sequences = [], [], [], []
    new_lengths, new_items, new_times = lengths.copy(), np.zeros_like(items), np.zeros_like(times)
    for u in range(len(users)):
        mine = order[bounds[u]:bounds[u + 1]]
        h = int(lengths[u])
        s_items = np.concatenate([items[u, :h], events.items[mine]])
        s_times = np.concatenate([times[u, :h], events.times[mine]])
        sequences.append(s_items)
        positions = np.arange(h, h + len(mine))  # of the new events in S
        cold += mine[positions == 0].tolist()
        target_pos, target_ev = positions[positions >= 1], mine[positions >= 1]
        for start in range(0, len(target_pos), max_len):
            chunk, chunk_ev = target_pos[start:start + max_len], target_ev[start:start + max_len]
            end = int(chunk[-1])
            lo = max(0, end - max_len)
            inputs.append(s_items[lo:end])
            input_times.append(s_times[lo:end])
            targets.append(s_items[lo + 1:end + 1])
            query_times.append(s_times[lo + 1:end + 1])
            mask = np.zeros(end - lo, dtype=bool)
            mask[chunk - 1 - lo] = True
            masks.append(mask)
            lens.append(end - lo)
            owners.append(users[u])
            target_events += chunk_ev.tolist()
            seen += [s_items[:p] for p in chunk]
        keep = min(len(s_items), max_len)
        new_lengths[u] = keep
        new_items[u, :keep] = s_items[len(s_items) - keep:]
        new_times[u, :keep] = s_times[len(s_times) - keep:]
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    seen_offsets = np.concatenate([[0], np.cumsum([len(s) for s in seen])]).astype(np.int64)

    def cat(parts: list[np.ndarray]) -> torch.Tensor:
        return torch.from_numpy(np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64))

    batch = JaggedBatch(item_ids=cat(inputs), offsets=torch.from_numpy(offsets), target_ids=cat(targets),
                        user_ids=torch.tensor(owners, dtype=torch.int64), timestamps=cat(input_times),
                        query_timestamps=cat(query_times))
    return Examples(batch, torch.from_numpy(np.concatenate(masks) if masks else np.zeros(0, dtype=bool)),
                    np.array(target_events, dtype=np.int64),
                    np.concatenate(seen).astype(np.int64) if seen else np.zeros(0, dtype=np.int64), seen_offsets,
                    np.array(sorted(cold), dtype=np.int64), users, new_lengths, new_items, new_times, sequences,
                    lengths.copy())


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
