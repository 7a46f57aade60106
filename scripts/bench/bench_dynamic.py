"""Dynamic embedding tables (genrec.embedding.dynamic), measured side by side in one run.

Sections (each prints its table; all go to ``results/bench_dynamic.json``):

* ``stores``: the tier-2 backends (genrec.storage.slab, RocksDB through rocksdict, LMDB) on the same rows, one
  after the other: new rows then as many overwrites in batches of 4096 (rows/s and the process's CPU per row, the
  store's background work waited for and included), disk bytes, a checkpoint (seconds, bytes); random multi-gets of
  8192 rows (alternated, median of rounds). With ``prefetch`` and ``larger_than_memory``: chooses the default.
* ``exactness``: tier 0 = 10% of the working set with tier 2 vs the whole table in memory, same stream, for sgd,
  adagrad, rowwise_adagrad and adam: the largest weight / optimizer-state difference (goal <= 1e-6).
* ``remap``: IDs/s of the mapping alone (raw ID -> slot, admission, eviction) on a Zipf(1.05) stream, batches of
  8192, tables of 1e5 .. 5e7 slots filled before timing, against TorchRec's MCH remap (LRU, eviction every batch)
  on the same batches (goal: >= 2M IDs/s at every size, flat in the size).
* ``zipf``: a Zipf(1.05) stream with >= 10M distinct IDs, batches of 8192, D = 64, row-wise Adagrad; tier 0 of 1%,
  10% and 50% of the distinct IDs: genrec's table (map + lookup + fused update; LRU and LFU) vs TorchRec MCH
  (remap + FBGEMM's fused TBE, the kernel of a TorchRec FUSED table, on its slots) vs the TBE on the IDs remapped
  offline; tier-0 hit rates vs exact per-ID simulations of LRU / LFU-with-decay on the same stream (goal: within
  1 point).
* ``prefetch``: a training step (lookup + an MLP over each row + fused update) at a 10% tier 0 with tier 2, with
  and without prefetching (and prefetching with the mapping in numpy instead of the compiled kernels), vs the
  same step with everything in memory (goal: prefetched <= 1.2x); the CPU time per step of every thread (training,
  mapping, write-back, RocksDB's pool), which says whether the background work fits beside the step. Once per
  store of ``--stores``, one after the other.
* ``sasrec``: a SASRec training step on the dynamic table (everything fits, admission always) vs the static
  TorchRec table (goal: overhead <= 10%).
* ``larger_than_memory``: in a child process per store of ``--stores``, a table growing to >= 4x a memory budget
  (tier 0 + bookkeeping + the store's memory: RocksDB's cache and memtables, the slab's ID index sized for the rows)
  on a Zipf stream: peak RSS - the process's RSS before the table (the fixed overhead, printed) vs the budget; disk
  bytes; IDs/s.

Timed comparisons alternate their variants in blocks and report medians; one CPU thread (the machine is shared).

Usage::

    python -m scripts.bench.bench_dynamic            # the full run (about 30 min on 2 shared cores)
    python -m scripts.bench.bench_dynamic --quick    # small sizes, to check the script
    python -m scripts.bench.bench_dynamic --sections prefetch --out results/bench_dynamic_prefetch.json   # one section
"""
from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from genrec.embedding.dynamic import DynamicTable, DynamicTableConfig, native  # noqa: E402
from genrec.embedding.dynamic.prefetch import Prefetcher  # noqa: E402
from genrec.storage.durable import fsync_tree  # noqa: E402
from genrec.embedding.dynamic.optim import RowOptimizer  # noqa: E402
from genrec.storage.stores import STORE_BACKENDS, RocksStore, directory_bytes, open_store  # noqa: E402
from genrec.embedding.dynamic.table import as_bytes, lookup, record_dtype, tier0_bytes  # noqa: E402
from genrec.utils.provenance import provenance, write_json  # noqa: E402

BATCH = 8192


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def zipf_batches(count: int, alpha: float, seed: int, batch: int = BATCH) -> np.ndarray:
    """``(count, batch)`` int64 raw IDs from an unbounded Zipf(alpha) (numpy), shifted to start at 0."""
    return np.random.default_rng(seed).zipf(alpha, (count, batch)).astype(np.int64) - 1


def table(dim: int, capacity: int, **settings) -> DynamicTable:
    return DynamicTable(DynamicTableConfig.build(dim, capacity, **settings))


def train_step(t: DynamicTable, ids: np.ndarray, mapped=None) -> None:
    out = lookup(t, t.map(ids) if mapped is None else mapped)
    out.sum().backward()


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable"):
            return int(line.split()[1]) / 2**20
    return 0.0


