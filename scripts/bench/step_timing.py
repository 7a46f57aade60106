"""Timing of whole training steps, shared by the benchmarks that compare two ways of running the same model in one
process (scripts/bench/bench_compile.py: eager vs compiled; scripts/bench/bench_precision.py: float32 vs bf16
autocast)."""
from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Sequence


def optimizer_of(task):
    """The optimizer ``task.configure_optimizers()`` builds (Lightning allows it bare or in a dict)."""
    built = task.configure_optimizers()
    return built["optimizer"] if isinstance(built, dict) else built


def train_step_seconds(task, optimizer, batch, context: Callable[[], contextlib.AbstractContextManager] =
                       contextlib.nullcontext) -> float:
    """Seconds of one training step: the task's loss (inside ``context()``, e.g. an autocast), backward, the
    optimizer's step and zero_grad, and the loss read back (which waits for the device)."""
    start = time.perf_counter()
    with context():
        loss = task.training_loss(batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    loss.item()
    return time.perf_counter() - start


def alternating_medians(step: Callable[[str, object], float], modes: Sequence[str], batches: Sequence,
                        rounds: int) -> dict[str, float]:
    """``step(mode, batch)`` -> seconds, run on every batch per mode per round, the modes' order reversed every
    other round (so a shared machine's drift falls on all of them) -> ``{mode: median over rounds of the round's
    median step}``."""
    medians: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(rounds):
        for mode in (modes if r % 2 == 0 else modes[::-1]):
            medians[mode].append(statistics.median(step(mode, b) for b in batches))
    return {m: statistics.median(v) for m, v in medians.items()}
