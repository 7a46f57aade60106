"""The user tower (query encoder) as a plain-tensor module that ``torch.export`` can capture, and the item table in
FP16 or row-wise INT8 through FBGEMM's quantised embedding kernels.

In genrec a user's query vector is ``SequentialRecommender.user_embeddings``: TorchRec lookup of the jagged
history, the sequence encoder, the state after the most recent item, L2-normalised for cosine similarity. That
path takes a :class:`JaggedBatch` and a KeyedJaggedTensor and pads to the batch's longest sequence, a
data-dependent shape ``torch.export`` cannot capture. :class:`UserTower` computes the same vectors from plain
tensors: it looks items up in a copy of the item table, keeps the most recent ``max_len`` items of each sequence
(as genrec's evaluation does) and pads every sequence to the fixed length ``max_len``, so every shape depends only
on the input sizes ``N`` and ``B``. With causal attention the padding after a sequence never reaches its real
positions, so the outputs equal the in-framework ones (checked by ``genrec.export.retrieval.tower_parity``). Both
encoders qualify: SASRec and HSTU (its padded reference attention, with the time bias when the run's data had
timestamps: the tower then also takes every item's time and the time of the request).
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from genrec.data.batch import JaggedBatch
from genrec.errors import UserError
from genrec.models.recommender import SequentialRecommender

log = logging.getLogger("genrec.export")

#: Inputs of the exported tower, in call order (recorded in the manifest); TIME_INPUTS follow for HSTU with time.
TOWER_INPUTS = [
    {"name": "item_ids", "shape": ["N"], "dtype": "int64",
     "meaning": "dense item IDs (1..num_items) of every user's history, user after user, oldest first"},
    {"name": "offsets", "shape": ["B + 1"], "dtype": "int64",
     "meaning": "sequence boundaries: user b's history is item_ids[offsets[b]:offsets[b + 1]]; every history "
                "non-empty"},
]
TIME_INPUTS = [
    {"name": "timestamps", "shape": ["N"], "dtype": "int64", "meaning": "seconds of every history item"},
    {"name": "query_time", "shape": ["B"], "dtype": "int64",
     "meaning": "seconds of the request (the time of the event to predict), per user"},
]
#: item-table precisions of the exported tower and item vectors (FBGEMM SparseType names)
TABLE_DTYPES = ("fp32", "fp16", "int8")


class QuantizedItemTable(nn.Module):
    """An item table stored as FBGEMM's inference table-batched embedding rows (``int8``: ``D`` bytes + fp16 scale
    and bias per row, row-wise; ``fp16``: ``2 D`` bytes), read by FBGEMM's CPU kernel
    (``int_nbit_split_embedding_codegen_lookup_function``, the op behind TorchRec's quantised inference
    collections) called directly, so that ``torch.export`` captures it.

    Args:
        weight: ``(V, D)`` float table.
        dtype: ``"fp16"`` or ``"int8"``.
    """

    def __init__(self, weight: torch.Tensor, dtype: str):
        super().__init__()
        from fbgemm_gpu.split_embedding_configs import SparseType
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
        from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen

        if dtype not in ("fp16", "int8"):
            raise UserError(f"quantised table dtype must be fp16 or int8, got {dtype!r}")
        rows, self.dim = weight.shape
        kind = SparseType.INT8 if dtype == "int8" else SparseType.FP16
        tbe = IntNBitTableBatchedEmbeddingBagsCodegen([("items", rows, self.dim, kind, EmbeddingLocation.HOST)],
                                                      pooling_mode=PoolingMode.NONE, device="cpu",
                                                      output_dtype=SparseType.FP32)
        tbe.initialize_weights()  # allocates the rows, overwritten below
        values, scale_bias = tbe.split_embedding_weights()[0]
        weight = weight.detach().float().cpu().contiguous()
        if dtype == "int8":  # FBGEMM's row-wise quantisation: [D uint8 | fp16 scale | fp16 bias] per row
            fused = torch.ops.fbgemm.FloatToFusedNBitRowwiseQuantizedSBHalf(weight, 8)
            values.copy_(fused[:, :self.dim])
            scale_bias.copy_(fused[:, self.dim:])
        else:
            values.copy_(weight.half().view(torch.uint8))
        for name in ("weights_host", "weights_offsets", "weights_tys", "D_offsets", "weights_placements"):
            self.register_buffer(name, getattr(tbe, name).clone())
        self._sizes = {name: getattr(tbe, name) for name in (
            "total_D", "max_int2_D", "max_int4_D", "max_int8_D", "max_float16_D", "max_float32_D", "max_float8_D",
            "row_alignment", "fp8_exponent_bits", "fp8_exponent_bias", "output_dtype")}

    @property
    def nbytes(self) -> int:
        """Bytes of the stored rows (scale and bias included)."""
        return self.weights_host.numel() * self.weights_host.element_size()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """``(N,)`` int64 row IDs -> ``(N, D)`` float32 rows."""
        return torch.ops.fbgemm.int_nbit_split_embedding_codegen_lookup_function(
            dev_weights=self.weights_host, uvm_weights=self.weights_host.new_empty(0),
            weights_placements=self.weights_placements, weights_offsets=self.weights_offsets,
            weights_tys=self.weights_tys, D_offsets=self.D_offsets, indices=ids,
            offsets=torch.arange(ids.shape[0] + 1, dtype=ids.dtype, device=ids.device), pooling_mode=2,  # NONE
            indice_weights=None, lxu_cache_weights=self.weights_host.new_empty(0, 0),
            lxu_cache_locations=torch.empty(0, dtype=torch.int32), **self._sizes).view(-1, self.dim)


def item_table(weight: torch.Tensor, dtype: str) -> nn.Module:
    """``weight (V, D)`` as a lookup module ``(N,) -> (N, D)``: plain float32 rows, or :class:`QuantizedItemTable`."""
    if dtype == "fp32":
        return nn.Embedding.from_pretrained(weight.detach().float().clone(), freeze=True)
    return QuantizedItemTable(weight, dtype)


class UserTower(nn.Module):
    """``(item_ids (N,), offsets (B + 1,)[, timestamps (N,), query_time (B,)])`` -> ``(B, D)`` query vectors, equal to
    ``SequentialRecommender.user_embeddings`` on the same histories (for ``table_dtype="fp32"``).

    Args:
        model: a trained recommender whose encoder is exportable (``SequenceEncoder.forward_padded``).
        with_time: HSTU trained on data with timestamps: the tower takes the items' times and the request's.
        table_dtype: the item table the tower looks the history up in (:data:`TABLE_DTYPES`).
    """

    def __init__(self, model: SequentialRecommender, with_time: bool = False, table_dtype: str = "fp32"):
        super().__init__()
        encoder = model.encoder
        if not encoder.exportable:
            raise UserError(f"{type(encoder).__name__} cannot be exported: the encoder needs forward_padded() "
                            "(see genrec/models/encoder.py)")
        if table_dtype not in TABLE_DTYPES:
            raise UserError(f"table_dtype must be one of {TABLE_DTYPES}, got {table_dtype!r}")
        self.encoder, self.max_len, self.similarity = encoder, int(encoder.max_len), model.similarity
        self.with_time, self.table_dtype = with_time, table_dtype
        self.items = item_table(model.item_embedding.table(), table_dtype)
        self.dim = model.item_embedding.dim

    @property
    def input_names(self) -> list[str]:
        return [i["name"] for i in self.inputs]

    @property
    def inputs(self) -> list[dict]:
        return TOWER_INPUTS + (TIME_INPUTS if self.with_time else [])

    def _pad(self, values: torch.Tensor, row: torch.Tensor, col: torch.Tensor, batch: int) -> torch.Tensor:
        """``values (N, *F)`` -> ``(B, max_len, *F)`` at ``(row, col)``; column ``max_len`` is the scratch column
        of the items older than the kept window."""
        padded = values.new_zeros(batch, self.max_len + 1, *values.shape[1:])
        return padded.index_put((row, col), values)[:, :self.max_len]

    def forward(self, item_ids: torch.Tensor, offsets: torch.Tensor, timestamps: torch.Tensor | None = None,
                query_time: torch.Tensor | None = None) -> torch.Tensor:
        lengths = offsets[1:] - offsets[:-1]  # (B,)
        batch, total = lengths.shape[0], item_ids.shape[0]
        # row[i]: the user of position i = how many sequence ends lie at or before i (no repeat_interleave,
        # which the ONNX exporter cannot take with a symbolic output size)
        ends = torch.zeros(total + 1, dtype=torch.int64, device=item_ids.device)
        row = ends.index_add(0, offsets[1:], torch.ones_like(offsets[1:]))[:total].cumsum(0)
        # position counted from the oldest kept item; items older than the last max_len go to a scratch column
        position = torch.arange(total, device=item_ids.device)
        col = position - offsets[:-1][row]
        col = col - (lengths[row] - self.max_len).clamp(min=0)
        col = torch.where(col < 0, torch.full_like(col, self.max_len), col)
        kept = lengths.clamp(max=self.max_len)  # (B,)
        padded = self._pad(self.items(item_ids), row, col, batch)  # (B, max_len, D)
        if self.with_time:
            # the time each position predicts: the next item's, the request's after the last item
            last = position == offsets[1:][row] - 1
            following = torch.cat([timestamps[1:], timestamps[:1]])
            query = torch.where(last, query_time[row], following)
            states = self.encoder.forward_padded(padded, kept, self._pad(timestamps, row, col, batch),
                                                 self._pad(query, row, col, batch))
        else:
            states = self.encoder.forward_padded(padded, kept)
        query = states[torch.arange(batch, device=item_ids.device), kept - 1]
        return self.similarity.prepare(query)


def tower_inputs(tower: UserTower, batch: JaggedBatch) -> tuple[torch.Tensor, ...]:
    """The tower's inputs for an evaluation batch's users: each user's whole history (``seen_ids``: the tower
    truncates), or, with time, the batch's (already truncated) inputs, their times and the target's time."""
    if not tower.with_time:
        return batch.seen_ids, batch.seen_offsets
    return batch.item_ids, batch.offsets, batch.timestamps, batch.query_timestamps[batch.last_positions()]


def example_inputs(num_items: int, tower: UserTower) -> tuple[torch.Tensor, ...]:
    """Two histories (one longer than ``max_len``) to trace with; sizes are made dynamic by :func:`export_tower`."""
    long = tower.max_len + 3
    ids = torch.arange(long + 2, dtype=torch.int64) % num_items + 1
    offsets = torch.tensor([0, long, long + 2], dtype=torch.int64)
    if not tower.with_time:
        return ids, offsets
    times = 10**9 + 60 * torch.arange(long + 2, dtype=torch.int64)
    return ids, offsets, times, times[offsets[1:] - 1] + 60


def _dynamic_shapes(tower: UserTower) -> dict:
    n = torch.export.Dim("N", min=1)
    if not tower.with_time:
        return {"item_ids": {0: n}, "offsets": {0: torch.export.Dim("B_plus_1", min=2)}}
    b = torch.export.Dim("B", min=1)
    return {"item_ids": {0: n}, "offsets": {0: b + 1}, "timestamps": {0: n}, "query_time": {0: b}}


def export_tower(tower: UserTower, num_items: int) -> torch.export.ExportedProgram:
    """``torch.export`` the tower with dynamic ``N`` (history items) and ``B`` (users)."""
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        return torch.export.export(tower.eval(), example_inputs(num_items, tower),
                                   dynamic_shapes=_dynamic_shapes(tower), strict=False)


def export_onnx(tower: UserTower, num_items: int, path: Path) -> str | None:
    """Write the tower as ONNX (opset from the exporter) if ``onnx`` and ``onnxscript`` are installed (float32
    tables only: ONNX has no FBGEMM kernels).

    Returns ``None`` on success, else the reason it was skipped (logged, never raised)."""
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as err:
        reason = f"ONNX export skipped: {err.name} is not installed (pip install 'genrec[export]')"
        log.warning(reason)
        return reason
    logging.getLogger("onnx_ir").setLevel(logging.WARNING)  # one INFO line per deduplicated initializer
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        program = torch.onnx.export(tower.eval(), example_inputs(num_items, tower), dynamo=True,
                                    dynamic_shapes=_dynamic_shapes(tower), verbose=False,
                                    input_names=tower.input_names, output_names=["query"])
    program.save(str(path))
    return None
