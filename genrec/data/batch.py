"""Jagged batches: values + offsets per feature, no padding.

Training examples are (input sequence, next item at every position) or, for models trained on one target per
sequence, (prefix, next item); evaluation examples are (history, one target item, the user's full history for
excluding seen items). Truncation keeps the most recent items.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np
import torch
from torch.utils.data import Dataset

from genrec.data.schema import SequenceData
from genrec.ops.jagged import jagged_index

ITEM_FEATURE = "item"
ACTION_FEATURE = "action"
USER_FEATURE = "user"


@dataclass
class JaggedBatch:
    """A batch of B user sequences stored jagged; ``N = sum_i N_i`` positions in all.

    Attributes:
        item_ids: ``(N,)`` int64 input item IDs, sequence after sequence, oldest first.
        offsets: ``(B + 1,)`` int64; sequence ``i`` is ``item_ids[offsets[i]:offsets[i + 1]]``.
        target_ids: ``(N,)`` next item at every position (training) or ``(B,)`` one target per sequence (eval).
        user_ids: ``(B,)`` int64 user indices.
        timestamps: ``(N,)`` int64 seconds of the input items, or ``None``.
        query_timestamps: ``(N,)`` int64 time of the event each position predicts (the next item's time; for the
            last position of an evaluation sequence, the target's time), or ``None``.
        seen_ids / seen_offsets: jagged ``(S,)`` / ``(B + 1,)`` every item in the user's history before the target
            (not truncated), for removing seen items from a ranking; ``None`` for training batches.
        actions: ``(N,)`` int64 action ID of every input event (never the target's), or ``None``.
        user_features: ``(B, F)`` int64 user feature IDs of every sequence, or ``None``.
    """

    item_ids: torch.Tensor
    offsets: torch.Tensor
    target_ids: torch.Tensor
    user_ids: torch.Tensor
    timestamps: torch.Tensor | None = None
    query_timestamps: torch.Tensor | None = None
    seen_ids: torch.Tensor | None = None
    seen_offsets: torch.Tensor | None = None
    actions: torch.Tensor | None = None
    user_features: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> torch.Tensor:
        """``(B,)`` sequence lengths."""
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def max_length(self) -> int:
        return int(self.lengths.max()) if self.batch_size else 0

    def last_positions(self) -> torch.Tensor:
        """``(B,)`` index into the ``N`` axis of each sequence's most recent item."""
        return self.offsets[1:] - 1

    def to(self, device: torch.device | str) -> "JaggedBatch":
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(self, **{k: v.to(device, non_blocking=True) for k, v in moved.items() if v is not None})

    def to_kjt(self):
        """The inputs as a TorchRec KeyedJaggedTensor: key ``"item"``, then ``"action"`` (jagged like the items)
        and ``"user"`` (``F`` IDs per sequence) when the batch carries them."""
        from torchrec import KeyedJaggedTensor

        if self.actions is None and self.user_features is None:
            return KeyedJaggedTensor.from_offsets_sync(keys=[ITEM_FEATURE], values=self.item_ids, offsets=self.offsets)
        parts = {ITEM_FEATURE: (self.item_ids, self.lengths)}
        if self.actions is not None:
            parts[ACTION_FEATURE] = (self.actions, self.lengths)
        if self.user_features is not None:
            parts[USER_FEATURE] = (self.user_features.reshape(-1),
                                   self.lengths.new_full((self.batch_size,), self.user_features.shape[1]))
        return KeyedJaggedTensor.from_lengths_sync(keys=list(parts), values=torch.cat([v for v, _ in parts.values()]),
                                                   lengths=torch.cat([n for _, n in parts.values()]))


@dataclass
class _Example:
    user: int
    items: np.ndarray
    targets: np.ndarray
    times: np.ndarray | None
    query_times: np.ndarray | None
    seen: np.ndarray | None
    actions: np.ndarray | None = None
    user_features: np.ndarray | None = None


def prefixes(batch: JaggedBatch) -> JaggedBatch:
    """A training batch (:class:`TrainSequences`: ``B`` sequences, ``N`` positions) -> one row per position: row
    ``(i, j)`` holds sequence ``i``'s inputs ``0 .. j`` and, as its one target, the next item at position ``j``.

    Returns a :class:`JaggedBatch` of ``N`` rows, sequence after sequence: ``item_ids (sum_i N_i (N_i + 1) / 2,)``
    (and the other per-input tensors sliced alike), ``target_ids (N,)``, ``user_ids (N,)``; ``seen_ids`` (when the
    batch has them) repeat the sequence's for each of its rows; ``user_features (N, F)`` likewise.
    """
    row, col = jagged_index(batch.offsets)  # (N,): the sequence and position of every prefix's last input
    sizes = col + 1
    offsets = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])
    prefix_row, prefix_col = jagged_index(offsets)
    take = batch.offsets[:-1][row][prefix_row] + prefix_col  # (sum sizes,) index into the batch's N axis

    def per_input(values: torch.Tensor | None) -> torch.Tensor | None:
        return None if values is None else values[take]

    seen_ids = seen_offsets = None
    if batch.seen_ids is not None:
        seen_sizes = (batch.seen_offsets[1:] - batch.seen_offsets[:-1])[row]
        seen_offsets = torch.cat([seen_sizes.new_zeros(1), seen_sizes.cumsum(0)])
        seen_row, seen_col = jagged_index(seen_offsets)
        seen_ids = batch.seen_ids[batch.seen_offsets[:-1][row][seen_row] + seen_col]
    return JaggedBatch(item_ids=batch.item_ids[take], offsets=offsets, target_ids=batch.target_ids,
                       user_ids=batch.user_ids[row], timestamps=per_input(batch.timestamps),
                       query_timestamps=per_input(batch.query_timestamps), seen_ids=seen_ids,
                       seen_offsets=seen_offsets, actions=per_input(batch.actions),
                       user_features=None if batch.user_features is None else batch.user_features[row])


