"""Two gloo processes on CPU: training with sharded tables equals one process training on the global batch.

One spawn runs every case (a 2-process start costs seconds): table-, row- and column-wise sharding with a fused
Adagrad, row-wise with fused row-wise Adagrad; then out-of-range IDs, hashing, and a distributed checkpoint
written under one plan and read under another plan and in one unsharded process. The reference is the unsharded
model in this process, trained with torch's AdamW (dense part) and a plain Adagrad / a hand-written row-wise
Adagrad (table) on the concatenation of both processes' batches. Ranks get batches of different lengths, so the
loss normalisation by the global number of positions is exercised.
"""
from __future__ import annotations

import traceback

import pytest
import torch
import torch.distributed as dist

from genrec.data.batch import JaggedBatch
from genrec.dist import ShardingConfig, SparseOptimizerConfig, shard_module
from genrec.dist.checkpoint import load_distributed, load_weights, restore, save_distributed, training_state
from genrec.embedding import ItemEmbedding
from genrec.models.losses import FullSoftmaxLoss
from genrec.models.recommender import SequentialRecommender
from genrec.models.sasrec import SASRec
from genrec.training.retrieval import RetrievalTask
from tests.distributed.ranks import close_group, spawn_ranks

pytestmark = pytest.mark.dist

WORLD, NUM_ITEMS, DIM, STEPS, LR, SPARSE_LR = 2, 40, 16, 4, 1e-2, 0.1
CASES = [("table_wise", "adagrad"), ("row_wise", "adagrad"), ("column_wise", "adagrad"),
         ("row_wise", "rowwise_adagrad")]


def make_task(out_of_range: str = "error") -> RetrievalTask:
    torch.manual_seed(0)
    model = SequentialRecommender(ItemEmbedding(NUM_ITEMS, DIM, init_std=0.3, out_of_range=out_of_range),
                                  SASRec(DIM, num_layers=1, num_heads=2, max_len=8, dropout=0.0))
    return RetrievalTask(model, FullSoftmaxLoss(), lr=LR)


def make_batch(seqs: list[list[int]]) -> JaggedBatch:
    """Inputs ``seq[:-1]``, targets ``seq[1:]``."""
    lengths = torch.tensor([len(s) - 1 for s in seqs])
    return JaggedBatch(item_ids=torch.tensor([i for s in seqs for i in s[:-1]]),
                       offsets=torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]),
                       target_ids=torch.tensor([i for s in seqs for i in s[1:]]),
                       user_ids=torch.arange(len(seqs)))


def rank_sequences(step: int, rank: int) -> list[list[int]]:
    """Rank 0 gets 3 sequences, rank 1 gets 2 of other lengths (different position counts per rank)."""
    gen = torch.Generator().manual_seed(100 * step + rank)
    count, lengths = (3, (5, 7, 3)) if rank == 0 else (2, (8, 4))
    return [torch.randint(1, NUM_ITEMS + 1, (lengths[i],), generator=gen).tolist() for i in range(count)]


