"""DynamicItemEmbedding in the models: SASRec trains through a real Lightning Trainer with RetrievalTask exactly as
on the static table (same init rule, same row optimizer), HSTU trains on it, evaluation reads every item, the
state dict round-trips, and the config group instantiates (bad values are one-line ConfigErrors)."""
import math

import lightning as L
import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

from genrec.conf import compose_config
from genrec.data.batch import JaggedBatch
from genrec.embedding import ItemEmbedding
from genrec.embedding.dynamic import DynamicItemEmbedding
from genrec.embedding.dynamic.hashing import init_rows
from genrec.errors import ConfigError
from genrec.models.hstu import HSTU
from genrec.models.losses import FullSoftmaxLoss, SampledSoftmaxLoss
from genrec.models.recommender import SequentialRecommender
from genrec.models.sasrec import SASRec
from genrec.training.retrieval import RetrievalTask

NUM_ITEMS, DIM, INIT_STD, SPARSE_LR = 30, 16, 0.2, 0.05


def _batches(count: int) -> list[JaggedBatch]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(count):
        seqs = [torch.randint(1, NUM_ITEMS + 1, (int(n),), generator=gen).tolist() for n in (6, 4, 7)]
        lengths = torch.tensor([len(s) - 1 for s in seqs])
        out.append(JaggedBatch(item_ids=torch.tensor([i for s in seqs for i in s[:-1]]),
                               offsets=torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]),
                               target_ids=torch.tensor([i for s in seqs for i in s[1:]]),
                               user_ids=torch.arange(len(seqs))))
    return out


def _static_embedding() -> ItemEmbedding:
    """The static table with the dynamic table's init rule (row i from (seed 0, ID i)) and Adagrad applied in the
    backward pass (TorchRec's apply_optimizer_in_backward, so RetrievalTask leaves it out of AdamW)."""
    emb = ItemEmbedding(NUM_ITEMS, DIM, init_std=INIT_STD)
    weight = emb.tables.collection.embeddings[emb.table_name].weight
    with torch.no_grad():
        weight.copy_(torch.from_numpy(init_rows(np.arange(NUM_ITEMS + 1), DIM, 0, math.sqrt(3) * INIT_STD)))
    apply_optimizer_in_backward(torch.optim.Adagrad, [weight], {"lr": SPARSE_LR, "eps": 1e-8})
    return emb


def _dynamic_embedding(**settings) -> DynamicItemEmbedding:
    return DynamicItemEmbedding(NUM_ITEMS, DIM, capacity=NUM_ITEMS + 1, init_std=INIT_STD,
                                optimizer={"name": "adagrad", "lr": SPARSE_LR}, **settings)


def _fit(embedding, steps: int = 6) -> RetrievalTask:
    torch.manual_seed(0)
    model = SequentialRecommender(embedding, SASRec(DIM, num_layers=1, num_heads=2, max_len=8, dropout=0.0))
    task = RetrievalTask(model, FullSoftmaxLoss(), lr=1e-2)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(task, torch.utils.data.DataLoader(_batches(steps), batch_size=None))
    return task


def test_sasrec_trains_through_lightning_exactly_as_on_the_static_table():
    static, dynamic = _fit(_static_embedding()), _fit(_dynamic_embedding())
    assert dynamic.model.item_embedding.counters()["steps"] == 6  # one table step per training step
    static_table, dynamic_table = static.model.all_item_vectors(), dynamic.model.all_item_vectors()
    initial = torch.from_numpy(init_rows(np.arange(NUM_ITEMS + 1), DIM, 0, math.sqrt(3) * INIT_STD))
    assert (dynamic_table[1:] - initial[1:]).abs().max() > 1e-2  # the rows were trained
    torch.testing.assert_close(dynamic_table[1:], static_table[1:], rtol=0, atol=1e-6)
    for (name, p), q in zip(static.model.encoder.named_parameters(), dynamic.model.encoder.parameters()):
        if name.endswith("qkv.bias"):  # the key bias's gradient is 0 up to rounding, which AdamW's step amplifies
            p, q = torch.cat([p[:DIM], p[2 * DIM:]]), torch.cat([q[:DIM], q[2 * DIM:]])
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6, msg=name)


def test_evaluation_reads_every_item_and_changes_nothing():
    task = _fit(_dynamic_embedding(admission={"policy": "min_count", "min_count": 1000},
                                   default={"kind": "unknown"}), steps=2)
    emb = task.model.item_embedding
    task.eval()
    before = dict(emb.counters())
    table = emb.table()
    assert table.shape == (NUM_ITEMS + 1, DIM) and emb.counters() == before
    unknown = emb.local_table.weight[NUM_ITEMS + 1]
    assert all(torch.equal(row, unknown) for row in table)  # nothing admitted: every item reads the trained default
    ids = torch.tensor([[3, 4]])
    assert torch.equal(emb.lookup(ids), table[ids])


def test_state_dict_round_trip_continues_identically():
    task = _fit(_dynamic_embedding(), steps=3)
    state = task.state_dict()
    twin = _fit(_dynamic_embedding(), steps=0)
    twin.load_state_dict(state)
    assert torch.equal(twin.model.all_item_vectors(), task.model.all_item_vectors())
    for t in (task, twin):
        t.train()
        t.training_loss(_batches(1)[0]).backward()
    assert torch.equal(twin.model.all_item_vectors(), task.model.all_item_vectors())


