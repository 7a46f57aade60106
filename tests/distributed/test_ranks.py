"""spawn_ranks tolerates a rank aborting at exit only after every rank saved its results."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from tests.distributed.ranks import spawn_ranks


def abort_after_saving(rank: int, out_file: str, save: bool) -> None:
    if save:
        torch.save({"rank": rank}, f"{out_file}.{rank}.part")
        os.replace(f"{out_file}.{rank}.part", f"{out_file}.{rank}")  # whole once visible: rank 1 waits for it
    if rank == 1:
        while save and not Path(f"{out_file}.0").exists():  # as close_group's barrier: rank 0 has saved too
            time.sleep(0.01)
        os.abort()  # what gloo's threads do to a finished rank's teardown on a loaded machine


def test_abort_at_exit_after_saving_is_tolerated(tmp_path):
    with pytest.warns(UserWarning, match="rank 1 aborted at exit"):
        out = spawn_ranks(abort_after_saving, (str(tmp_path / "out"), True), tmp_path / "out", 2)
    assert [r["rank"] for r in out] == [0, 1]


def test_abort_without_results_fails(tmp_path):
    with pytest.raises(mp.ProcessExitedException, match="SIGABRT"):
        spawn_ranks(abort_after_saving, (str(tmp_path / "out"), False), tmp_path / "out", 2)
