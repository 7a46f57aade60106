"""Pipelined sparse input (genrec.dist.pipeline): on two gloo processes, TorchRec's TrainPipelineSparseDist gives
the losses and weights of the unpipelined step, within 1e-6 (observed: equal), for SASRec and HSTU.

One spawn runs every case. Per case three runs start from the same weights and random state:
- ``plain``: the unpipelined step on JaggedBatches (``model(batch)``, negatives drawn inside the step);
- ``unpipelined``: the same step on SparseBatches (candidates drawn by the data loader, lookup KJT ready);
- ``pipelined``: ``pipeline.progress`` over the same SparseBatches.
``plain`` equals the others where the step draws its candidates the same way: the full softmax (every item) and a
sampled softmax over a table smaller than its lookup (the loss gathers from the whole table and draws the
negatives in the step from the global random state, in both). Where the data loader draws the negatives
(SASRec's shared negatives, a larger table), ``pipelined`` is compared with ``unpipelined``.
"""
from __future__ import annotations

import traceback

import numpy as np
import pytest
import torch
import torch.distributed as dist

from genrec.data.batch import IndexedExamples, JaggedBatch, TrainSequences, collate
from genrec.data.candidates import DrawnBatch
from genrec.data.schema import SequenceData
from genrec.dist import ShardingConfig, SparseOptimizerConfig, shard_module
from genrec.dist.pipeline import SparseBatch, SparseCollate, sparse_batch, sparse_dist_pipeline
from genrec.embedding import ItemEmbedding
from genrec.errors import ConfigError
from genrec.models.hstu import HSTU
from genrec.models.losses import FullSoftmaxLoss, SampledSoftmaxLoss
from genrec.models.recommender import SequentialRecommender
from genrec.models.sasrec import SASRec
from genrec.training.retrieval import RetrievalTask
from tests.distributed.ranks import close_group, spawn_ranks

WORLD, DIM, STEPS, TOLERANCE = 2, 16, 5, 1e-6
#: name -> (encoder, loss, number of items, sharding); HSTU as published: cosine, per-position negatives, t=0.05
CASES = {
    "sasrec_full_row_wise": ("sasrec", "full", 40, "row_wise"),
    "sasrec_sampled_table_wise": ("sasrec", "sampled", 400, "table_wise"),
    "hstu_per_position_column_wise": ("hstu", "per_position", 40, "column_wise"),
}


def make_task(encoder: str, loss: str, num_items: int) -> RetrievalTask:
    torch.manual_seed(0)
    if encoder == "sasrec":
        net, similarity = SASRec(DIM, num_layers=1, num_heads=2, max_len=8, dropout=0.1), "dot"
    else:
        net, similarity = HSTU(DIM, num_layers=1, num_heads=2, attention_dim=8, hidden_dim=8, max_len=8,
                               dropout=0.1, time_bias=False, attention="jagged"), "cosine"
    losses = {"full": FullSoftmaxLoss(), "sampled": SampledSoftmaxLoss(num_negatives=16),
              "per_position": SampledSoftmaxLoss(num_negatives=8, per_position=True, temperature=0.05)}
    model = SequentialRecommender(ItemEmbedding(num_items, DIM, init_std=0.3), net, similarity=similarity)
    return RetrievalTask(model, losses[loss], lr=1e-2)


def rank_batch(step: int, rank: int, num_items: int) -> JaggedBatch:
    """Rank 0 gets 3 sequences, rank 1 gets 2 of other lengths (different position counts per rank)."""
    gen = torch.Generator().manual_seed(100 * step + rank)
    lengths = (5, 7, 3) if rank == 0 else (8, 4)
    seqs = [torch.randint(1, num_items + 1, (n,), generator=gen).tolist() for n in lengths]
    sizes = torch.tensor([len(s) - 1 for s in seqs])
    return JaggedBatch(item_ids=torch.tensor([i for s in seqs for i in s[:-1]]),
                       offsets=torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)]),
                       target_ids=torch.tensor([i for s in seqs for i in s[1:]]), user_ids=torch.arange(len(seqs)))


