"""One conformance test for every item table behind :class:`genrec.embedding.ItemEmbeddingInterface`: the static
TorchRec table and the dynamic one answer the interface's calls alike (shapes, lookups that agree with each other and
with ``table()``, one training step that changes exactly the rows it read), and a recommender trains on either."""
from __future__ import annotations

import pytest
import torch

from genrec.data.batch import JaggedBatch
from genrec.embedding import ItemEmbedding, ItemEmbeddingInterface
from genrec.embedding.dynamic import DynamicItemEmbedding
from genrec.export.retrieval import ExportedItems
from genrec.models.losses import SampledSoftmaxLoss
from genrec.models.recommender import SequentialRecommender
from genrec.models.sasrec import SASRec

NUM_ITEMS, DIM = 30, 8
KINDS = {
    "static": lambda: ItemEmbedding(NUM_ITEMS, DIM, init_std=0.5),
    "dynamic": lambda: DynamicItemEmbedding(NUM_ITEMS, DIM, capacity=64, init_std=0.5,
                                            optimizer={"name": "sgd", "lr": 0.1}),
    "exported (frozen)": lambda: ExportedItems(torch.randn(NUM_ITEMS + 1, DIM)),
}


def _features(ids: list[list[int]]):
    lengths = torch.tensor([len(s) for s in ids])
    values = torch.tensor([i for s in ids for i in s])
    return JaggedBatch(values, torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]), values,
                       torch.arange(len(ids))).to_kjt()


def _step(embedding: ItemEmbeddingInterface, features, items: torch.Tensor) -> None:
    """One training step on a squared-norm loss: the table's own fused update, or SGD on its parameters."""
    embedding.train()
    inputs, candidates = embedding.forward_with_items(features, items)
    optimizer = torch.optim.SGD(list(embedding.parameters()), lr=0.1) if list(embedding.parameters()) else None
    (inputs.square().sum() + candidates.square().sum()).backward()
    if optimizer is not None:
        optimizer.step()
    embedding.eval()


@pytest.mark.parametrize("kind", KINDS, ids=KINDS)
def test_every_item_table_answers_the_interface_alike(kind):
    torch.manual_seed(0)
    embedding = KINDS[kind]().eval()
    assert isinstance(embedding, ItemEmbeddingInterface)
    assert embedding.num_embeddings == NUM_ITEMS + 1 and embedding.dim == DIM
    assert torch.equal(embedding.all_ids, torch.arange(NUM_ITEMS + 1))
    features, items = _features([[3, 4, 5], [7], [3, 9]]), torch.tensor([[1, 2], [9, 30]])
    with torch.no_grad():
        inputs, candidates = embedding.forward_with_items(features, items)
        table = embedding.table().clone()
        assert inputs.shape == (6, DIM) and candidates.shape == (2, 2, DIM) and table.shape == (NUM_ITEMS + 1, DIM)
        assert torch.equal(embedding(features), inputs)
        assert torch.equal(embedding.lookup(torch.tensor([3, 4, 5, 7, 3, 9])), inputs)
        assert torch.equal(table[items], candidates)
    embedding.set_event_time(100)
    assert isinstance(embedding.counters(), dict)
    if kind.startswith("exported"):
        return  # frozen: nothing to train
    _step(embedding, features, items)
    with torch.no_grad():
        after = embedding.table()
    changed = (after != table).any(1).nonzero().flatten().tolist()
    assert changed == [1, 2, 3, 4, 5, 7, 9, 30]


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_a_recommender_trains_on_every_item_table(kind):
    torch.manual_seed(0)
    model = SequentialRecommender(KINDS[kind](), SASRec(DIM, 1, 2, max_len=6, dropout=0.0), "cosine").train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    batch = JaggedBatch(torch.tensor([1, 2, 3, 1, 2, 3]), torch.tensor([0, 3, 6]), torch.tensor([2, 3, 4, 2, 3, 4]),
                        torch.arange(2))
    loss = SampledSoftmaxLoss(num_negatives=5, negatives="uniform")
    first = model.training_loss(batch, loss)
    for _ in range(20):
        optimizer.zero_grad()
        model.training_loss(batch, loss).backward()
        optimizer.step()
    assert float(model.training_loss(batch, loss)) < float(first)
