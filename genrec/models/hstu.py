"""HSTU (Zhai et al., 2024, "Actions Speak Louder than Words"): a stack of pointwise-attention blocks on jagged
sequences, with a relative attention bias from positions and time gaps.

One block (the paper's form)::

    x̂ = LayerNorm(x);  U, V, Q, K = SiLU(x̂ W)
    A = SiLU(Q Kᵀ + rab) / n   (causal, no softmax)
    out = x + W_o(Dropout(U ⊙ LayerNorm(A V)))

``variant="production"`` is the form of Meta's later code: learnable norms, a bias on ``W``, SiLU on ``U`` only and
``Q Kᵀ`` scaled by ``1/sqrt(d_qk)``. Inputs are ``embedding · sqrt(D) + learned absolute position`` (counted from
the oldest item of the window) with dropout, as in Meta's reference; there is no feed-forward block and no final
norm. The attention itself runs through the switch in :mod:`genrec.models.attention` (family ``"hstu"``).
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from genrec.errors import UserError
from genrec.models.attention import RelativeBias, check_name, resolve
from genrec.models.encoder import SequenceEncoder
from genrec.ops.hstu import pointwise_attention, time_bucket
from genrec.ops.jagged import JaggedLayout

DENOMINATORS = ("max_len", "length")
VARIANTS = ("paper", "production")


class HSTUBlock(nn.Module):
    """One HSTU layer on jagged ``(N, D)`` states. Owns its relative-bias weights (position and time), like Meta's."""

    def __init__(self, dim: int, num_heads: int, attention_dim: int, hidden_dim: int, dropout: float, max_len: int,
                 position_bias: bool, time_bias: bool, num_time_buckets: int, variant: str, eps: float = 1e-6):
        super().__init__()
        self.num_heads, self.attention_dim, self.hidden_dim = num_heads, attention_dim, hidden_dim
        self.variant, self.eps = variant, eps
        production = variant == "production"
        self.uvqk = nn.Linear(dim, 2 * num_heads * (hidden_dim + attention_dim), bias=production)
        nn.init.normal_(self.uvqk.weight, std=0.02)
        self.out = nn.Linear(num_heads * hidden_dim, dim)
        nn.init.xavier_uniform_(self.out.weight)
        self.input_norm = nn.LayerNorm(dim, eps=eps) if production else None
        self.output_norm = nn.LayerNorm(num_heads * hidden_dim, eps=eps) if production else None
        self.drop = nn.Dropout(dropout)
        self.position_bias = nn.Parameter(torch.randn(max_len) * 0.02) if position_bias else None
        self.time_bias = nn.Parameter(torch.randn(num_time_buckets + 1) * 0.02) if time_bias else None

    def _norm(self, x: torch.Tensor, norm: nn.LayerNorm | None) -> torch.Tensor:
        return norm(x) if norm is not None else F.layer_norm(x, x.shape[-1:], eps=self.eps)

    def forward(self, x: torch.Tensor, attend: Callable[..., torch.Tensor],
                output: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
        """``x (*, D)`` -> ``(*, D)`` for jagged ``(N, D)`` or padded ``(B, L, D)`` states. ``attend(q, k, v, block)``
        maps ``q, k (*, H, d_qk)``, ``v (*, H, d_v)`` to ``(*, H, d_v)`` with this block's bias weights; ``output``
        an implementation's fused ``u * LayerNorm(a)`` (see :class:`~genrec.models.attention.registry.AttentionImpl`)
        or ``None``. The dense parts around the attention are :meth:`project` and :meth:`combine`."""
        u, v, q, k = self.project(x)
        a = attend(q, k, v, self).flatten(-2)
        if output is None:
            return self.combine(x, u, a)
        norm = self.output_norm  # the implementation's fused u * LayerNorm(a)
        y = output(u, a, None if norm is None else norm.weight, None if norm is None else norm.bias, self.eps)
        return x + self.out(self.drop(y))

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x (*, D)`` -> ``u (*, H * d_v)`` and ``v (*, H, d_v)``, ``q, k (*, H, d_qk)``."""
        h = self.num_heads
        uvqk = self.uvqk(self._norm(x, self.input_norm))
        if self.variant == "paper":
            uvqk = F.silu(uvqk)
        u, v, q, k = uvqk.split([h * self.hidden_dim, h * self.hidden_dim, h * self.attention_dim,
                                 h * self.attention_dim], dim=-1)
        if self.variant == "production":
            u, q = F.silu(u), q / math.sqrt(self.attention_dim)
        return u, v.unflatten(-1, (h, -1)), q.unflatten(-1, (h, -1)), k.unflatten(-1, (h, -1))

    def combine(self, x: torch.Tensor, u: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """``x (*, D)``, ``u, a (*, H * d_v)`` -> ``x + W_o(Dropout(u * LayerNorm(a)))`` ``(*, D)``."""
        return x + self.out(self.drop(u * self._norm(a, self.output_norm)))


class HSTU(SequenceEncoder):
    """
    Args:
        dim: model and item-embedding width ``D``.
        num_layers / num_heads: depth and heads.
        attention_dim / hidden_dim: per-head widths of ``Q, K`` (``d_qk``) and of ``U, V`` (``d_v``).
        max_len: longest input sequence (position tables).
        dropout: on the inputs and on every block's output branch.
        position_bias / time_bias: the two parts of the relative attention bias. The time part needs timestamps;
            on data without them (e.g. Amazon Beauty) it is left out and only positions remain.
        num_time_buckets: time-gap buckets (128 in the paper).
        denominator: ``n`` in ``A = SiLU(·) / n`` — ``"max_len"`` (the padded length, as in Meta's code) or
            ``"length"`` (each sequence's own length).
        variant: ``"paper"`` or ``"production"`` (see the module doc).
        attention: implementation name for :mod:`genrec.models.attention`: ``auto``, ``padded`` (the reference),
            ``jagged`` or ``triton`` (genrec_kernels: CUDA, or CPU under ``TRITON_INTERPRET=1``).
    """

    def __init__(self, dim: int = 50, num_layers: int = 2, num_heads: int = 1, attention_dim: int = 50,
                 hidden_dim: int = 50, max_len: int = 200, dropout: float = 0.2, position_bias: bool = True,
                 time_bias: bool = True, num_time_buckets: int = 128, denominator: str = "max_len",
                 variant: str = "paper", attention: str = "auto"):
        super().__init__()
        if denominator not in DENOMINATORS:
            raise UserError(f"model.encoder.denominator must be one of {DENOMINATORS}, got {denominator!r}")
        if variant not in VARIANTS:
            raise UserError(f"model.encoder.variant must be one of {VARIANTS}, got {variant!r}")
        self.dim, self.max_len, self.denominator = dim, max_len, denominator
        self.num_time_buckets = num_time_buckets
        self.attention = check_name("hstu", attention)
        self.positions = nn.Embedding(max_len, dim)
        nn.init.xavier_normal_(self.positions.weight)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            HSTUBlock(dim, num_heads, attention_dim, hidden_dim, dropout, max_len, position_bias, time_bias,
                      num_time_buckets, variant) for _ in range(num_layers))

    def compile(self, *args, **kwargs) -> None:
        """``torch.compile`` (``compile=true``) in place, of every block's dense parts (:meth:`HSTUBlock.project`,
        :meth:`HSTUBlock.combine`) only: the jagged layout and the attention between them stay eager. Their shapes
        depend on the data (``repeat_interleave``, the longest sequence, fbgemm's jagged ops), so compiling the whole
        :meth:`forward` broke the graph 15 times a call of two layers."""
        for block in self.blocks:
            block.project = torch.compile(block.project, *args, **kwargs)
            block.combine = torch.compile(block.combine, *args, **kwargs)

    @property
    def uses_time(self) -> bool:
        """Whether the time part of the relative bias is on (it is used when a batch carries timestamps)."""
        return self.blocks[0].time_bias is not None

    def _scale(self, lengths: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """``(B,)`` the ``1 / n`` of every sequence (see ``denominator``)."""
        if self.denominator == "max_len":
            return like.new_full(lengths.shape, 1.0 / self.max_len)
        return 1.0 / lengths.to(like.dtype)

    def forward(self, embeddings: torch.Tensor, offsets: torch.Tensor, timestamps: torch.Tensor | None = None,
                query_timestamps: torch.Tensor | None = None) -> torch.Tensor:
        """``(N, D)`` jagged embeddings -> ``(N, D)`` states (see :class:`SequenceEncoder`)."""
        if (timestamps is None) != (query_timestamps is None):
            raise ValueError("HSTU needs timestamps and query_timestamps together (or neither)")
        layout = JaggedLayout(offsets)
        if layout.max_len > self.max_len:
            raise UserError(f"a sequence has {layout.max_len} items but HSTU was built with max_len={self.max_len}")
        impl = resolve("hstu", self.attention, embeddings)
        scale = self._scale(layout.lengths, embeddings)

        def attend(q, k, v, block: HSTUBlock) -> torch.Tensor:
            time = block.time_bias if timestamps is not None else None
            bias = RelativeBias(block.position_bias, time, timestamps, query_timestamps)
            bias = bias if bias.position is not None or bias.time is not None else None
            return impl.fn(q, k, v, layout, bias, scale)

        x = self.drop(embeddings * math.sqrt(self.dim) + self.positions(layout.index()[1]))
        for block in self.blocks:
            x = block(x, attend, impl.output)
        return x

    def forward_padded(self, x: torch.Tensor, lengths: torch.Tensor, timestamps: torch.Tensor | None = None,
                       query_timestamps: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, L, D)`` right-padded embeddings (oldest item at position 0, ``L <= max_len``), the real
        ``lengths (B,)`` and, for the time bias, right-padded ``timestamps, query_timestamps (B, L)`` int64 ->
        ``(B, L, D)`` states, through the padded reference attention: no data-dependent shape, so ``torch.export``
        can capture it (genrec/export/tower.py). Causality keeps the padding after a sequence away from its real
        positions, whose states equal :meth:`forward`'s."""
        if (timestamps is None) != (query_timestamps is None):
            raise ValueError("HSTU needs timestamps and query_timestamps together (or neither)")
        length = x.shape[1]
        scale = self._scale(lengths, x)
        buckets = None
        if timestamps is not None:  # (B, L, L): depends on the times only, shared by every layer
            buckets = time_bucket(query_timestamps[:, :, None] - timestamps[:, None, :], self.num_time_buckets)

        def attend(q, k, v, block: HSTUBlock) -> torch.Tensor:
            time = block.time_bias if buckets is not None else None
            rab = RelativeBias(block.position_bias, time).dense(length, buckets)
            out = pointwise_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), rab, scale)
            return out.transpose(1, 2)

        x = self.drop(x * math.sqrt(self.dim) + self.positions.weight[:length])
        for block in self.blocks:
            x = block(x, attend)
        return x