def _sparse(batch: JaggedBatch, loss, table, generator: torch.Generator):
    """``batch`` with its candidates drawn from ``generator`` and its lookup built (the pipelined loader's work)."""
    drawn = DrawnBatch(batch, loss.item_ids(batch.target_ids, table.num_embeddings - 1, generator=generator))
    return sparse_batch(drawn, table)


def train(case: str, path: str, rank: int) -> dict:
    encoder, loss, num_items, kind = CASES[case]
    task = make_task(encoder, loss, num_items)
    config = ShardingConfig(type=kind, optimizer=SparseOptimizerConfig(name="rowwise_adagrad", lr=0.1))
    model, _ = shard_module(task, config, torch.device("cpu"), local_world_size=WORLD)
    dense = task.configure_optimizers()
    table = task.model.item_embedding.tables.configs[0]
    batches = [rank_batch(step, rank, num_items) for step in range(STEPS)]
    sparse = [_sparse(b, task.loss, table, torch.Generator().manual_seed(10 * step + rank))
              for step, b in enumerate(batches)]
    torch.manual_seed(1)  # dropout, and negatives drawn in the step
    losses, pipelined = [], False
    if path == "pipelined":
        pipeline, batches_in = sparse_dist_pipeline(model, dense), iter(sparse)
        while True:
            try:
                losses.append(pipeline.progress(batches_in).loss)
            except StopIteration:
                break
        # TorchRec's tracer found the sharded collection reading the batch's KJT and rewired it
        pipelined = getattr(task.model.item_embedding.tables.collection, "is_pipelined", False)
        pipeline.detach()  # the collection's own forward back, for table() below
    else:
        for batch in batches if path == "plain" else sparse:
            out = model(batch)
            loss = out if path == "plain" else out[0]
            loss.backward()
            dense.step()
            dense.zero_grad()
            losses.append(loss.detach())
    totals = torch.stack(losses)
    dist.all_reduce(totals)
    with torch.no_grad():
        return {"losses": (totals / WORLD).tolist(), "table": task.model.item_embedding.table().clone(),
                "dense": [p.detach().clone() for p in task.model.encoder.parameters()],
                "candidates": [b.candidate_ids for b in sparse], "pipelined": pipelined}


def worker(rank: int, init_file: str, out_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    result = {}
    try:
        for case in CASES:
            for path in ("plain", "unpipelined", "pipelined"):
                result[(case, path)] = train(case, path, rank)
    except Exception:  # the parent shows the traceback of the failing rank
        result["traceback"] = traceback.format_exc()
    finally:
        torch.save(result, f"{out_file}.{rank}")
        close_group(succeeded="traceback" not in result)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pipeline")
    return spawn_ranks(worker, (str(tmp / "init"), str(tmp / "out")), tmp / "out", WORLD)


def _assert_same_training(got: dict, expected: dict) -> None:
    assert got["losses"] == pytest.approx(expected["losses"], abs=TOLERANCE)
    assert (got["table"] - expected["table"]).abs().max() <= TOLERANCE
    for a, b in zip(got["dense"], expected["dense"]):
        assert (a - b).abs().max() <= TOLERANCE


@pytest.mark.dist
@pytest.mark.parametrize("case", list(CASES))
def test_pipelined_training_equals_unpipelined(results, case):
    for rank in range(WORLD):
        runs = {path: results[rank][(case, path)] for path in ("plain", "unpipelined", "pipelined")}
        _assert_same_training(runs["pipelined"], runs["unpipelined"])
        if case != "sasrec_sampled_table_wise":
            _assert_same_training(runs["pipelined"], runs["plain"])
        assert len(runs["pipelined"]["losses"]) == STEPS and runs["pipelined"]["pipelined"]
        # the steps changed the table: unchanged tables would pass trivially
        initial = make_task(*CASES[case][:3]).model.item_embedding.table()
        assert not torch.allclose(runs["pipelined"]["table"], initial, atol=1e-3)


@pytest.mark.dist
def test_the_data_loader_drew_the_sampled_negatives(results):
    """With a table larger than the lookup the candidates are named in the batch: positives, then negatives."""
    candidates = results[0][("sasrec_sampled_table_wise", "pipelined")]["candidates"]
    batch = rank_batch(0, 0, 400)
    assert torch.equal(candidates[0][:len(batch.target_ids)], batch.target_ids)
    assert len(candidates[0]) == len(batch.target_ids) + 16
    assert not torch.equal(candidates[0][-16:], candidates[1][-16:])
    # the whole table where it is smaller than the lookup: nothing drawn by the loader
    assert results[0][("hstu_per_position_column_wise", "pipelined")]["candidates"][0] is None


def _sequences() -> SequenceData:
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 12, 30)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return SequenceData(name="toy", item_ids=rng.integers(1, 300, int(offsets[-1])), offsets=offsets,
                        timestamps=None, item_raw_ids=np.arange(300), user_raw_ids=np.arange(30))


