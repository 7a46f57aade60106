"""The user tower (query encoder) as a plain-tensor module that ``torch.export`` can capture.

In genrec a user's query vector is ``SequentialRecommender.user_embeddings``: TorchRec lookup of the jagged
history, the sequence encoder, the state after the most recent item, L2-normalised for cosine similarity. That
path takes a :class:`JaggedBatch` and a KeyedJaggedTensor and pads to the batch's longest sequence, a
data-dependent shape ``torch.export`` cannot capture. :class:`UserTower` computes the same vectors from plain
tensors: it looks items up in a dense copy of the item table, keeps the most recent ``max_len`` items of each
sequence (as genrec's evaluation does) and pads every sequence to the fixed length ``max_len``, so every shape
depends only on the input sizes ``N`` and ``B``. With causal attention the padding after a sequence never
reaches its real positions, so the outputs equal the in-framework ones (checked by :func:`tower_parity`).
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from genrec.errors import UserError
from genrec.models.recommender import SequentialRecommender

log = logging.getLogger("genrec.export")

#: Inputs of the exported tower, in call order (recorded in the manifest).
TOWER_INPUTS = [
    {"name": "item_ids", "shape": ["N"], "dtype": "int64",
     "meaning": "dense item IDs (1..num_items) of every user's history, user after user, oldest first"},
    {"name": "offsets", "shape": ["B + 1"], "dtype": "int64",
     "meaning": "sequence boundaries: user b's history is item_ids[offsets[b]:offsets[b + 1]]; every history "
                "non-empty"},
]


class UserTower(nn.Module):
    """``(item_ids (N,), offsets (B + 1,))`` -> ``(B, D)`` query vectors, equal to
    ``SequentialRecommender.user_embeddings`` on the same histories.

    Args:
        model: a trained recommender whose encoder has ``forward_padded((B, L, D)) -> (B, L, D)`` and ``max_len``.
    """

    def __init__(self, model: SequentialRecommender):
        super().__init__()
        encoder = model.encoder
        if not hasattr(encoder, "forward_padded") or not hasattr(encoder, "max_len"):
            raise UserError(f"{type(encoder).__name__} cannot be exported: the encoder needs forward_padded() "
                            "and max_len (see genrec/models/sasrec.py)")
        self.encoder, self.max_len, self.cosine = encoder, int(encoder.max_len), model.similarity == "cosine"
        self.register_buffer("item_table", model.item_embedding.table().detach().clone())

    def forward(self, item_ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        lengths = offsets[1:] - offsets[:-1]  # (B,)
        batch, total = lengths.shape[0], item_ids.shape[0]
        # row[i]: the user of position i = how many sequence ends lie at or before i (no repeat_interleave,
        # which the ONNX exporter cannot take with a symbolic output size)
        ends = torch.zeros(total + 1, dtype=torch.int64, device=item_ids.device)
        row = ends.index_add(0, offsets[1:], torch.ones_like(offsets[1:]))[:total].cumsum(0)
        # position counted from the oldest kept item; items older than the last max_len go to a scratch column
        col = torch.arange(total, device=item_ids.device) - offsets[:-1][row]
        col = col - (lengths[row] - self.max_len).clamp(min=0)
        col = torch.where(col < 0, torch.full_like(col, self.max_len), col)
        padded = self.item_table.new_zeros(batch, self.max_len + 1, self.item_table.shape[1])
        padded = padded.index_put((row, col), self.item_table[item_ids])[:, :self.max_len]  # (B, max_len, D)
        states = self.encoder.forward_padded(padded)
        last = lengths.clamp(max=self.max_len) - 1  # (B,)
        query = states[torch.arange(batch, device=item_ids.device), last]
        return F.normalize(query, dim=-1) if self.cosine else query


def example_inputs(num_items: int, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two histories (one longer than ``max_len``) to trace with; sizes are made dynamic by :func:`export_tower`."""
    long = max_len + 3
    ids = torch.arange(long + 2, dtype=torch.int64) % num_items + 1
    return ids, torch.tensor([0, long, long + 2], dtype=torch.int64)


def export_tower(tower: UserTower, num_items: int) -> torch.export.ExportedProgram:
    """``torch.export`` the tower with dynamic ``N`` (history items) and ``B`` (users)."""
    n, b = torch.export.Dim("N", min=1), torch.export.Dim("B_plus_1", min=2)
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        return torch.export.export(tower.eval(), example_inputs(num_items, tower.max_len),
                                   dynamic_shapes={"item_ids": {0: n}, "offsets": {0: b}}, strict=False)


def export_onnx(tower: UserTower, num_items: int, path: Path) -> str | None:
    """Write the tower as ONNX (opset from the exporter) if ``onnx`` and ``onnxscript`` are installed.

    Returns ``None`` on success, else the reason it was skipped (logged, never raised)."""
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as err:
        reason = f"ONNX export skipped: {err.name} is not installed (pip install 'genrec[export]')"
        log.warning(reason)
        return reason
    n, b = torch.export.Dim("N", min=1), torch.export.Dim("B_plus_1", min=2)
    logging.getLogger("onnx_ir").setLevel(logging.WARNING)  # one INFO line per deduplicated initializer
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        program = torch.onnx.export(tower.eval(), example_inputs(num_items, tower.max_len), dynamo=True,
                                    dynamic_shapes={"item_ids": {0: n}, "offsets": {0: b}}, verbose=False,
                                    input_names=["item_ids", "offsets"], output_names=["query"])
    program.save(str(path))
    return None
