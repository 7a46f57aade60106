"""Two gloo processes on CPU: SASRec on a sharded dynamic item table (rows partitioned by raw-ID hash, each process
with its own tier 0 and store) trains like one process on the global batch; its checkpoint reloads in one process.

The reference is the same task in this process, with an unsharded dynamic table, trained on both ranks' sequences
together. Ranks get batches of different lengths (the loss normalisation by the global number of positions is
exercised); dense gradients are averaged by hand, as DDP does.
"""
from __future__ import annotations

import traceback

import pytest
import torch
import torch.distributed as dist

from genrec.embedding.dynamic import DynamicItemEmbedding, DynamicTable
from genrec.embedding.dynamic.checkpoint import load_checkpoint, save_checkpoint
from genrec.models.losses import FullSoftmaxLoss
from genrec.models.recommender import SequentialRecommender
from genrec.models.sasrec import SASRec
from genrec.training.retrieval import RetrievalTask
from tests.distributed.ranks import close_group, spawn_ranks
from tests.distributed.test_sharded_training import make_batch, rank_sequences

pytestmark = pytest.mark.dist

WORLD, NUM_ITEMS, DIM, STEPS = 2, 40, 16, 4


#: case -> (row optimizer, admission): min_count counts the input items only, on the shard that owns each one
CASES = {"rowwise_adagrad": ("rowwise_adagrad", {"policy": "always"}), "adam": ("adam", {"policy": "always"}),
         "min_count": ("rowwise_adagrad", {"policy": "min_count", "min_count": 2})}


def make_task(store: str | None, case: str) -> RetrievalTask:
    torch.manual_seed(0)
    optimizer, admission = CASES[case]
    embedding = DynamicItemEmbedding(NUM_ITEMS, DIM, capacity=64, init_std=0.3, seed=7, admission=admission,
                                     optimizer={"name": optimizer, "lr": 0.1}, store={"path": store})
    model = SequentialRecommender(embedding, SASRec(DIM, num_layers=1, num_heads=2, max_len=8, dropout=0.0))
    return RetrievalTask(model, FullSoftmaxLoss(), lr=1e-2)


def worker(rank: int, folder: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    result = {}
    try:
        for optimizer in CASES:
            task = make_task(f"{folder}/store-{optimizer}", optimizer)
            dense = task.configure_optimizers()
            losses = []
            for step in range(STEPS):
                loss = task.training_loss(make_batch(rank_sequences(step, rank)))
                loss.backward()
                for p in task.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= WORLD
                dense.step()
                dense.zero_grad()
                total = loss.detach().clone()
                dist.all_reduce(total)
                losses.append(total.item() / WORLD)
            task.eval()
            result[optimizer] = {"losses": losses, "table": task.model.all_item_vectors().clone(),
                                 "dense": task.model.encoder.blocks[0].ffn[0].weight.detach().clone(),
                                 "admitted": task.model.item_embedding.counters()["admitted"]}
            if optimizer == "adam":
                emb = task.model.item_embedding
                result["local_ids"] = sorted(emb.local_table.index.items()[0].tolist())
                save_checkpoint({"item": emb.local_table}, f"{folder}/ckpt", barrier=dist.barrier,
                                is_rank_zero=rank == 0)
            task.model.item_embedding.close()
    except Exception:  # the parent shows the traceback of the failing rank
        result["traceback"] = traceback.format_exc()
    finally:
        torch.save(result, f"{folder}/out.{rank}")
        close_group(succeeded="traceback" not in result)


def reference(optimizer: str, store: str) -> dict:
    task = make_task(store, optimizer)
    dense = task.configure_optimizers()
    losses = []
    for step in range(STEPS):
        loss = task.training_loss(make_batch(rank_sequences(step, 0) + rank_sequences(step, 1)))
        loss.backward()
        dense.step()
        dense.zero_grad()
        losses.append(loss.item())
    task.eval()
    out = {"losses": losses, "table": task.model.all_item_vectors(),
           "dense": task.model.encoder.blocks[0].ffn[0].weight.detach().clone(),
           "admitted": task.model.item_embedding.counters()["admitted"]}
    task.model.item_embedding.close()
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dynamic_dist")
    return spawn_ranks(worker, (str(folder),), folder / "out", WORLD), folder


@pytest.mark.parametrize("optimizer", list(CASES))
def test_two_processes_train_like_one_on_the_global_batch(results, optimizer, tmp_path):
    out, _ = results
    expected = reference(optimizer, str(tmp_path / "store"))
    assert sum(out[rank][optimizer]["admitted"] for rank in range(WORLD)) == expected["admitted"]
    if optimizer == "min_count":
        assert 0 < expected["admitted"] < NUM_ITEMS  # only items seen twice as inputs, whatever the loss scored
    for rank in range(WORLD):
        got = out[rank][optimizer]
        assert got["losses"] == pytest.approx(expected["losses"], abs=1e-5)
        torch.testing.assert_close(got["table"], expected["table"], rtol=0, atol=1e-5)
        torch.testing.assert_close(got["dense"], expected["dense"], rtol=0, atol=1e-5)


def test_rows_are_partitioned_and_the_checkpoint_reloads_in_one_process(results, tmp_path):
    out, folder = results
    shards = [set(r["local_ids"]) for r in out]
    assert shards[0] and shards[1] and not shards[0] & shards[1]
    assert shards[0] | shards[1] == set(range(1, NUM_ITEMS + 1))  # every item trained (full softmax), once
    task = make_task(str(tmp_path / "store"), "adam")
    table = task.model.item_embedding.local_table
    assert isinstance(table, DynamicTable)
    load_checkpoint({"item": table}, folder / "ckpt")
    task.eval()
    torch.testing.assert_close(task.model.all_item_vectors(), out[0]["adam"]["table"], rtol=0, atol=0)
    task.model.item_embedding.close()
