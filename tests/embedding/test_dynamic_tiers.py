"""Dynamic tables: the row optimizers against FBGEMM / torch, tier moves bit for bit, a small tier 0 with a store
trains exactly like everything in memory, prefetching changes nothing, export deltas rebuild the table."""
import numpy as np
import pytest
import torch
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_training import ComputeDevice, SplitTableBatchedEmbeddingBagsCodegen

from genrec.embedding.dynamic.config import DynamicTableConfig
from genrec.embedding.dynamic.export import apply_export, export_rows
from genrec.embedding.dynamic.optim import SPARSE_OPTIMIZERS, RowOptimizer
from genrec.embedding.dynamic.prefetch import Prefetcher
from genrec.storage.stores import STORE_BACKENDS
from genrec.embedding.dynamic.table import DynamicTable, lookup, tier0_bytes

DIM, ROWS = 8, 30
FBGEMM = {"sgd": EmbOptimType.EXACT_SGD, "adagrad": EmbOptimType.EXACT_ADAGRAD,
          "rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD}


def _batches(n: int, universe: int = 300, size: int = 24, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.zipf(1.3, size) - 1) % universe for _ in range(n)]


def _grad_for(out: torch.Tensor, step: int) -> torch.Tensor:
    """A loss whose gradient depends on the rows (so optimizer state matters)."""
    target = torch.sin(torch.arange(out.shape[1], dtype=torch.float32) + step)
    return ((out - target) ** 2).sum() + torch.tanh(3 * out).sum()


@pytest.mark.parametrize("name", sorted(FBGEMM))
def test_row_optimizer_equals_fbgemm_fused_cpu_kernel(name):
    tbe = SplitTableBatchedEmbeddingBagsCodegen([(ROWS, DIM, EmbeddingLocation.HOST, ComputeDevice.CPU)],
                                               optimizer=FBGEMM[name], learning_rate=0.05, eps=1e-8,
                                               pooling_mode=PoolingMode.NONE, device="cpu")
    weight = tbe.split_embedding_weights()[0].detach().clone()
    optimizer = RowOptimizer(name, lr=0.05, eps=1e-8)
    state = torch.zeros(ROWS, optimizer.state_width(DIM))
    for step, ids in enumerate(_batches(6, universe=ROWS, size=40)):
        ids = torch.from_numpy(ids)
        out = tbe(ids, torch.tensor([0, len(ids)]))
        _grad_for(out, step).backward()
        mine = weight[ids].requires_grad_()
        _grad_for(mine, step).backward()
        unique, inverse = torch.unique(ids, return_inverse=True)
        summed = torch.zeros(len(unique), DIM).index_add_(0, inverse, mine.grad)
        optimizer.step(weight, state, unique, summed)
    # FBGEMM sums a row's gradients in another order: float32 rounding only
    torch.testing.assert_close(weight, tbe.split_embedding_weights()[0], rtol=1e-5, atol=1e-6)


def test_adam_is_torch_adam_on_each_row_stepped_when_touched():
    optimizer = RowOptimizer("adam", lr=0.01)
    weight = torch.randn(ROWS, DIM)
    state = torch.zeros(ROWS, optimizer.state_width(DIM))
    params = [torch.nn.Parameter(weight[r].clone()) for r in range(ROWS)]
    reference = [torch.optim.Adam([p], lr=0.01) for p in params]
    for step, ids in enumerate(_batches(8, universe=ROWS, size=10)):
        unique = torch.unique(torch.from_numpy(ids))
        grads = torch.randn(len(unique), DIM, generator=torch.Generator().manual_seed(step))
        optimizer.step(weight, state, unique, grads)
        for r, g in zip(unique.tolist(), grads):
            params[r].grad = g.clone()
            reference[r].step()
    assert torch.allclose(weight, torch.stack([p.detach() for p in params]), atol=1e-6, rtol=0)


def _table(capacity: int, store=None, optimizer="adagrad", backend: str | None = None, **settings) -> DynamicTable:
    tier2 = {"path": store, **({"backend": backend} if backend else {})} if store else {}
    return DynamicTable(DynamicTableConfig.build(DIM, capacity, init_std=0.1, optimizer={"name": optimizer, "lr": 0.05},
                                                 store=tier2, **settings))


def _train(table: DynamicTable, batches, prefetch: int = 0) -> None:
    prefetcher = Prefetcher(table, prefetch) if prefetch else None
    if prefetcher:
        for ids in batches[:prefetch]:
            prefetcher.submit(ids)
    for step, ids in enumerate(batches):
        mapped = prefetcher.take(ids) if prefetcher else table.map(ids)
        if prefetcher and step + prefetch < len(batches):
            prefetcher.submit(batches[step + prefetch])  # mapped while this step trains
        _grad_for(lookup(table, mapped), step).backward()
    if prefetcher:
        prefetcher.close()


def _all_rows(table: DynamicTable) -> dict[int, np.ndarray]:
    return {int(i): r["weight"].tobytes() + r["state"].tobytes() for ids, records in table.rows()
            for i, r in zip(ids, records)}


