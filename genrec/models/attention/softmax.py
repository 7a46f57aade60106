"""Causal softmax attention (SASRec) on right-padded ``(B, H, L, d)`` tensors: a plain reference, torch SDPA and
flash-attn's variable-length kernel."""
from __future__ import annotations

import importlib.util
import math

import torch
import torch.nn.functional as F

from genrec.models.attention.registry import register
from genrec.ops.jagged import jagged_index


def padded_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor,
                             dropout_p: float = 0.0) -> torch.Tensor:
    """The reference: ``softmax(q kᵀ / sqrt(d) + causal mask) v`` written out. ``(B, H, L, d)`` -> ``(B, H, L, d)``."""
    length = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
    weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    return F.dropout(weights, p=dropout_p) @ v


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor,
                   dropout_p: float = 0.0) -> torch.Tensor:
    """torch's fused ``scaled_dot_product_attention`` with its causal path (no key mask needed: a real position
    never attends to the right padding)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)


def flash_varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets: torch.Tensor,
                           dropout_p: float = 0.0) -> torch.Tensor:
    """flash-attn's ``flash_attn_varlen_func`` on the unpadded values (CUDA, fp16/bf16), padded back."""
    from flash_attn import flash_attn_varlen_func

    b, h, length, d = q.shape
    if offsets is None:  # every row full length
        offsets = torch.arange(b + 1, device=q.device) * length
    row, col = jagged_index(offsets)
    jagged = [t.transpose(1, 2)[row, col] for t in (q, k, v)]  # (N, H, d) each
    cu_seqlens = offsets.to(torch.int32)
    out = flash_attn_varlen_func(*jagged, cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens, max_seqlen_q=length,
                                 max_seqlen_k=length, dropout_p=dropout_p, causal=True)
    padded = out.new_zeros(b, length, h, d)
    padded[row, col] = out
    return padded.transpose(1, 2)


def _flash_available(t: torch.Tensor) -> bool:
    return (t.is_cuda and t.dtype in (torch.float16, torch.bfloat16)
            and importlib.util.find_spec("flash_attn") is not None)


register("softmax", "padded", padded_softmax_attention)
register("softmax", "sdpa", sdpa_attention, auto_rank=10)
register("softmax", "flash", flash_varlen_attention, available=_flash_available, auto_rank=0,
         requirement="CUDA tensors in fp16/bf16 and the flash_attn package")
