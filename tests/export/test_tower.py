"""The exported user tower reproduces SequentialRecommender.user_embeddings (torch.export, ONNX) for SASRec and
HSTU (with and without its time bias), and the FP16 / INT8 item tables read through FBGEMM's kernels."""
import sys

import pytest
import torch

from genrec.data.batch import JaggedBatch
from genrec.embedding import ItemEmbedding
from genrec.export.tower import QuantizedItemTable, UserTower, export_onnx, export_tower
from genrec.models.encoder import SequenceEncoder
from genrec.models.hstu import HSTU
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


def _hstu_model(similarity: str = "cosine", time_bias: bool = True) -> SequentialRecommender:
    torch.manual_seed(0)
    encoder = HSTU(DIM, num_layers=2, num_heads=2, attention_dim=8, hidden_dim=8, max_len=MAX_LEN, dropout=0.0,
                   time_bias=time_bias)
    return SequentialRecommender(ItemEmbedding(NUM_ITEMS, DIM, init_std=0.5), encoder, similarity).eval()


def _times(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Increasing times per history (gaps from seconds to weeks) and each user's request time."""
    generator = torch.Generator().manual_seed(2)
    times, requests = [], []
    for n in lengths:
        t = 10**9 + torch.randint(0, 10**6, (n + 1,), generator=generator).cumsum(0)
        times.append(t[:-1])
        requests.append(t[-1])
    return torch.cat(times), torch.stack(requests)


@torch.no_grad()
def _hstu_in_framework(model, ids, offsets, times, requests) -> torch.Tensor:
    """genrec's query vectors with time: the last MAX_LEN items, each position predicting the next item's time and
    the last one the request's (as EvalSequences builds query_timestamps)."""
    kept, kept_times, queries = [], [], []
    for b, (a, e) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist())):
        kept.append(ids[a:e][-MAX_LEN:])
        kept_times.append(times[a:e][-MAX_LEN:])
        queries.append(torch.cat([kept_times[-1][1:], requests[b:b + 1]]))
    lengths = torch.tensor([0] + [len(k) for k in kept])
    batch = JaggedBatch(torch.cat(kept), lengths.cumsum(0), None, None, timestamps=torch.cat(kept_times),
                        query_timestamps=torch.cat(queries))
    return model.user_embeddings(batch)