@pytest.mark.parametrize("optimizer", SPARSE_OPTIMIZERS)
def test_a_tier0_of_10_percent_trains_like_all_in_memory(tmp_path, optimizer):
    batches = _batches(60)
    in_memory = _table(1000, optimizer=optimizer)
    _train(in_memory, batches)
    working_set = len(set(np.concatenate(batches).tolist()))
    tiered = _table(working_set // 10 + 30, store=tmp_path, optimizer=optimizer)
    _train(tiered, batches)
    counters = tiered.counters()
    assert counters["hits_tier2"] > 50 and counters["evicted"] > 100  # rows really went down and came back
    assert _all_rows(tiered) == _all_rows(in_memory)  # bit for bit, optimizer state included
    ids = np.arange(-5, 310)
    assert torch.equal(tiered.read(ids), in_memory.read(ids))
    tiered.close()


@pytest.mark.parametrize("backend", STORE_BACKENDS)
def test_tier_moves_keep_rows_and_state_bit_for_bit(tmp_path, backend):
    table = DynamicTable(DynamicTableConfig.build(DIM, 8, optimizer={"name": "adam"}, pinned_batches=1,
                                                  eviction={"policy": "lfu"},
                                                  store={"path": str(tmp_path), "backend": backend}))
    _train(table, [np.array([1, 2, 3, 4])] * 3)
    ids, slots, before = table.tier0_records()
    table.map(np.array([5, 6, 7, 8]))  # fills the free slots
    table.map(np.array([11, 12, 13, 14]))  # evicts 1..4 (least used; 5..8 are pinned by the previous batch)
    table.write_back.flush()
    found, records = table.store.get(ids)
    assert found.all() and records.tobytes() == before.tobytes()
    assert table.counters()["evicted"] == 4
    table.map(ids)  # up again: tier 0 holds exactly what went down
    got = {int(i): r for i, _, r in zip(*table.tier0_records())}
    for i, record in zip(ids, before):
        for field in ("weight", "state", "version"):
            assert got[int(i)][field].tobytes() == record[field].tobytes()
    table.close()


def test_prefetching_gives_the_same_training(tmp_path):
    batches = _batches(40)
    plain, ahead = _table(50, store=tmp_path / "a"), _table(50, store=tmp_path / "b")
    _train(plain, batches)
    _train(ahead, batches, prefetch=1)
    assert ahead.counters()["hits_tier2"] > 0
    assert _all_rows(plain) == _all_rows(ahead)
    assert plain.counters() == ahead.counters()
    plain.close()
    ahead.close()


def test_prefetched_batches_must_come_in_order():
    table = _table(100)
    prefetcher = Prefetcher(table, 1)
    prefetcher.submit(np.array([1, 2]))
    with pytest.raises(RuntimeError, match="differs from the batch being trained"):
        prefetcher.take(np.array([3]))
    prefetcher.close()


@pytest.mark.parametrize("kind", ["zeros", "unknown", "hashed"])
def test_not_admitted_ids_read_the_default_and_have_no_row(kind):
    table = _table(100, admission={"policy": "min_count", "min_count": 4}, default={"kind": kind, "hashed_rows": 4})
    initial = table.weight[100:].clone()
    for step in range(3):
        out = lookup(table, table.map(np.array([7, 7, 7, 7, 8])))  # 7 admitted at once, 8 never (3 < 4)
        _grad_for(out, step).backward()
    assert set(table.index.items()[0].tolist()) == {7}
    defaults = 100 + table._default_index(np.array([8, 9]))
    assert torch.equal(table.read(np.array([8, 9])), table.weight[defaults])
    if kind == "zeros":
        assert torch.equal(table.weight[100:], torch.zeros(1, DIM))  # frozen
    else:  # trained by the lookups of 8
        assert not torch.equal(table.weight[defaults[0]], initial[defaults[0] - 100])
    assert table.counters()["not_admitted"] == 3


@pytest.mark.parametrize("backend", STORE_BACKENDS)
def test_deltas_applied_in_order_give_the_full_export(tmp_path, backend):
    table = _table(50, store=tmp_path / "store", backend=backend, eviction={"ttl": 5, "ttl_every": 1})
    batches = _batches(30)
    _train(table, batches[:10])
    export_rows(table, tmp_path / "v10")
    ids, rows, version = apply_export(None, None, tmp_path / "v10")
    assert version == 10
    for end in (20, 30):
        _train(table, batches[end - 10:end])
        manifest = export_rows(table, tmp_path / f"delta{end}", since=version)
        assert manifest["since"] == version and 0 < manifest["rows"] < len(ids)
        ids, rows, version = apply_export(ids, rows, tmp_path / f"delta{end}", version)
    export_rows(table, tmp_path / "full")
    full_ids, full_rows, full_version = apply_export(None, None, tmp_path / "full")
    assert table.counters()["expired"] > 0  # deletions travel in the deltas too
    assert version == full_version == 30
    assert np.array_equal(ids, full_ids) and np.array_equal(rows, full_rows)
    with pytest.raises(ValueError, match="since version 10 cannot update a table at version 30"):
        apply_export(ids, rows, tmp_path / "delta20", version)
    table.close()


@pytest.mark.parametrize("settings", [{}, {"eviction": {"policy": "lfu"}},
                                      {"admission": {"policy": "min_count", "sketch_width": 1000}},
                                      {"default": {"kind": "hashed", "hashed_rows": 7}, "store": {"filter_mib": 1}}])
def test_tier0_bytes_predicts_the_memory_of_a_built_table(settings, tmp_path):
    if "store" in settings:
        settings = {**settings, "store": {**settings["store"], "path": str(tmp_path)}}
    config = DynamicTableConfig.build(16, 1000, **settings)
    table = DynamicTable(config)
    assert tier0_bytes(config) == table.memory_bytes() > 1000 * 16 * 4
    table.close()