# ---------------------------------------------------------------------------------------------------- stores
def settle(store) -> None:
    """Wait until a store has no background work left (RocksDB: its memtables flushed, no compaction running or
    due), so that the CPU of a write phase includes what the writes cost later."""
    if isinstance(store, RocksStore):
        store.db.flush()
        while (store.db.property_int_value("rocksdb.num-running-compactions")
               or store.db.property_int_value("rocksdb.compaction-pending")):
            time.sleep(0.05)


def bench_stores(rows: int, rounds: int, folder: Path) -> dict:
    """Each backend in turn (so that no store's background work runs in another's timing): ``rows`` new rows, then
    as many overwrites of random rows (the tier-2 traffic of a table whose rows go down again), in batches of 4096;
    rows/s and the process's CPU seconds (every thread: RocksDB's flushes and compactions included, waited for),
    disk bytes, a checkpoint (snapshot + fsync) and its size; then random multi-gets of 8192 rows, the stores
    alternated, median of ``rounds``."""
    dtype = record_dtype(64, 1)
    rng = np.random.default_rng(0)
    ids = rng.permutation(rows).astype(np.int64)
    records = np.frombuffer(rng.bytes(rows * dtype.itemsize), np.uint8).reshape(rows, dtype.itemsize)
    overwrites = np.concatenate([rng.permutation(rows)[:rows // 2], rng.permutation(rows)[:rows - rows // 2]])
    chunk, stores, out = 4096, {}, {}
    load_start = os.getloadavg()[0]
    for name in STORE_BACKENDS:
        store = stores[name] = open_store(name, folder / name, dtype.itemsize, cache_mib=64)
        x = out[name] = {}
        for phase, order in (("new", np.arange(rows)), ("overwrite", overwrites)):
            began, cpu = time.perf_counter(), time.process_time()
            for s in range(0, rows, chunk):
                batch = order[s:s + chunk]
                store.put(ids[batch], records[batch])
            settle(store)
            x[f"{phase}_rows_per_s"] = rows / (time.perf_counter() - began)
            x[f"{phase}_cpu_us_per_row"] = 1e6 * (time.process_time() - cpu) / rows
        x["disk_bytes"] = directory_bytes(folder / name)
        began = time.perf_counter()
        store.checkpoint(folder / f"{name}-snapshot")
        fsync_tree(folder / f"{name}-snapshot")
        x["checkpoint_s"] = time.perf_counter() - began
        x["checkpoint_disk_bytes"] = directory_bytes(folder / f"{name}-snapshot")
        shutil.rmtree(folder / f"{name}-snapshot")
        log(f"stores {name}: {json.dumps(x)}")
    get = {name: [] for name in stores}
    position = np.argsort(ids)  # ID -> its row in `records`
    for r in range(rounds):
        query = ids[rng.integers(0, rows, BATCH)]
        for name, store in stores.items():
            began = time.perf_counter()
            found, got = store.get(query)
            get[name].append(BATCH / (time.perf_counter() - began))
            assert found.all() and got.tobytes() == records[position[query]].tobytes()
    for name, store in stores.items():
        out[name]["get_rows_per_s"] = statistics.median(get[name])
        out[name]["memory_bytes"] = store.memory_bytes()
        store.close()
    return {"rows": rows, "record_bytes": dtype.itemsize, "batch_rows": chunk, "cache_mib": 64,
            "load_average_1min": {"start": load_start, "end": os.getloadavg()[0]}, "results": out}


# ---------------------------------------------------------------------------------------------------- exactness
def bench_exactness(universe: int, steps: int, batch: int, folder: Path) -> list[dict]:
    stream = zipf_batches(steps, 1.05, seed=1, batch=batch) % universe
    working_set = len(np.unique(stream))
    out = []
    for optimizer in ("sgd", "adagrad", "rowwise_adagrad", "adam"):
        small = max(working_set // 10, 3 * batch)
        settings = {"init_std": 0.1, "optimizer": {"name": optimizer, "lr": 0.05}}
        full = table(32, working_set + 10, **settings)
        tiered = table(32, small, store={"path": str(folder / optimizer)}, **settings)
        for ids in stream:
            for t in (full, tiered):
                out_rows = lookup(t, t.map(ids))
                (out_rows * torch.sin(out_rows)).sum().backward()
        ids = np.unique(stream)
        a, b = full.read(ids), tiered.read(ids)
        states = [{int(i): r["state"] for i_, r_ in t.rows() for i, r in zip(i_, r_)} for t in (full, tiered)]
        state_diff = max(float(np.abs(states[0][i] - states[1][i]).max(initial=0)) for i in states[0])
        c = tiered.counters()
        out.append({"optimizer": optimizer, "working_set": working_set, "tier0_rows": small,
                    "tier0_fraction": small / working_set, "max_weight_diff": float((a - b).abs().max()),
                    "max_state_diff": state_diff, "same_rows": sorted(states[0]) == sorted(states[1]),
                    "hits_tier2": c["hits_tier2"], "evicted": c["evicted"]})
        log(f"exactness {optimizer}: max |w diff| {out[-1]['max_weight_diff']:.1e}, "
            f"state {state_diff:.1e}, {c['hits_tier2']} rows back from tier 2")
        tiered.close()
    return out


# ---------------------------------------------------------------------------------------------------- remap
def fill(t: DynamicTable, capacity: int) -> None:
    """Admit ``capacity`` fresh (negative) IDs in large batches, so the table is full before timing."""
    chunk = max(1, min(capacity // 4, 1 << 20))
    for start in range(0, capacity, chunk):
        t.map(-1 - np.arange(start, min(capacity, start + chunk), dtype=np.int64))


def mch_module(capacity: int):
    from torchrec.modules.mc_modules import LRU_EvictionPolicy, MCHManagedCollisionModule

    return MCHManagedCollisionModule(zch_size=capacity, device=torch.device("cpu"),
                                     eviction_policy=LRU_EvictionPolicy(), eviction_interval=1).train()


def mch_remap(module, ids: np.ndarray) -> torch.Tensor:
    from torchrec.sparse.jagged_tensor import JaggedTensor

    values = torch.from_numpy(ids)
    return module({"f": JaggedTensor(values=values, lengths=torch.tensor([len(values)]))})["f"].values()


def mch_fill(module, capacity: int) -> None:
    chunk = max(BATCH, min(capacity // 4, 1 << 20))
    for start in range(0, capacity, chunk):
        mch_remap(module, -1 - np.arange(start, min(capacity, start + chunk), dtype=np.int64))


def bench_remap(capacities: list[int], timed: int, mch_max: int) -> list[dict]:
    stream = zipf_batches(timed + 10, 1.05, seed=2)
    out = []
    for capacity in capacities:
        need = capacity * 200 / 2**30 + 1
        if available_gib() < need:
            out.append({"capacity": capacity, "skipped": f"needs ~{need:.0f} GiB, {available_gib():.0f} available"})
            log(f"remap {capacity}: skipped ({out[-1]['skipped']})")
            continue
        row = {"capacity": capacity}
        t = table(8, capacity, optimizer={"name": "sgd"})
        fill(t, capacity)
        for ids in stream[:10]:
            t.map(ids)
        began = time.perf_counter()
        for ids in stream[10:]:
            t.map(ids)
        row["genrec_ids_per_s"] = timed * BATCH / (time.perf_counter() - began)
        row["genrec_memory_bytes"] = t.memory_bytes()
        del t
        gc.collect()
        if capacity <= mch_max:
            module = mch_module(capacity)
            mch_fill(module, capacity)
            window = stream[10:10 + max(3, timed // (1 + capacity // 500_000))]
            mch_remap(module, stream[0])
            began = time.perf_counter()
            for ids in window:
                mch_remap(module, ids)
            row["mch_ids_per_s"] = len(window) * BATCH / (time.perf_counter() - began)
            row["mch_batches_timed"] = len(window)
            del module
            gc.collect()
        else:
            row["mch_ids_per_s"] = None
        out.append(row)
        log(f"remap {capacity:>10,} slots: genrec {row['genrec_ids_per_s'] / 1e6:.2f}M IDs/s, MCH "
            + (f"{row['mch_ids_per_s'] / 1e6:.3f}M IDs/s" if row["mch_ids_per_s"] else "not run"))
    return out


# ---------------------------------------------------------------------------------------------------- zipf
def exact_lru_hit_rate(stream: np.ndarray, capacity: int) -> float:
    """Per-ID LRU over the stream, in order: the fraction of IDs found in the cache."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for batch in stream:
        for i in batch.tolist():
            if i in cache:
                cache.move_to_end(i)
                hits += 1
            else:
                cache[i] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return hits / stream.size


def exact_lfu_hit_rate(stream: np.ndarray, capacity: int, decay: float) -> float:
    """Per-ID LFU with counts decayed by ``decay`` per batch (an evicted ID's count is forgotten): the fraction of IDs
    found in the cache. Lazy heap of (score, id); scores grow by 1/decay per batch instead of all decaying."""
    log_growth = -math.log(decay)
    score: dict[int, float] = {}
    heap: list[tuple[float, int]] = []
    hits = 0
    for step, batch in enumerate(stream):
        weight = math.exp(log_growth * step)
        for i in batch.tolist():
            if i in score:
                hits += 1
                score[i] += weight
            else:
                if len(score) >= capacity:
                    while True:
                        s, victim = heapq.heappop(heap)
                        if score.get(victim) == s:
                            del score[victim]
                            break
                score[i] = weight
            heapq.heappush(heap, (score[i], i))
        if len(heap) > 4 * capacity:
            heap = [(s, i) for i, s in score.items()]
            heapq.heapify(heap)
    return hits / stream.size


def tbe(rows: int, dim: int):
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (ComputeDevice,
                                                                         SplitTableBatchedEmbeddingBagsCodegen)

    return SplitTableBatchedEmbeddingBagsCodegen([(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
                                                 optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.05,
                                                 pooling_mode=PoolingMode.NONE, device="cpu")


def tbe_step(module, slots: torch.Tensor) -> None:
    module(slots, torch.tensor([0, len(slots)])).sum().backward()


def bench_zipf(batches: int, fractions: list[float], timed: int, dim: int, mch_max: int) -> dict:
    stream = zipf_batches(batches, 1.05, seed=3)
    distinct, dense = np.unique(stream, return_inverse=True)
    dense = dense.reshape(stream.shape).astype(np.int64)
    result = {"batches": batches, "ids": stream.size, "distinct": len(distinct), "dim": dim, "rows": []}
    log(f"zipf stream: {stream.size:,} IDs, {len(distinct):,} distinct")
    window = slice(batches - timed, batches)

    static = tbe(len(distinct), dim)  # the whole table, IDs remapped offline
    tbe_step(static, torch.from_numpy(dense[0]))
    began = time.perf_counter()
    for slots in dense[window]:
        tbe_step(static, torch.from_numpy(slots))
    result["static_tbe_ids_per_s"] = timed * BATCH / (time.perf_counter() - began)
    log(f"static TBE on offline-remapped IDs: {result['static_tbe_ids_per_s'] / 1e6:.2f}M IDs/s")
    del static, dense
    gc.collect()

    for fraction in fractions:
        capacity = max(int(fraction * len(distinct)), 3 * BATCH)
        row = {"fraction": fraction, "capacity": capacity}
        for policy in ("lru", "lfu"):
            t = table(dim, capacity, optimizer={"name": "rowwise_adagrad"}, eviction={"policy": policy})
            for ids in stream[:window.start]:
                train_step(t, ids)
            before = dict(t.counters())
            began = time.perf_counter()
            for ids in stream[window]:
                train_step(t, ids)
            row[f"genrec_{policy}_ids_per_s"] = timed * BATCH / (time.perf_counter() - began)
            c = t.counters()
            row[f"genrec_{policy}_hit_rate"] = c["hit_rate_tier0"]
            row[f"genrec_{policy}_window_hit_rate"] = (c["hits_tier0"] - before["hits_tier0"]) / (timed * BATCH)
            del t
            gc.collect()
            log(f"zipf {fraction:.0%} ({capacity:,} rows) genrec {policy}: "
                f"{row[f'genrec_{policy}_ids_per_s'] / 1e6:.2f}M IDs/s, hit rate {c['hit_rate_tier0']:.4f}")
        row["exact_lru_hit_rate"] = exact_lru_hit_rate(stream, capacity)
        row["exact_lfu_hit_rate"] = exact_lfu_hit_rate(stream, capacity, decay=0.99)
        log(f"zipf {fraction:.0%}: exact LRU {row['exact_lru_hit_rate']:.4f}, exact LFU {row['exact_lfu_hit_rate']:.4f}")
        if capacity <= mch_max:
            module, embeddings = mch_module(capacity), tbe(capacity, dim)
            for start in range(0, window.start, 128):  # the prefix in large calls (MCH sorts its table per call)
                mch_remap(module, stream[start:min(start + 128, window.start)].reshape(-1))
            mch_window = stream[window][:max(3, timed // (1 + capacity // 200_000))]
            hits = 0
            began = time.perf_counter()
            for ids in mch_window:
                known = torch.isin(torch.from_numpy(ids), module._mch_sorted_raw_ids)
                tbe_step(embeddings, mch_remap(module, ids))
                hits += int(known.sum())
            row["mch_ids_per_s"] = len(mch_window) * BATCH / (time.perf_counter() - began)
            row["mch_window_hit_rate"], row["mch_batches_timed"] = hits / mch_window.size, len(mch_window)
            del module, embeddings
            gc.collect()
            log(f"zipf {fraction:.0%} MCH: {row['mch_ids_per_s'] / 1e6:.3f}M IDs/s (isin + remap + TBE), "
                f"window hit rate {row['mch_window_hit_rate']:.4f}")
        result["rows"].append(row)
    return result


# ---------------------------------------------------------------------------------------------------- prefetch
class Tower(torch.nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        return self.mlp(rows).square().mean()


def store_write_gil(folder: Path, dim: int, backend: str, rows: int = 4096, writes: int = 40) -> dict:
    """How much a tier-2 write (``rows`` records of a ``dim``-wide row with Adagrad state) slows Python in another
    thread: a pure-Python loop's speed while a thread writes, relative to its speed alone (1.0: the write releases
    the interpreter lock and a core is free; lower: it holds the lock, or the cores are busy)."""
    t = table(dim, rows, store={"path": str(folder), "backend": backend})
    store = t.store
    records = np.zeros((rows, t.dtype.itemsize), dtype=np.uint8)

    def spin(seconds: float) -> int:
        n, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            n += 1
        return n

    alone = spin(0.5) / 0.5
    writer = threading.Thread(target=lambda: [store.put(np.arange(rows) + k * rows, records) for k in range(writes)])
    began, n = time.perf_counter(), 0
    writer.start()
    while writer.is_alive():
        n += spin(0.005)
    seconds = time.perf_counter() - began
    t.close()
    return {"rows_per_write": rows, "ms_per_write": 1e3 * seconds / writes,
            "python_speed_while_writing": n / seconds / alone}


def thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process's threads, summed by role: ``training`` (the main
    thread), ``mapping`` (prefetch threads), ``write_back``, ``rocksdb`` (RocksDB's flush and compaction pool) and
    ``other``; read from /proc (Linux), empty elsewhere."""
    roles = {"genrec-prefetch": "mapping", "genrec-write-back": "write_back"}
    python_names = {t.native_id: t.name for t in threading.enumerate()}
    main = threading.main_thread().native_id
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []:
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            comm = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:  # the thread ended
            continue
        fields = stat.rsplit(")", 1)[1].split()
        name = python_names.get(int(tid), comm)
        role = ("training" if int(tid) == main else roles.get(name)
                or ("rocksdb" if comm.startswith("rocksdb") else "other"))
        out[role] = out.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def bench_prefetch(batches: int, block: int, dim: int, hidden: int, stores: list[str], folder: Path) -> dict:
    """The comparison below once per tier-2 backend, one after the other (each with its own all-in-memory
    baseline, every store of the previous backend closed)."""
    out = {}
    for backend in stores:
        out[backend] = prefetch_one_store(batches, block, dim, hidden, backend, folder / backend)
        log(f"prefetch {backend}: {json.dumps(out[backend])[:1500]}")
        gc.collect()
    return {"stores": out}


def prefetch_one_store(batches: int, block: int, dim: int, hidden: int, backend: str, folder: Path) -> dict:
    stream = zipf_batches(batches, 1.05, seed=4)
    distinct = len(np.unique(stream))
    small = max(distinct // 10, 3 * BATCH)

    def store(name: str) -> dict:
        return {"path": str(folder / name), "backend": backend}

    variants = {"all_in_memory": (table(dim, distinct + 10), 0),
                "tier0_10pct": (table(dim, small, store=store("plain")), 0),
                "tier0_10pct_prefetch": (table(dim, small, store=store("ahead")), 1),
                "tier0_10pct_prefetch_numpy": (table(dim, small, store=store("numpy")), 1)}
    towers = {name: Tower(dim, hidden) for name in variants}
    optimizers = {name: torch.optim.AdamW(towers[name].parameters(), lr=1e-3) for name in variants}
    prefetchers = {name: Prefetcher(t, depth) for name, (t, depth) in variants.items() if depth}
    times = {name: [] for name in variants}
    waits = {name: [] for name in variants}  # time the step spent getting its mapping (take() or map())
    cpu = {name: [] for name in variants}  # the training thread's own CPU time per step
    threads_cpu = {name: {} for name in [*variants, "with_store"]}  # CPU seconds by thread role in timed blocks
    position = {name: 0 for name in variants}

    def run(name: str, steps: int, timed: bool) -> None:
        """``steps`` training steps of a variant; ``*_numpy``: the table's mapping without the compiled kernels
        (numpy, holding the interpreter lock)."""
        t, _ = variants[name]
        native._loaded[:] = [None] if name.endswith("_numpy") else [kernels]
        prefetcher = prefetchers.get(name)
        first = position[name]
        before = thread_cpu_seconds() if timed else {}
        for i in range(first, first + steps):
            began, began_cpu = time.perf_counter(), time.thread_time()
            ids = stream[i]
            mapped = prefetcher.take(ids) if prefetcher is not None and i > first else t.map(ids)
            mapped_at = time.perf_counter()
            if prefetcher is not None and i + 1 < first + steps:
                prefetcher.submit(stream[i + 1])  # mapped while this step trains
            loss = towers[name](lookup(t, mapped))
            loss.backward()
            optimizers[name].step()
            optimizers[name].zero_grad()
            if timed:
                times[name].append(time.perf_counter() - began)
                waits[name].append(mapped_at - began)
                cpu[name].append(time.thread_time() - began_cpu)
        position[name] = first + steps
        for role, seconds in (thread_cpu_seconds().items() if timed else ()):
            # RocksDB's pool is shared by every table's store and runs behind the writes (it compacts what earlier
            # blocks wrote): its CPU is shared out equally over the store variants' steps below
            owner = "with_store" if role == "rocksdb" else name
            threads_cpu[owner][role] = threads_cpu[owner].get(role, 0.0) + seconds - before.get(role, 0.0)

    kernels = native.load()
    load_start = os.getloadavg()[0]
    warm = batches // 2
    for name in variants:  # fill the tables: the first half of the stream, untimed
        run(name, warm, timed=False)
    while position["all_in_memory"] + block <= batches:
        for name in variants:
            run(name, block, timed=True)
    native._loaded[:] = [kernels]
    for p in prefetchers.values():
        p.close()
    medians = {name: statistics.median(v) for name, v in times.items()}
    counters = {name: t.counters() for name, (t, _) in variants.items()}
    for t, _ in variants.values():
        t.close()
    base = medians["all_in_memory"]
    return {"store": backend, "batches": batches, "distinct": distinct, "tier0_rows": small, "dim": dim,
            "hidden": hidden,
            "median_step_s": medians, "ratio_vs_all_in_memory": {k: v / base for k, v in medians.items()},
            "median_mapping_wait_s": {name: statistics.median(v) for name, v in waits.items()},
            "median_training_thread_cpu_s": {name: statistics.median(v) for name, v in cpu.items()},
            "cores": os.cpu_count(), "load_average_1min": {"start": load_start, "end": os.getloadavg()[0]},
            "cpu_s_per_step_by_thread": {name: {role: seconds / len(times[name]) for role, seconds in roles.items()}
                                         for name, roles in threads_cpu.items() if name in variants},
            "rocksdb_cpu_s_per_store_step": threads_cpu["with_store"].get("rocksdb", 0.0) / sum(
                len(times[name]) for name, (t, _) in variants.items() if t.store is not None),
            "store_write_gil": store_write_gil(folder / "gil", dim, backend),
            "hit_rate_tier0": {k: c["hit_rate_tier0"] for k, c in counters.items()},
            "hit_rate_tier2": {k: c["hit_rate_tier2"] for k, c in counters.items()},
            "compiled_kernels": kernels is not None,
            "same_result": len({c["evicted"] for name, c in counters.items() if name != "all_in_memory"}) == 1}


# ---------------------------------------------------------------------------------------------------- sasrec
def bench_sasrec(num_items: int, batch_users: int, length: int, blocks: int, block: int) -> dict:
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

    from genrec.data.batch import JaggedBatch
    from genrec.embedding import ItemEmbedding
    from genrec.embedding.dynamic import DynamicItemEmbedding
    from genrec.models.losses import SampledSoftmaxLoss
    from genrec.models.recommender import SequentialRecommender
    from genrec.models.sasrec import SASRec

    dim = 64
    static = ItemEmbedding(num_items, dim)
    weight = static.tables.collection.embeddings[static.table_name].weight
    apply_optimizer_in_backward(torch.optim.Adagrad, [weight], {"lr": 0.05})
    embeddings = {"static": static,
                  "dynamic": DynamicItemEmbedding(num_items, dim, capacity=num_items + 1,
                                                  optimizer={"name": "adagrad", "lr": 0.05})}
    models = {}
    for name, emb in embeddings.items():
        torch.manual_seed(0)
        model = SequentialRecommender(emb, SASRec(dim, num_layers=2, num_heads=2, max_len=length, dropout=0.2))
        params = [p for n, p in model.named_parameters() if "item_embedding" not in n]
        models[name] = (model, torch.optim.AdamW(params, lr=1e-3))
    loss_fn = SampledSoftmaxLoss(num_negatives=128)
    gen = torch.Generator().manual_seed(0)

    def batch() -> JaggedBatch:
        items = torch.randint(1, num_items + 1, (batch_users, length + 1), generator=gen)
        return JaggedBatch(item_ids=items[:, :-1].reshape(-1), target_ids=items[:, 1:].reshape(-1),
                           offsets=torch.arange(0, batch_users * length + 1, length), user_ids=torch.arange(batch_users))

    times = {name: [] for name in models}
    for round_ in range(blocks + 1):
        for name, (model, optimizer) in models.items():
            started = time.perf_counter()
            for _ in range(block):
                loss = model.training_loss(batch(), loss_fn)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            if round_:  # the first round warms up
                times[name].append((time.perf_counter() - started) / block)
    medians = {name: statistics.median(v) for name, v in times.items()}
    return {"num_items": num_items, "batch_users": batch_users, "length": length, "dim": dim,
            "loss": "sampled softmax, 128 uniform negatives", "median_step_s": medians,
            "overhead": medians["dynamic"] / medians["static"] - 1}


# ---------------------------------------------------------------------------------------------------- larger than memory
def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    raise RuntimeError(field)


def larger_than_memory_child(args: dict) -> dict:
    """Run in a fresh process: grow a table to ``args['ratio']`` x the budget on a Zipf stream."""
    torch.set_num_threads(1)
    dim, budget = args["dim"], args["budget_mib"] << 20
    warm = table(dim, 4096, store={"path": str(Path(args["folder"]) / "warm")})  # load every library once
    for ids in zipf_batches(3, 1.05, seed=9, batch=512):
        train_step(warm, ids)
    warm.close()
    shutil.rmtree(Path(args["folder"]) / "warm")
    gc.collect()
    base = rss_kib("VmRSS:") << 10
    state = RowOptimizer("rowwise_adagrad").state_width(dim)
    table_bytes_per_row = (dim + state) * 4
    target_rows = int(args["ratio"] * budget / table_bytes_per_row)
    if args["backend"] == "slab":  # the store's memory is its ID index: 8 bytes a position, at most 90% full
        cache_mib = math.ceil(1.1 * target_rows / 0.9 * 8 / 2**20)
        store_memory = cache_mib
    else:  # RocksDB: the block cache, and two memtables of cache_mib / 4 charged to it; LMDB: nothing of its own
        cache_mib = 32
        store_memory = 32 + 2 * 32
    store = {"path": str(Path(args["folder"]) / "store"), "backend": args["backend"], "cache_mib": cache_mib,
             "write_back_batches": 4, "filter_mib": 16}
    probe = DynamicTableConfig.build(dim, 1_000_000, optimizer={"name": "rowwise_adagrad"}, store=store)
    per_row = tier0_bytes(probe) / probe.capacity
    # the store's memory; per-step temporaries, write-back batches, the ID map's rebuild, the LRU queue's compaction,
    # RocksDB's compactions and the allocator's slack: 256 MiB (a first run measured 218 MiB)
    reserve = (store_memory + 256) << 20
    capacity = int((budget - reserve) / per_row)
    t = table(dim, capacity, optimizer={"name": "rowwise_adagrad"}, store=store)
    rng_seed, steps, started = 100, 0, time.perf_counter()
    while t.counters()["admitted"] < target_rows and steps < args["max_batches"]:
        for ids in zipf_batches(64, 1.05, seed=rng_seed):  # generated in chunks: the stream itself stays small
            train_step(t, ids)
            steps += 1
        rng_seed += 1
    elapsed = time.perf_counter() - started
    t.write_back.flush()
    c = t.counters()
    out = {"backend": args["backend"], "cache_mib": cache_mib, "store_memory_bytes": t.store.memory_bytes(),
           "budget_bytes": budget, "capacity": capacity, "tier0_bytes": t.memory_bytes(),
           "rows": c["admitted"], "table_bytes": c["admitted"] * table_bytes_per_row,
           "table_over_budget": c["admitted"] * table_bytes_per_row / budget, "batches": steps,
           "ids_per_s": steps * BATCH / elapsed, "hit_rate_tier0": c["hit_rate_tier0"],
           "hit_rate_tier2": c["hit_rate_tier2"], "disk_bytes": t.store.disk_bytes(),
           "fixed_overhead_bytes": base, "peak_rss_bytes": rss_kib("VmHWM:") << 10}
    out["peak_minus_fixed_bytes"] = out["peak_rss_bytes"] - base
    out["within_budget"] = out["peak_minus_fixed_bytes"] <= budget
    t.close()
    return out


def bench_larger_than_memory(budget_mib: int, ratio: float, max_batches: int, stores: list[str], folder: Path
                             ) -> list[dict]:
    """One child process per store backend (the same stream and budget)."""
    out = []
    for backend in stores:
        args = {"dim": 64, "budget_mib": budget_mib, "ratio": ratio, "max_batches": max_batches,
                "folder": str(folder / backend), "backend": backend}
        child = [sys.executable, "-m", __spec__.name, "--larger-than-memory-child", json.dumps(args)]
        done = subprocess.run(child, capture_output=True, text=True, cwd=ROOT)
        if done.returncode:
            raise RuntimeError(f"larger-than-memory child ({backend}) failed:\n{done.stderr[-3000:]}")
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
        log(json.dumps(out[-1]))
        shutil.rmtree(folder / backend, ignore_errors=True)
    return out


# ---------------------------------------------------------------------------------------------------- main
RUNNERS = {"stores": bench_stores, "exactness": bench_exactness, "remap": bench_remap, "zipf": bench_zipf,
           "prefetch": bench_prefetch, "sasrec": bench_sasrec, "larger_than_memory": bench_larger_than_memory}
#: the sections that keep stores on disk (in a scratch folder of their own)
ON_DISK = ("stores", "exactness", "prefetch", "larger_than_memory")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (checks the script, not the goals)")
    parser.add_argument("--scratch", default=None, help="folder for the stores (default: a temporary folder)")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench_dynamic.json"))
    parser.add_argument("--sections", nargs="+", choices=list(RUNNERS), default=list(RUNNERS),
                        help="run only these sections (default: all); the file records which ran")
    parser.add_argument("--stores", nargs="+", choices=STORE_BACKENDS, default=list(STORE_BACKENDS),
                        help="the tier-2 backends of the prefetch and larger_than_memory sections (default: all)")
    parser.add_argument("--larger-than-memory-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.larger_than_memory_child:
        print(json.dumps(larger_than_memory_child(json.loads(args.larger_than_memory_child))))
        return
    q = args.quick
    sizes = {
        "stores": dict(rows=20_000 if q else 1_000_000, rounds=5 if q else 20),
        "exactness": dict(universe=20_000 if q else 200_000, steps=20 if q else 60, batch=512 if q else 2048),
        "remap": dict(capacities=[50_000, 200_000] if q else [100_000, 1_000_000, 5_000_000, 50_000_000],
                      timed=10 if q else 50, mch_max=200_000 if q else 5_000_000),
        "zipf": dict(batches=60 if q else 2800, fractions=[0.01, 0.1, 0.5], timed=10 if q else 100,
                     dim=64, mch_max=10**9),
        "prefetch": dict(batches=40 if q else 400, block=5 if q else 20, dim=64, hidden=256, stores=args.stores),
        "sasrec": dict(num_items=2000 if q else 20000, batch_users=16 if q else 128, length=20 if q else 50,
                       blocks=2 if q else 5, block=2 if q else 10),
        "larger_than_memory": dict(budget_mib=256 if q else 1024, ratio=4.2, max_batches=400 if q else 20000,
                                   stores=args.stores),
    }
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="bench_dynamic_"))
    scratch.mkdir(parents=True, exist_ok=True)
    log(f"scratch folder {scratch} ({shutil.disk_usage(scratch).free / 2**30:.0f} GiB free), "
        f"{available_gib():.1f} GiB memory available")
    results: dict = {"kind": "bench_dynamic", "quick": q, "sections": args.sections, "sizes": sizes, "threads": 1,
                     "batch": BATCH,
                     "machine_note": f"{os.cpu_count()} cores, shared with whatever else runs (the prefetch "
                                     "section records the load average); one torch thread"}
    try:
        for section in args.sections:
            log(section)
            if section in ON_DISK:
                results[section] = RUNNERS[section](**sizes[section], folder=scratch / section)
                shutil.rmtree(scratch / section, ignore_errors=True)
            else:
                results[section] = RUNNERS[section](**sizes[section])
            log(json.dumps(results[section])[:2000])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out = write_json(Path(args.out), {**results, **provenance()})
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