def test_collate_draws_negatives_from_the_batch_indices_alone():
    """The same example indices give the same negatives, whatever was collated before; other indices others;
    the KJT holds the input items then the candidates; bad IDs raise naming the feature."""
    task = make_task("sasrec", "sampled", 299)
    table = task.model.item_embedding.tables.configs[0]
    dataset = IndexedExamples(TrainSequences(_sequences(), max_len=8))
    collate_fn = SparseCollate(task.loss, table, seed=3)
    first = collate_fn(dataset.__getitems__([4, 1, 7]))
    collate_fn(dataset.__getitems__([2, 3]))
    again = collate_fn(dataset.__getitems__([4, 1, 7]))
    other_seed = SparseCollate(task.loss, table, seed=4)(dataset.__getitems__([4, 1, 7]))
    assert isinstance(first, SparseBatch) and torch.equal(first.candidate_ids, again.candidate_ids)
    assert not torch.equal(first.candidate_ids, other_seed.candidate_ids)
    plain = collate([dataset.dataset[i] for i in (4, 1, 7)])
    assert torch.equal(first.batch.item_ids, plain.item_ids)
    assert torch.equal(first.features["item"].values(), plain.item_ids)
    assert torch.equal(first.features["item_candidates"].values(), first.candidate_ids)
    assert first.features["item_candidates"].lengths().tolist() == [len(first.candidate_ids), 0, 0]
    bad = collate([dataset.dataset[i] for i in (4, 1)])
    bad.item_ids[0] = 300
    with pytest.raises(ValueError, match="feature 'item': IDs must lie in"):
        _sparse(bad, task.loss, table, torch.Generator())


def _train_config(*overrides: str):
    from genrec.conf import compose_config

    return compose_config("train", overrides=["sharding=row_wise", "sharding.pipeline=sparse_dist", *overrides])


def test_the_config_switch_builds_the_pipelined_task_and_refuses_what_it_cannot_pipeline(tmp_path):
    from genrec.training.builders import build_task
    from genrec.training.retrieval import PipelinedRetrievalTask
    from genrec.training.fit import trainer_arguments

    cfg = _train_config()
    task = build_task(cfg, num_items=50)
    assert isinstance(task, PipelinedRetrievalTask) and not task.automatic_optimization
    assert task.gradient_clip_val == cfg.trainer.gradient_clip_val == 1.0
    assert "gradient_clip_val" not in trainer_arguments(cfg)  # clipped by the task (manual optimization)
    assert type(build_task(_train_config("sharding.pipeline=none"), num_items=50)) is RetrievalTask
    with pytest.raises(ConfigError, match="sharding.pipeline"):
        build_task(_train_config("embedding@model.embedding=dynamic", f"model.embedding.store.path={tmp_path}"),
                   num_items=50)
    with pytest.raises(ConfigError, match="sharding.pipeline.*must be one of"):
        ShardingConfig.from_config({"type": "row_wise", "pipeline": "semi_sync"})
    with pytest.raises(ConfigError, match="sharding.pipeline.*choose a sharding"):
        ShardingConfig.from_config({"type": None, "pipeline": "sparse_dist"})