def worker(rank: int, init_file: str, out_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    result = {}
    try:
        for kind, optimizer in CASES:
            task = make_task()
            config = ShardingConfig(type=kind, optimizer=SparseOptimizerConfig(name=optimizer, lr=SPARSE_LR))
            model, plan = shard_module(task, config, torch.device("cpu"), local_world_size=WORLD)
            dense = task.configure_optimizers()
            losses = []
            for step in range(STEPS):
                loss = model(make_batch(rank_sequences(step, rank)))
                loss.backward()
                dense.step()
                dense.zero_grad()
                total = loss.detach().clone()
                dist.all_reduce(total)
                losses.append(total.item() / WORLD)  # the mean of the rescaled losses: the global mean
            with torch.no_grad():
                table = task.model.item_embedding.table().clone()
            result[(kind, optimizer)] = {"losses": losses, "table": table, "plan": plan,
                                         "dense": task.model.encoder.blocks[0].ffn[0].weight.detach().clone()}
        result["resume"] = resume_check(task, model, rank, out_file)

        # bad IDs: a clear error naming the feature on every process, before any communication
        task = make_task()
        model, _ = shard_module(task, ShardingConfig(type="row_wise"), torch.device("cpu"), WORLD)
        try:
            model(make_batch([[1, 2, NUM_ITEMS + 1, 3]]))
        except ValueError as err:
            result["error"] = str(err)
        # hashing instead: an ID past the end reads row ``id mod (num_items + 1)``
        hashed = make_task(out_of_range="hash")
        shard_module(hashed, ShardingConfig(type="row_wise"), torch.device("cpu"), WORLD)
        with torch.no_grad():
            got = hashed.model.item_embedding.lookup(torch.tensor([NUM_ITEMS + 4, 3]))
            result["hash_equal"] = torch.equal(got[0], got[1])

        # a distributed checkpoint written row-wise and read back table-wise (and, in the parent, unsharded)
        with torch.no_grad():
            saved_table = task.model.item_embedding.table().clone()
        save_distributed(out_file + ".ckpt", {"model": task.state_dict()}, {"note": "test"}, rank == 0)
        dist.barrier()
        other = make_task()
        with torch.no_grad():
            for p in other.parameters():
                p.add_(1.0)  # so that equal weights can only come from the checkpoint
        shard_module(other, ShardingConfig(type="table_wise"), torch.device("cpu"), WORLD)
        state = {"model": other.state_dict()}
        meta = load_distributed(out_file + ".ckpt", state)
        other.load_state_dict(state["model"])
        with torch.no_grad():
            result["reload_max_diff"] = (other.model.item_embedding.table() - saved_table).abs().max().item()
        result["meta"] = meta
        result["saved_table"] = saved_table
    except Exception:  # the parent shows the traceback of the failing rank
        result["traceback"] = traceback.format_exc()
    finally:
        torch.save(result, f"{out_file}.{rank}")
        close_group(succeeded="traceback" not in result)


def one_more_step(task: RetrievalTask, model, rank: int) -> torch.Tensor:
    """Train one step more (fresh dense optimizer) and return the table: the sparse update of that step depends
    on the fused optimizer's accumulated state."""
    dense = task.configure_optimizers()
    model(make_batch(rank_sequences(STEPS, rank))).backward()
    dense.step()
    with torch.no_grad():
        return task.model.item_embedding.table().clone()


def resume_check(task: RetrievalTask, model, rank: int, out_file: str) -> dict:
    """Save weights + fused optimizer state (row-wise), restore them into a table-wise model: one more step must
    give the same table as one more step on the original; restoring the weights alone must not."""
    path = out_file + ".resume"
    save_distributed(path, training_state(task.state_dict(), model), {}, rank == 0)
    dist.barrier()
    tables = {}
    for name, with_optimizer in (("restored", True), ("weights_only", False)):
        other = make_task()
        other_model, _ = shard_module(other, ShardingConfig(
            type="table_wise", optimizer=SparseOptimizerConfig(name="rowwise_adagrad", lr=SPARSE_LR)),
            torch.device("cpu"), WORLD)
        restore(path, other, other_model if with_optimizer else None)
        tables[name] = one_more_step(other, other_model, rank)
    tables["original"] = one_more_step(task, model, rank)
    return tables


def rowwise_adagrad(weight: torch.Tensor, state: torch.Tensor, lr: float, eps: float = 1e-8) -> None:
    """FBGEMM's exact row-wise Adagrad: one accumulator per row, the mean of the squared gradient row."""
    with torch.no_grad():
        state += weight.grad.pow(2).mean(dim=1)
        weight -= lr * weight.grad / (state.sqrt() + eps)[:, None]


def reference(optimizer: str) -> dict:
    """The unsharded task trained on both ranks' sequences together."""
    task = make_task()
    table = task.model.item_embedding.tables.collection.embeddings["item_table"].weight
    dense = torch.optim.AdamW([p for p in task.parameters() if p is not table], lr=LR, betas=(0.9, 0.98),
                              weight_decay=0.0)
    sparse = torch.optim.Adagrad([table], lr=SPARSE_LR, eps=1e-8) if optimizer == "adagrad" else None
    state = torch.zeros(NUM_ITEMS + 1)
    losses = []
    for step in range(STEPS):
        batch = make_batch(rank_sequences(step, 0) + rank_sequences(step, 1))
        loss = task.training_loss(batch)
        loss.backward()
        dense.step()
        if sparse is not None:
            sparse.step()
        else:
            rowwise_adagrad(table, state, SPARSE_LR)
        dense.zero_grad()
        table.grad = None
        losses.append(loss.item())
    return {"losses": losses, "table": table.detach().clone(),
            "dense": task.model.encoder.blocks[0].ffn[0].weight.detach().clone()}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    return spawn_ranks(worker, (str(tmp / "init"), str(tmp / "out")), tmp / "out", WORLD), tmp


@pytest.mark.parametrize("kind,optimizer", CASES)
def test_sharded_training_equals_one_process_on_the_global_batch(results, kind, optimizer):
    out, _ = results
    expected = reference(optimizer)
    for rank in range(WORLD):
        got = out[rank][(kind, optimizer)]
        assert got["losses"] == pytest.approx(expected["losses"], abs=1e-5)
        assert torch.allclose(got["table"], expected["table"], atol=1e-5), \
            (got["table"] - expected["table"]).abs().max()
        assert torch.allclose(got["dense"], expected["dense"], atol=1e-5)
    # the steps changed the table: an unchanged table would pass trivially
    assert not torch.allclose(expected["table"], make_task().model.item_embedding.table(), atol=1e-3)


def test_plan_printed_for_each_sharding(results):
    out, _ = results
    plans = {kind: out[0][(kind, "adagrad")]["plan"] for kind in ("table_wise", "row_wise", "column_wise")}
    assert "item_table" in plans["table_wise"] and "0: 41 x 16" in plans["table_wise"]
    assert "0: 21 x 16, 1: 20 x 16" in plans["row_wise"]
    assert "0: 41 x 8, 1: 41 x 8" in plans["column_wise"]


def test_out_of_range_ids_raise_naming_the_feature_on_every_process(results):
    out, _ = results
    for rank in range(WORLD):
        assert out[rank]["error"].startswith(f"feature 'item': IDs must lie in [0, {NUM_ITEMS + 1})")
        assert out[rank]["hash_equal"]


def test_fused_optimizer_state_resumes_under_another_plan(results):
    out, _ = results
    for rank in range(WORLD):
        tables = out[rank]["resume"]
        assert torch.allclose(tables["restored"], tables["original"], atol=1e-6)
        assert not torch.allclose(tables["weights_only"], tables["original"], atol=1e-4)


def test_distributed_checkpoint_reloads_under_another_plan_and_in_one_process(results):
    out, tmp = results
    for rank in range(WORLD):
        assert out[rank]["reload_max_diff"] == 0.0
        assert out[rank]["meta"] == {"note": "test"}
    task = make_task()
    load_weights(tmp / "out.ckpt", task)  # no process group: one unsharded process
    assert torch.equal(task.model.item_embedding.table().detach(), out[0]["saved_table"])