def test_hstu_trains_on_the_dynamic_table_with_sampled_negatives():
    torch.manual_seed(0)
    emb = _dynamic_embedding(admission={"policy": "always"})
    model = SequentialRecommender(emb, HSTU(DIM, num_layers=1, num_heads=1, attention_dim=8, hidden_dim=8,
                                            max_len=8, dropout=0.0, time_bias=False), similarity="cosine")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn, batch, losses = SampledSoftmaxLoss(num_negatives=8, temperature=0.1), _batches(1)[0], []
    for _ in range(30):
        loss = model.training_loss(batch, loss_fn)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("name,kind", [("static", ItemEmbedding), ("dynamic", DynamicItemEmbedding)])
def test_embedding_configs_instantiate(name, kind, tmp_path):
    cfg = compose_config("train", [f"embedding@model.embedding={name}", "model.dim=8"])
    emb = instantiate(cfg.model.embedding, num_items=20)
    assert isinstance(emb, kind) and emb.dim == 8 and emb.num_embeddings == 21
    if name == "dynamic":
        cfg = compose_config("train", ["embedding@model.embedding=dynamic", f"model.embedding.store.path={tmp_path}",
                                       "model.embedding.eviction.policy=lfu",
                                       "model.embedding.admission.policy=min_count"])
        emb = instantiate(cfg.model.embedding, num_items=20)
        assert emb.config.store.path == str(tmp_path) and emb.config.eviction.policy == "lfu"


@pytest.mark.parametrize("override,key", [
    ("model.embedding.capacity=0", "embedding.capacity"),
    ("model.embedding.eviction.policy=fifo", "embedding.eviction.policy"),
    ("model.embedding.admission.policy=sometimes", "embedding.admission.policy"),
    ("model.embedding.store.path=/etc/hostname/store", "embedding.store.path"),
    ("model.embedding.optimizer.name=lamb", "embedding.optimizer.name"),
    ("+model.embedding.eviction.ttl_seconds=5", "embedding.eviction.ttl_seconds"),
])
def test_bad_dynamic_configs_name_the_key_in_one_line(override, key):
    cfg = compose_config("train", ["embedding@model.embedding=dynamic", override])
    with pytest.raises(Exception) as caught:
        instantiate(cfg.model.embedding, num_items=20)
    error = caught.value
    while not isinstance(error, ConfigError) and error.__cause__ is not None:  # Hydra wraps it
        error = error.__cause__
    assert isinstance(error, ConfigError) and error.key == key
    assert str(error).startswith(f"{key}: ") and "\n" not in str(error)


def test_module_prefetch_maps_the_next_step_ahead_with_the_same_result(tmp_path):
    """A manual loop that prefetches step i + 1 (inputs and all items of the full softmax) before training step i,
    with a store configured: the same as without prefetching (tier moves under prefetching: test_dynamic_tiers)."""
    batches = _batches(6)
    results = []
    for depth in (0, 1):
        torch.manual_seed(0)
        emb = _dynamic_embedding(prefetch_depth=depth, store={"path": str(tmp_path / str(depth))})
        model = SequentialRecommender(emb, SASRec(DIM, num_layers=1, num_heads=2, max_len=8, dropout=0.0)).train()
        opt, loss_fn = torch.optim.Adam(model.encoder.parameters(), lr=1e-2), FullSoftmaxLoss()
        items = lambda b: loss_fn.item_ids(b.target_ids, NUM_ITEMS)  # noqa: E731 (deterministic: every item)
        if depth:
            emb.prefetch(batches[0].to_kjt(), items(batches[0]))
        for i, batch in enumerate(batches):
            if depth and i + 1 < len(batches):
                emb.prefetch(batches[i + 1].to_kjt(), items(batches[i + 1]))
            loss = model.training_loss(batch, loss_fn)
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert emb.counters()["steps"] == len(batches)
        model.eval()
        results.append(model.all_item_vectors())
        emb.close()
    assert torch.equal(results[0], results[1])


@pytest.mark.parametrize("admission", [{"policy": "min_count", "min_count": 2},
                                       {"policy": "probability", "probability": 1.0}])
def test_only_input_items_count_towards_admission(admission):
    """The full softmax scores every item at every step: those candidate lookups are not occurrences, so an item
    gets a row once it occurred `min_count` times as an input (or, under `probability`, only when it occurred)."""
    emb = _dynamic_embedding(admission=admission).train()
    model = SequentialRecommender(emb, SASRec(DIM, num_layers=1, num_heads=2, max_len=8, dropout=0.0))
    loss_fn, seen = FullSoftmaxLoss(), {}
    for batch in _batches(3):
        model.training_loss(batch, loss_fn).backward()
        for i in batch.item_ids.tolist():
            seen[i] = seen.get(i, 0) + 1
        expected = {i for i, n in seen.items() if n >= admission.get("min_count", 1)}
        table = emb.local_table
        has_row = {i for i in range(NUM_ITEMS + 1) if table.index.find(np.array([i]))[0] >= 0}
        assert has_row == expected and len(expected) < NUM_ITEMS
