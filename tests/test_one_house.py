"""Offline training and the stream share one training step and one export (issue 44): the same batch and weights give
the same loss and gradients bit for bit through RetrievalTask and the stream's Learner, and the same trained weights
exported by genrec-export and by the stream's HotExporter give the same vectors, manifest and top-10 of every test
user."""
from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch

from genrec.conf import compose_config
from genrec.data.batch import JaggedBatch
from genrec.embedding.dynamic import DynamicItemEmbedding
from genrec.export import cli as export_cli
from genrec.models.losses import SampledSoftmaxLoss
from genrec.models.recommender import SequentialRecommender
from genrec.models.sasrec import SASRec
from genrec.stream.exports import HotExporter, dense_histories
from genrec.stream.learner import Learner
from genrec.training.builders import load_run
from genrec.training.retrieval import RetrievalTask


def _model() -> SequentialRecommender:
    torch.manual_seed(0)
    return SequentialRecommender(DynamicItemEmbedding(num_items=40, dim=16, capacity=64, seed=3),
                                 SASRec(16, num_layers=1, num_heads=2, max_len=8, dropout=0.0), "cosine")


def _batch() -> JaggedBatch:
    generator = torch.Generator().manual_seed(1)
    offsets = torch.tensor([0, 5, 8, 14])
    items = torch.randint(1, 41, (14,), generator=generator)
    return JaggedBatch(items, offsets, torch.randint(1, 41, (14,), generator=generator), torch.arange(3))


@pytest.mark.parametrize("negatives", ["in_batch", "uniform"])
def test_the_offline_task_and_the_stream_learner_take_the_same_step(negatives):
    offline, online = _model().train(), _model().train()
    loss = SampledSoftmaxLoss(num_negatives=6, negatives=negatives, temperature=0.1)
    task, learner = RetrievalTask(offline, loss), Learner(online, loss)
    batch = _batch()
    examples = types.SimpleNamespace(batch=batch, mask=torch.ones(14, dtype=torch.bool))
    # the learner draws uniform negatives from the rows it holds: the task gets the same draw (the pool before the
    # step, the same global random state), as the stream's step is offline's with another source of negatives
    pool, state = learner.draw(examples), torch.get_rng_state()
    expected = learner.loss_of(examples)
    torch.set_rng_state(state)
    got = offline.training_loss(batch, loss, draw=pool) if negatives == "uniform" else task.training_loss(batch)
    assert torch.equal(got, expected)
    got.backward()
    expected.backward()
    for (name, a), b in zip(offline.named_parameters(), online.parameters()):
        assert torch.equal(a.grad, b.grad), name
    # the dynamic table's fused update ran in both backward passes
    assert torch.equal(offline.item_embedding.table(), online.item_embedding.table())
    names = {id(p): n for n, p in offline.named_parameters()} | {id(p): n for n, p in online.named_parameters()}
    groups = [[(names[id(p)], g["weight_decay"]) for p in g["params"]] for g in task.configure_optimizers().param_groups]
    assert groups == [[(names[id(p)], g["weight_decay"]) for p in g["params"]] for g in learner.optimizer.param_groups]
    assert groups[0] and groups[1]  # decay on the matrices, none on norms and biases


ONE_HOUSE_RUN = ["data.reader.num_users=200", "data.reader.num_items=90", "data.reader.num_clusters=6",
                 "data.max_len=12", "data.batch_size=4", "trainer.max_epochs=1", "trainer.enable_progress_bar=false",
                 "+trainer.enable_model_summary=false", "model.dim=16", "model.similarity=cosine",
                 "loss@model.loss=sampled", "model.loss.num_negatives=16", "embedding@model.embedding=dynamic",
                 "model.embedding.capacity=200",  # batches small enough that the loss names its IDs (never 0)
                 "baselines=[]", "threads=1"]


def test_genrec_export_and_the_stream_exporter_write_the_same_export(tmp_path):
    from genrec import train as train_entry

    run_dir = tmp_path / "run"
    train_entry.run(compose_config("train", ONE_HOUSE_RUN + [f"data.cache_dir={tmp_path / 'cache'}",
                                                             f"model.embedding.store.path={tmp_path / 'store'}"]),
                    run_dir)
    offline = export_cli.run(compose_config("export", [f"run_dir={run_dir}", f"out_dir={tmp_path / 'offline'}",
                                                       "onnx=false", "quantize=[]"]))
    cfg, datamodule, task = load_run(run_dir)
    export = compose_config("export")
    exporter = HotExporter(tmp_path / "stream", cfg.model.name, export.indexes, export.default_index, 1,
                           {"atol": export.parity.atol, "rtol": export.parity.rtol})
    batches = list(datamodule.test_dataloader())  # the test users' (truncated) histories, in one batch
    lengths = torch.cat([b.lengths for b in batches])
    histories = JaggedBatch(torch.cat([b.item_ids for b in batches]), torch.cat([torch.zeros(1, dtype=torch.int64),
                                                                                lengths.cumsum(0)]),
                            torch.zeros(0, dtype=torch.int64), torch.cat([b.user_ids for b in batches]))
    streamed = exporter.write(1, Learner(task.model, task.loss), histories, {"version": 1}, None, offline["source"])
    folder = exporter.path(1)

    assert streamed["model"] == offline["model"]  # the model's name included (b9ac798 labelled it by class)
    for section in ("retrieval", "skipped"):
        assert streamed[section] == offline[section]
    assert set(streamed["artifacts"]) == set(offline["artifacts"])
    tower = {k: v for k, v in offline["artifacts"]["user_tower"].items() if k not in ("sha256", "bytes", "parity",
                                                                                       "row_zero")}
    assert {k: streamed["artifacts"]["user_tower"][k] for k in tower} == tower
    # every item has a row here, and the table's raw IDs are the dataset's dense IDs: the same rows in the same order
    dense = json.loads((folder / "item_ids.json").read_text())[1:]
    assert dense == list(range(1, datamodule.data.num_items + 1))
    assert json.loads((tmp_path / "offline" / "item_ids.json").read_text())[1:] == \
        [r.item() if isinstance(r, np.generic) else r for r in datamodule.data.item_raw_ids[1:]]
    vectors = np.load(tmp_path / "offline" / "item_vectors.npy")
    assert np.array_equal(np.load(folder / "item_vectors.npy"), vectors)

    def top10(export_dir, batch: JaggedBatch) -> torch.Tensor:
        tower = torch.export.load(export_dir / "user_tower.pt2").module()
        queries = tower(batch.seen_ids, batch.seen_offsets)
        return (queries @ torch.from_numpy(np.load(export_dir / "item_vectors.npy")).T).topk(10).indices

    users = dense_histories(histories, np.array(dense))  # the identity here
    assert torch.equal(top10(tmp_path / "offline", users), top10(folder, users))
