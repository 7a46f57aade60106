"""Running a test's worker on several gloo processes and collecting what each rank wrote."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
import torch.multiprocessing as mp


def spawn_ranks(worker: Callable, args: tuple, out_prefix: Path, world: int) -> list[dict]:
    """``worker(rank, *args)`` on ``world`` processes; each rank saves a dict to ``<out_prefix>.<rank>`` (with a
    ``"traceback"`` key if it failed). Returns the ranks' dicts; a failed rank fails the test with its traceback."""
    mp.spawn(worker, args=args, nprocs=world, join=True)
    out = [torch.load(f"{out_prefix}.{rank}", weights_only=False) for rank in range(world)]
    for result in out:
        assert "traceback" not in result, result["traceback"]
    return out
