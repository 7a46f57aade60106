"""SASRec (Kang & McAuley, 2018): a causal transformer over the item sequence, on torch SDPA.

Pre-norm blocks (LayerNorm -> causal multi-head self-attention -> residual; LayerNorm -> feed-forward -> residual),
learned absolute positions counted from the oldest item of the (truncated) window, a final LayerNorm.
Sequences are right-padded inside the encoder only: with causal attention a real position never attends to a
padded one, so no key-padding mask is needed and SDPA can take its fused causal path. The attention runs through
the switch in :mod:`genrec.models.attention` (family ``"softmax"``): ``auto`` is flash-attn's variable-length
kernel on CUDA fp16/bf16 when ``flash_attn`` is installed, SDPA otherwise; ``padded`` is the written-out reference.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from genrec.errors import UserError
from genrec.models.attention import check_name, resolve
from genrec.models.encoder import SequenceEncoder
from genrec.ops.jagged import jagged_to_padded, padded_to_jagged

if TYPE_CHECKING:
    from genrec.models.backbones import TokenBackbone


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, dropout: float, attention: str = "auto"):
        super().__init__()
        if dim % num_heads:
            raise UserError(f"dim={dim} must be divisible by num_heads={num_heads}")
        self.num_heads, self.dropout, self.attention = num_heads, dropout, check_name("softmax", attention)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, offsets: torch.Tensor | None) -> torch.Tensor:
        """``(B, L, D)`` right-padded, ``offsets (B + 1,)`` or ``None`` (every row full) -> ``(B, L, D)``."""
        b, l, d = x.shape
        q, k, v = self.qkv(x).view(b, l, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        attend = resolve("softmax", self.attention, q).fn
        y = attend(q, k, v, offsets, self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(b, l, d))


class SASRecBlock(nn.Module):
    def __init__(self, dim: int, num_heads: int, ffn_dim: int, dropout: float, attn_dropout: float,
                 attention: str = "auto"):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, num_heads, attn_dropout, attention)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_dim), nn.GELU(), nn.Linear(ffn_dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offsets: torch.Tensor | None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x), offsets))
        return x + self.drop(self.ffn(self.norm2(x)))


class SASRec(SequenceEncoder):
    """
    Args:
        dim: model width ``D`` (equal to the item-embedding dimension).
        num_layers / num_heads: transformer depth and heads.
        max_len: longest input sequence (size of the position table).
        ffn_dim: feed-forward hidden width (defaults to ``dim``, as in the SASRec paper).
        dropout: dropout on the input embeddings and on both residual branches of every block.
        attn_dropout: dropout on attention probabilities (off by default: on CPU its random mask is the most
            expensive op of a block).
        attention: implementation name for :mod:`genrec.models.attention` (``auto``, ``sdpa``, ``flash``,
            ``padded``).
    """

    def __init__(self, dim: int = 64, num_layers: int = 2, num_heads: int = 2, max_len: int = 50,
                 ffn_dim: int | None = None, dropout: float = 0.2, attn_dropout: float = 0.0,
                 attention: str = "auto"):
        super().__init__()
        self.dim, self.max_len = dim, max_len
        self.positions = nn.Embedding(max_len, dim)
        nn.init.normal_(self.positions.weight, std=0.02)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(SASRecBlock(dim, num_heads, ffn_dim or dim, dropout, attn_dropout, attention)
                                    for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(dim)

    def compile(self, *args, **kwargs) -> None:
        """``torch.compile`` (``compile=true``) in place, of the dense stack :meth:`forward_padded` only: the jagged
        <-> padded conversion around it stays eager. Its shapes depend on the data (the longest sequence,
        ``repeat_interleave``), so compiling the whole :meth:`forward` broke the graph 6 times a call."""
        self.forward_padded = torch.compile(self.forward_padded, *args, **kwargs)

    def cached_backbone(self) -> "TokenBackbone":
        """SASRec is a GPT-style pre-norm transformer: decoding keeps a KV cache over its own weights."""
        from genrec.models.backbones import CachedSASRec

        return CachedSASRec(self)

    def forward(self, embeddings: torch.Tensor, offsets: torch.Tensor, timestamps: torch.Tensor | None = None,
                query_timestamps: torch.Tensor | None = None) -> torch.Tensor:
        """``(N, D)`` jagged embeddings -> ``(N, D)`` states; timestamps are not used by SASRec."""
        longest = int((offsets[1:] - offsets[:-1]).max())
        if longest > self.max_len:
            raise UserError(f"a sequence has {longest} items but SASRec was built with max_len={self.max_len}")
        padded = jagged_to_padded(embeddings, offsets, longest)
        return padded_to_jagged(self.forward_padded(padded, offsets[1:] - offsets[:-1]), offsets)

    def forward_padded(self, x: torch.Tensor, lengths: torch.Tensor | None = None,
                       timestamps: torch.Tensor | None = None, query_timestamps: torch.Tensor | None = None
                       ) -> torch.Tensor:
        """``(B, L, D)`` right-padded embeddings (oldest item at position 0, ``L <= max_len``) -> ``(B, L, D)``
        states. Real positions never see the padding after them, so ``L`` may exceed the longest sequence: the
        export wrapper (genrec/export/tower.py) pads every sequence to ``max_len`` to avoid data-dependent shapes.
        ``lengths (B,)`` give the real lengths to attention implementations that use them (flash-attn's varlen
        kernel); without them every row counts as full, which gives real positions the same result. Timestamps are
        not used by SASRec."""
        offsets = None if lengths is None else torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        x = self.drop(x * math.sqrt(self.dim) + self.positions.weight[:x.shape[1]])
        for block in self.blocks:
            x = block(x, offsets)
        return self.final_norm(x)
