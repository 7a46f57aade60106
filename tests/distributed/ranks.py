"""Running a test's worker on several gloo processes and collecting what each rank wrote."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def spawn_ranks(worker: Callable, args: tuple, out_prefix: Path, world: int) -> list[dict]:
    """``worker(rank, *args)`` on ``world`` processes; each rank saves a dict to ``<out_prefix>.<rank>`` (with a
    ``"traceback"`` key if it failed). Returns the ranks' dicts; a failed rank fails the test with its traceback.

    A rank killed by SIGABRT after it saved its results is tolerated with a warning: on a loaded 2-core machine gloo's
    threads sometimes abort the interpreter's teardown ("terminate called without an active exception") after
    ``close_group`` returned, which says nothing about the test. Any other exit, or a missing results file, fails."""
    try:
        mp.spawn(worker, args=args, nprocs=world, join=True)
    except mp.ProcessExitedException as err:
        saved = all(Path(f"{out_prefix}.{rank}").exists() for rank in range(world))
        if err.signal_name != "SIGABRT" or not saved:
            raise
        warnings.warn(f"rank {err.error_index} aborted at exit after saving its results: {err}")
    out = [torch.load(f"{out_prefix}.{rank}", weights_only=False) for rank in range(world)]
    for result in out:
        assert "traceback" not in result, result["traceback"]
    return out


def close_group(succeeded: bool) -> None:
    """End a worker: a rank that succeeded first waits at a barrier for the others, so that no rank tears gloo down
    while a peer still uses it (on a loaded machine that aborted the peer with SIGABRT, "terminate called without
    an active exception"); then the process group is destroyed. A failed rank skips the barrier, and a peer's
    barrier failing on its closed connection is ignored: the failed rank's saved traceback says what went wrong."""
    if succeeded:
        try:
            dist.barrier()
        except RuntimeError:
            pass
    dist.destroy_process_group()
