"""Dynamic-table checkpoints: exact resume, reload at another world size, a SIGKILL mid-checkpoint (and mid
write-back) leaves a loadable checkpoint."""
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from genrec.embedding.dynamic.checkpoint import load_checkpoint, save_checkpoint, save_shard
from genrec.embedding.dynamic.config import DynamicTableConfig
from genrec.embedding.dynamic.hashing import owner
from genrec.storage.stores import STORE_BACKENDS
from genrec.embedding.dynamic.table import DynamicTable, lookup

REPO = Path(__file__).resolve().parents[2]


def _config(store, capacity=64, backend: str | None = None, **settings) -> DynamicTableConfig:
    return DynamicTableConfig.build(8, capacity, init_std=0.1, optimizer={"name": "rowwise_adagrad", "lr": 0.05},
                                    admission={"policy": "min_count", "min_count": 2, "sketch_width": 4096},
                                    store={"path": str(store), **({"backend": backend} if backend else {})},
                                    **settings)


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.zipf(1.2, 32) - 1) % 500 for _ in range(n)]


def _train(table: DynamicTable, batches) -> None:
    for step, ids in enumerate(batches):
        out = lookup(table, table.map(ids))
        ((out - torch.cos(torch.arange(8.0) + step)) ** 2).sum().backward()


def _rows(tables) -> dict[int, bytes]:
    return {int(i): r["weight"].tobytes() + r["state"].tobytes() + r["version"].tobytes()
            for t in tables for ids, records in t.rows() for i, r in zip(ids, records)}


@pytest.mark.parametrize("backend", STORE_BACKENDS)
@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_resume_continues_exactly(tmp_path, policy, backend):
    batches = _batches(60)
    original = DynamicTable(_config(tmp_path / "a", backend=backend, eviction={"policy": policy}))
    _train(original, batches[:30])
    save_checkpoint({"item": original}, tmp_path / "ckpt")
    _train(original, batches[30:])
    resumed = DynamicTable(_config(tmp_path / "b", backend=backend, eviction={"policy": policy}))
    load_checkpoint({"item": resumed}, tmp_path / "ckpt")
    _train(resumed, batches[30:])
    assert original.counters()["hits_tier2"] > 0
    assert _rows([resumed]) == _rows([original]) and resumed.counters() == original.counters()
    original.close()
    resumed.close()


@pytest.mark.parametrize("backend", STORE_BACKENDS)
def test_reload_at_other_world_sizes_repartitions_rows_by_id_hash(tmp_path, backend):
    """Two shards (trained as a 2-process run would: each maps the IDs it owns) reloaded into 1 and 3 processes."""
    shards = [DynamicTable(_config(tmp_path / "two", backend=backend), rank=r, world_size=2) for r in range(2)]
    for ids in _batches(60):
        for r, shard in enumerate(shards):
            _train(shard, [ids[owner(ids, 2) == r]])
    for shard in shards:
        save_shard(shard, tmp_path / "ckpt" / "item" / f"rank{shard.rank}")
    expected = _rows(shards)
    assert len(expected) > 2 * 64  # more rows than both tier 0s: the stores hold rows too

    for world, capacity in ((1, 64), (3, 64), (1, 1000)):
        tables = [DynamicTable(_config(tmp_path / f"w{world}-{capacity}", capacity=capacity, backend=backend), rank=r,
                               world_size=world) for r in range(world)]
        for table in tables:
            load_checkpoint({"item": table}, tmp_path / "ckpt")
            ids = np.array(list(_rows([table])))
            assert (owner(ids, world) == table.rank).all()
            assert table.step == 60 and table.admission.sketch.total == sum(s.admission.sketch.total for s in shards)
        assert _rows(tables) == expected
        for table in tables:
            table.close()
    for shard in shards:
        shard.close()


CHILD = textwrap.dedent("""
    import hashlib, sys, time
    import numpy as np, torch
    sys.path.insert(0, {repo!r})
    from genrec.embedding.dynamic.checkpoint import save_checkpoint
    from genrec.embedding.dynamic.table import DynamicTable, lookup
    from tests.embedding.test_dynamic_checkpoint import _batches, _config, fingerprint
    table = DynamicTable(_config({store!r}, capacity=2000))
    for k, ids in enumerate(_batches(10_000, seed=1)):
        out = lookup(table, table.map(ids * 1000 + k))  # new IDs every step: constant write-back
        (out ** 2).sum().backward()
        if k % 20 == 19:
            print("begin", fingerprint(table), flush=True)
            save_checkpoint({{"item": table}}, {ckpt!r})
            print("end", flush=True)
        if k == 79:  # the fourth checkpoint is written: wait for the kill (a fifth would race with it)
            time.sleep(600)
""")


def fingerprint(table: DynamicTable) -> str:
    digest = hashlib.sha256(str(table.step).encode())
    for ids, records in sorted(((int(i), r.tobytes()) for ids, rs in table.rows() for i, r in zip(ids, rs))):
        digest.update(ids.to_bytes(8, "little", signed=True) + records)
    return digest.hexdigest()


def _kill_during_fourth_checkpoint(folder: Path, fraction: float | None) -> tuple[list[str], list[str]]:
    """Run the child until three checkpoints are complete, SIGKILL it ``fraction`` of the way through writing the
    fourth (``None``: as soon as the write's temporary folder appears) -> (the four fingerprints, the leftovers of
    the interrupted write)."""
    script = CHILD.format(repo=str(REPO), store=str(folder / "live"), ckpt=str(folder / "ckpt"))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        fingerprints, durations = [], []
        while len(fingerprints) < 4:
            line = child.stdout.readline()
            assert line, f"child exited with {child.wait()}"
            kind, *rest = line.split()
            if kind == "begin":
                fingerprints.append(rest[0])
                started = time.perf_counter()
            else:
                durations.append(time.perf_counter() - started)
        if fraction is None:
            deadline = time.perf_counter() + 60
            while not (folder / "ckpt.tmp").exists() and time.perf_counter() < deadline:
                time.sleep(0.0005)
        else:
            time.sleep(fraction * float(np.median(durations)))
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    return fingerprints, [p.name for p in folder.iterdir() if p.name.startswith("ckpt.")]


def test_sigkill_during_checkpoint_and_write_back_leaves_a_loadable_checkpoint(tmp_path):
    """The child trains with new rows every step (the write-back thread is always writing) and checkpoints every
    20 steps. Killed at several points of a checkpoint write, what is on disk always loads as the last complete
    checkpoint (or the new one, if the kill came after its rename), and training goes on from it. Kills timed by
    the earlier writes can all miss the fourth on a busy machine; the last attempt kills once its write has begun."""
    inside = 0
    for attempt, fraction in enumerate((0.5, 0.2, 0.8, None)):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        fingerprints, leftovers = _kill_during_fourth_checkpoint(folder, fraction)
        table = DynamicTable(_config(folder / "reloaded", capacity=2000))
        load_checkpoint({"item": table}, folder / "ckpt")
        assert fingerprint(table) in fingerprints[2:]
        inside += bool(leftovers)
        _train(table, _batches(3, seed=2))
        table.close()
        if inside and attempt:
            break
    assert inside, "no kill landed inside a checkpoint write"
