"""The exported user tower reproduces SequentialRecommender.user_embeddings (torch.export, ONNX)."""
import sys

import pytest
import torch

from genrec.data.batch import JaggedBatch
from genrec.embedding import ItemEmbedding
from genrec.export.tower import UserTower, export_onnx, export_tower
from genrec.models.encoder import SequenceEncoder
from genrec.models.recommender import SequentialRecommender
from genrec.models.sasrec import SASRec

NUM_ITEMS, DIM, MAX_LEN = 60, 16, 8


def _model(similarity: str) -> SequentialRecommender:
    torch.manual_seed(0)
    return SequentialRecommender(ItemEmbedding(NUM_ITEMS, DIM, init_std=0.5), SASRec(DIM, max_len=MAX_LEN),
                                 similarity).eval()


def _histories(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1, NUM_ITEMS + 1, (sum(lengths),), generator=generator)
    return ids, torch.tensor([0] + lengths).cumsum(0)


@torch.no_grad()
def _in_framework(model: SequentialRecommender, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """genrec's query vectors, with the most recent MAX_LEN items kept as EvalSequences does."""
    kept = [ids[a:b][-MAX_LEN:] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    lengths = torch.tensor([0] + [len(k) for k in kept])
    return model.user_embeddings(JaggedBatch(torch.cat(kept), lengths.cumsum(0), None, None))


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
def test_exported_tower_matches_the_recommender(similarity, tmp_path):
    model = _model(similarity)
    torch.export.save(export_tower(UserTower(model), NUM_ITEMS), tmp_path / "tower.pt2")
    loaded = torch.export.load(tmp_path / "tower.pt2").module()
    # one user, several users with histories shorter, equal to and longer than max_len
    for lengths in ([1], [3], [MAX_LEN + 5], [2, MAX_LEN, 1, 3 * MAX_LEN, 5]):
        ids, offsets = _histories(lengths)
        with torch.no_grad():
            got = loaded(ids, offsets)
        expected = _in_framework(model, ids, offsets)
        assert got.shape == (len(lengths), DIM)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
        if similarity == "cosine":
            torch.testing.assert_close(got.norm(dim=1), torch.ones(len(lengths)))


def test_onnx_tower_matches_the_recommender(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model = _model("dot")
    assert export_onnx(UserTower(model), NUM_ITEMS, tmp_path / "tower.onnx") is None
    session = ort.InferenceSession(str(tmp_path / "tower.onnx"), providers=["CPUExecutionProvider"])
    for lengths in ([1], [2, MAX_LEN, 3 * MAX_LEN]):
        ids, offsets = _histories(lengths)
        got = session.run(None, {"item_ids": ids.numpy(), "offsets": offsets.numpy()})[0]
        torch.testing.assert_close(torch.from_numpy(got), _in_framework(model, ids, offsets), atol=1e-5, rtol=1e-4)


def test_onnx_is_skipped_with_a_reason_when_the_exporter_is_missing(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # makes `import onnxscript` raise ImportError
    reason = export_onnx(UserTower(_model("dot")), NUM_ITEMS, tmp_path / "tower.onnx")
    assert "onnxscript is not installed" in reason
    assert not (tmp_path / "tower.onnx").exists()
    assert reason in caplog.text


class _NoPaddedPath(SequenceEncoder):
    dim = DIM

    def forward(self, embeddings, offsets, timestamps=None, query_timestamps=None):
        return embeddings


def test_an_encoder_without_a_padded_path_is_refused():
    model = SequentialRecommender(ItemEmbedding(NUM_ITEMS, DIM), _NoPaddedPath())
    with pytest.raises(ValueError, match="_NoPaddedPath cannot be exported.*forward_padded"):
        UserTower(model)
