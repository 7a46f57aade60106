"""The same model trained offline on the same events, for comparing with the stream trainer: epochs over whole user
sequences (every position after a user's first event a target, windows of at most ``max_len`` as in
:func:`genrec.stream.examples.build_examples`), users shuffled per epoch by a generator seeded from (seed, epoch),
with the stream trainer's own training step (:meth:`genrec.stream.learner.Learner.train`)."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

from genrec.stream.examples import sequence_examples
from genrec.stream.learner import Learner


def user_sequences(frame: pd.DataFrame, user: str = "user_id", item: str = "item_id", timestamp: str = "timestamp"
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Events (one per row, in stream order) -> each user's ``(items, times)`` in that order, users by raw ID."""
    ordered = frame.reset_index(drop=True)
    order = np.argsort(ordered[user].to_numpy(), kind="stable")
    users = ordered[user].to_numpy()[order]
    items, times = ordered[item].to_numpy(np.int64)[order], ordered[timestamp].to_numpy(np.int64)[order]
    bounds = np.flatnonzero(np.r_[True, users[1:] != users[:-1], True])
    return [(items[a:b], times[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def train_offline(learner: Learner, sequences: list[tuple[np.ndarray, np.ndarray]], epochs: int, batch_users: int,
                  max_len: int, seed: int, first_epoch: int = 0) -> dict[str, float]:
    """Train ``epochs`` epochs over ``sequences``; returns the targets trained, the steps, the input positions they
    encoded, and the seconds (wall and the process's CPU) it took."""
    started, cpu_started = time.perf_counter(), time.process_time()
    done = {"targets": 0, "steps": 0, "positions": 0}
    for epoch in range(first_epoch, first_epoch + epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(sequences))
        for start in range(0, len(order), batch_users):
            batch = [sequences[i] for i in order[start:start + batch_users]]
            examples = sequence_examples(batch, max_len)
            if examples.num_targets:
                learner.train(examples, int(max(s[1].max() for s in batch)))
                done["targets"] += examples.num_targets
                done["steps"] += 1
                done["positions"] += len(examples.batch.item_ids)
    return {**done, "seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu_started}