def _with_features(example: _Example, data: SequenceData, start: int, end: int) -> _Example:
    """``example`` (inputs ``data.item_ids[start:end]``) with the actions of those inputs and the user's features,
    when ``data`` has them."""
    if data.actions is not None:
        example.actions = data.actions[start:end]
    if data.user_features is not None:
        example.user_features = data.user_features[example.user]
    return example


class TrainSequences(Dataset):
    """Next-item training examples: for each user with at least two training items, the training part
    (:class:`SequenceData`'s split: leave-one-out, the sequence minus its last two items) predicts itself shifted by
    one; the most recent ``max_len`` kept.

    Attributes:
        lengths: ``(num_examples,)`` input length of every example (for batching similar lengths together).
    """

    def __init__(self, data: SequenceData, max_len: int):
        self.data, self.max_len = data, max_len
        train_len = data.train_lengths
        self.users = np.flatnonzero(train_len >= 2)
        self.lengths = np.minimum(train_len[self.users] - 1, max_len)

    def __len__(self) -> int:
        return len(self.users)

    def __getitem__(self, idx: int) -> _Example:
        u = int(self.users[idx])
        start, end = int(self.data.offsets[u]), int(self.data.valid_at[u])
        start = max(start, end - self.max_len - 1)
        seq = self.data.item_ids[start:end]
        ts = self.data.timestamps
        return _with_features(_Example(u, seq[:-1], seq[1:], None if ts is None else ts[start:end - 1],
                                        None if ts is None else ts[start + 1:end], None), self.data, start, end - 1)


