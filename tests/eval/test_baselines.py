"""Baselines by hand on a tiny dataset; they count training parts only."""
import numpy as np
import pandas as pd
import pytest
import torch

from genrec.data.batch import EvalSequences, collate
from genrec.data.preprocess import PreprocessConfig, build_sequences
from genrec.data.schema import InteractionLog
from genrec.eval.baselines import SemanticKNN
from genrec.models.counts import ItemTransitions, MostPopular, item_popularity


@pytest.fixture()
def data():
    # raw items are their dense IDs (1..5 sorted). Training parts: u0 [1,2,3], u1 [1,2], u2 [4,2,3].
    seqs = {"u0": [1, 2, 3, 4, 5], "u1": [1, 2, 5, 4], "u2": [4, 2, 3, 1, 5]}
    rows = [(u, i) for u, s in seqs.items() for i in s]
    return build_sequences(InteractionLog("toy", pd.DataFrame(rows, columns=["user", "item"])),
                           PreprocessConfig(1, 1))


def test_popularity_counts_training_parts_only(data):
    assert item_popularity(data).tolist() == [0, 2, 3, 2, 1, 0]
    batch = collate([EvalSequences(data, 10, "test")[0]])
    assert MostPopular(data)(batch).tolist() == [[0, 2, 3, 2, 1, 0]]


def test_first_order_transitions(data):
    model = ItemTransitions(data, num_last=1)
    # pairs in training parts: 1->2 (x2), 2->3 (x2), 4->2 (x1)
    dense = model.counts.toarray()
    assert dense[1, 2] == 2 and dense[2, 3] == 2 and dense[4, 2] == 1 and dense.sum() == 5
    batch = collate([EvalSequences(data, 10, "valid")[u] for u in range(3)])  # last items: 3, 2, 3
    scores = model(batch).numpy()
    fill = item_popularity(data) / (1 + 3) * 1e-3
    np.testing.assert_allclose(scores[1], dense[2] + fill, rtol=1e-6)
    assert scores[1].argmax() == 3
    # item 3 has no successors: popularity alone orders the ranking
    np.testing.assert_allclose(scores[0], fill, rtol=1e-6)
    assert scores[0].argmax() == 2


def test_last_items_with_skip_transitions(data):
    model = ItemTransitions(data, num_last=2, decay=0.5, skip=True, skip_weight=0.25)
    dense = model.counts.toarray()
    assert dense[1, 3] == 0.25 and dense[4, 3] == 0.25  # skip-one pairs: 1..3 (u0), 4..3 (u2)
    batch = collate([EvalSequences(data, 10, "test")[0]])  # u0 history [1, 2, 3, 4]: voters 4 then 3
    fill = item_popularity(data) / 4 * 1e-3
    np.testing.assert_allclose(model(batch)[0].numpy(), dense[4] + 0.5 * dense[3] + fill, rtol=1e-6)


def test_semantic_knn_votes_by_content_similarity_to_the_last_items(data):
    """``score(i) = sum_j 0.5**j cos(e(h_-1-j), e(i))`` over the last three items, by hand; it counts no interaction,
    so an item never in a training part (5) scores like any other."""
    embeddings = np.array([[1, 0], [1, 1], [0, 1], [-1, 0], [1, -1]], dtype=np.float32)  # items 1..5
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    knn = SemanticKNN(data, embeddings)
    batch = collate([EvalSequences(data, 10, "test")[u] for u in range(3)])  # histories [1,2,3,4], [1,2,5], [4,2,3,1]
    scores = knn(batch).numpy()
    for row, history in enumerate([[1, 2, 3, 4], [1, 2, 5], [4, 2, 3, 1]]):
        expected = sum(0.5 ** j * unit @ unit[item - 1] for j, item in enumerate(reversed(history[-3:])))
        np.testing.assert_allclose(scores[row, 1:], expected, rtol=1e-5, atol=1e-6)
        assert scores[row, 0] == float("-inf")
    assert item_popularity(data)[5] == 0 and np.isfinite(scores[:, 5]).all()  # never trained, scored by content
    with pytest.raises(ValueError, match="2 rows for 5 items"):
        SemanticKNN(data, embeddings[:2])