def test_hstu_forward_padded_equals_the_jagged_forward():
    model = _hstu_model()
    ids, offsets = _histories([3, MAX_LEN, 1])
    times, _ = _times([3, MAX_LEN, 1])
    queries = torch.cat([times[1:], times[-1:] + 5])
    lengths = offsets[1:] - offsets[:-1]
    with torch.no_grad():
        jagged = model.encoder(model.item_embedding.lookup(ids), offsets, times, queries)
        pad = lambda x: torch.stack([torch.nn.functional.pad(x[a:b], [0] * (2 * x.dim() - 1) + [MAX_LEN - (b - a)])
                                     for a, b in zip(offsets[:-1], offsets[1:])])
        padded = model.encoder.forward_padded(pad(model.item_embedding.lookup(ids)), lengths, pad(times), pad(queries))
    for b, (a, e) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist())):
        torch.testing.assert_close(padded[b, :e - a], jagged[a:e], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("time_bias", [True, False])
def test_exported_hstu_tower_matches_the_recommender(time_bias, tmp_path):
    model = _hstu_model(time_bias=time_bias)
    tower = UserTower(model, with_time=time_bias)
    torch.export.save(export_tower(tower, NUM_ITEMS), tmp_path / "tower.pt2")
    loaded = torch.export.load(tmp_path / "tower.pt2").module()
    for lengths in ([1], [MAX_LEN + 5], [2, MAX_LEN, 1, 3 * MAX_LEN, 5]):
        ids, offsets = _histories(lengths)
        times, requests = _times(lengths)
        with torch.no_grad():
            got = loaded(ids, offsets, times, requests) if time_bias else loaded(ids, offsets)
        expected = (_hstu_in_framework(model, ids, offsets, times, requests) if time_bias
                    else _in_framework(model, ids, offsets))
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    if time_bias:  # the request time matters: a later request changes the query
        with torch.no_grad():
            assert not torch.allclose(loaded(ids, offsets, times, requests + 10**7), got, atol=1e-4)


def test_onnx_hstu_tower_with_time_matches_the_recommender(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model = _hstu_model()
    assert export_onnx(UserTower(model, with_time=True), NUM_ITEMS, tmp_path / "tower.onnx") is None
    session = ort.InferenceSession(str(tmp_path / "tower.onnx"), providers=["CPUExecutionProvider"])
    lengths = [2, MAX_LEN, 3 * MAX_LEN]
    ids, offsets = _histories(lengths)
    times, requests = _times(lengths)
    got = session.run(None, {"item_ids": ids.numpy(), "offsets": offsets.numpy(), "timestamps": times.numpy(),
                             "query_time": requests.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(got), _hstu_in_framework(model, ids, offsets, times, requests),
                               atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype,bytes_per_row", [("fp16", 2 * DIM), ("int8", DIM + 4)])
def test_quantized_table_reads_fbgemms_rows(dtype, bytes_per_row):
    torch.manual_seed(0)
    weight = torch.randn(NUM_ITEMS + 1, DIM)
    table = QuantizedItemTable(weight, dtype)
    ids = torch.tensor([5, 0, NUM_ITEMS, 5])
    got = table(ids)
    rows = (NUM_ITEMS + 1) * bytes_per_row
    assert rows <= table.nbytes < rows + 256  # FBGEMM rounds its buffer up
    if dtype == "fp16":
        assert torch.equal(got, weight[ids].half().float())
    else:  # FBGEMM's row-wise dequantisation of its own format, within half a step of the float row
        fused = torch.ops.fbgemm.FloatToFusedNBitRowwiseQuantizedSBHalf(weight, 8)
        torch.testing.assert_close(got, torch.ops.fbgemm.FusedNBitRowwiseQuantizedSBHalfToFloat(fused, 8)[ids])
        step = (weight.max(1).values - weight.min(1).values)[ids, None] / 255
        assert ((got - weight[ids]).abs() <= 0.5 * step * 1.01 + 1e-3).all()


@pytest.mark.parametrize("dtype", ["fp16", "int8"])
def test_quantized_scores_stay_within_the_rounding_error(dtype):
    """Scores ``q · w`` against a quantised table are allclose to fp32's within the error its rounding allows:
    fp16 rounds each value to nearest (relative error <= 2^-11), so ``|Δscore| <= 2^-11 Σ_d |q_d w_d|``; int8 codes
    each row in 255 steps of ``(max - min) / 255`` with an fp16 scale and bias, so every value is within
    ``e = 0.505 step + 1e-3`` (half a step, plus the fp16 scale/bias rounding at |w| <= ~4) and
    ``|Δscore| <= e ||q||_1``."""
    torch.manual_seed(0)
    weight, queries = torch.randn(1000, 64), torch.randn(200, 64)
    table = QuantizedItemTable(weight, dtype)
    quantized = table(torch.arange(len(weight)))
    exact, scores = queries @ weight.T, queries @ quantized.T
    if dtype == "fp16":
        bound = 2.0 ** -11 * (queries.abs() @ weight.abs().T)
    else:
        step = (weight.max(1).values - weight.min(1).values) / 255
        bound = queries.abs().sum(1, keepdim=True) * (0.505 * step + 1e-3)[None, :]
    error = (scores - exact).abs()
    assert (error <= bound).all()
    assert error.max() > 0  # really quantised
    top = (scores.topk(10).indices[:, :, None] == exact.topk(10).indices[:, None, :]).any(2).float().mean()
    assert top > (0.99 if dtype == "fp16" else 0.9)  # recall@10 against fp32 exact search


@pytest.mark.parametrize("dtype", ["fp16", "int8"])
def test_quantized_tower_exports_and_stays_close(dtype, tmp_path):
    model = _hstu_model()
    tower = UserTower(model, with_time=True, table_dtype=dtype)
    torch.export.save(export_tower(tower, NUM_ITEMS), tmp_path / "tower.pt2")
    loaded = torch.export.load(tmp_path / "tower.pt2").module()
    ids, offsets = _histories([4, MAX_LEN + 2])
    times, requests = _times([4, MAX_LEN + 2])
    with torch.no_grad():
        got, eager = loaded(ids, offsets, times, requests), tower(ids, offsets, times, requests)
    torch.testing.assert_close(got, eager)  # the exported program runs FBGEMM's kernel like the module
    expected = _hstu_in_framework(model, ids, offsets, times, requests)
    assert (got - expected).abs().max() < (0.01 if dtype == "fp16" else 0.1)