class TrainPrefixes(Dataset):
    """One training example per target (TIGER's sliding window): every item of a training part but its first is
    predicted from the (at most ``max_len``) items before it. ``target_ids`` is ``(B,)``, one target per example.

    Attributes:
        lengths: ``(num_examples,)`` input length of every example (for batching similar lengths together).
    """

    def __init__(self, data: SequenceData, max_len: int):
        self.data, self.max_len = data, max_len
        per_user = np.maximum(data.train_lengths - 1, 0)  # targets at positions 1 .. train_len - 1
        users = np.repeat(np.arange(data.num_users), per_user)
        position = 1 + np.arange(len(users)) - np.repeat(np.cumsum(per_user) - per_user, per_user)
        self.users, self.ends = users, data.offsets[users] + position
        self.lengths = np.minimum(position, max_len)

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, idx: int) -> _Example:
        u, end = int(self.users[idx]), int(self.ends[idx])
        start = max(int(self.data.offsets[u]), end - self.max_len)
        ts = self.data.timestamps
        return _with_features(_Example(u, self.data.item_ids[start:end], self.data.item_ids[end:end + 1],
                                        None if ts is None else ts[start:end],
                                        None if ts is None else ts[start + 1:end + 1], None), self.data, start, end)


class EvalSequences(Dataset):
    """Evaluation examples of :meth:`SequenceData.targets`: each evaluated user's ``split`` (``"valid"`` or
    ``"test"``) target predicted from everything before it (leave-one-out: the second-to-last item from the items
    before it, the last item from all the others).

    Attributes:
        users / targets: ``(num_examples,)`` the evaluated users and the positions of their targets.
        lengths: ``(num_examples,)`` input length of every example (for batching similar lengths together).
    """

    def __init__(self, data: SequenceData, max_len: int, split: str):
        self.data, self.max_len = data, max_len
        self.users, self.targets = data.targets(split)
        self.lengths = np.minimum(self.targets - data.offsets[self.users], max_len)

    def __len__(self) -> int:
        return len(self.users)

    def __getitem__(self, idx: int) -> _Example:
        u, target = int(self.users[idx]), int(self.targets[idx])
        first = int(self.data.offsets[u])
        start = max(first, target - self.max_len)
        ts = self.data.timestamps
        return _with_features(_Example(u, self.data.item_ids[start:target], self.data.item_ids[target:target + 1],
                                        None if ts is None else ts[start:target],
                                        None if ts is None else ts[start + 1:target + 1],
                                        self.data.item_ids[first:target]), self.data, start, target)


class IndexedExamples(Dataset):
    """``dataset`` whose batches come with their example indices: ``__getitems__(indices) -> (indices, examples)``
    (the DataLoader passes that to its ``collate_fn``)."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, indices: list[int]) -> tuple[list[int], list]:
        return indices, [self.dataset[i] for i in indices]


def event_time(batch: JaggedBatch) -> int | None:
    """A training batch's latest event time (of the events its positions predict), or None without timestamps."""
    times = batch.query_timestamps if batch.query_timestamps is not None else batch.timestamps
    return int(times.max()) if times is not None and times.numel() else None


def _jagged(parts: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]))
    return torch.from_numpy(np.concatenate(parts).astype(np.int64, copy=False)), offsets


def collate(examples: list[_Example]) -> JaggedBatch:
    """Stack examples from :class:`TrainSequences` or :class:`EvalSequences` into one :class:`JaggedBatch`."""
    item_ids, offsets = _jagged([e.items for e in examples])
    has_time = examples[0].times is not None
    seen_ids, seen_offsets = _jagged([e.seen for e in examples]) if examples[0].seen is not None else (None, None)
    return JaggedBatch(
        item_ids=item_ids,
        offsets=offsets,
        target_ids=_jagged([e.targets for e in examples])[0],
        user_ids=torch.tensor([e.user for e in examples], dtype=torch.int64),
        timestamps=_jagged([e.times for e in examples])[0] if has_time else None,
        query_timestamps=_jagged([e.query_times for e in examples])[0] if has_time else None,
        seen_ids=seen_ids,
        seen_offsets=seen_offsets,
        actions=_jagged([e.actions for e in examples])[0] if examples[0].actions is not None else None,
        user_features=torch.from_numpy(np.stack([e.user_features for e in examples]))
        if examples[0].user_features is not None else None,
    )
