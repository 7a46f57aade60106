"""Scores of sampled candidates, one row of candidates per query, without the gathered ``(M, K, D)`` rows.

``sampled_logits(queries, table, candidates)[m, k] = queries[m] · table[candidates[m, k]]``. Written out, it
gathers ``M · K`` rows of ``table`` (1.8M rows of 50 floats for a batch of HSTU with 128 negatives per position),
and its backward materialises their gradient too. Here the forward is a sampled dense-dense product
(``torch.sparse.sampled_addmm`` over the ``(M, V)`` CSR pattern of the candidates) and the backward is two
embedding-bag passes with the output gradient as per-sample weights: ``grad_queries[m] = sum_k g[m, k] ·
table[candidates[m, k]]`` (``F.embedding_bag``) and ``grad_table[v] = sum_{candidates[m, k] = v} g[m, k] ·
queries[m]`` (FBGEMM's dense table-batched-embedding backward on CPU, ``F.embedding_bag``'s own backward
elsewhere). Nothing of size ``M · K · D`` is ever allocated.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F


def _csr_pattern(candidates: torch.Tensor, num_rows: int, dtype: torch.dtype) -> torch.Tensor:
    """The ``(M, num_rows)`` CSR matrix with ``K`` entries per row at ``candidates (M, K)`` (duplicates and any
    column order allowed), all values zero."""
    m, k = candidates.shape
    crow = torch.arange(0, m * k + 1, k, device=candidates.device, dtype=torch.int64)
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, candidates.reshape(-1), candidates.new_zeros(m * k, dtype=dtype),
                                       (m, num_rows), check_invariants=False)


def _table_gradient(grad: torch.Tensor, queries: torch.Tensor, candidates: torch.Tensor, table_shape: torch.Size
                    ) -> torch.Tensor:
    """``(V, D)``: ``sum over (m, k) with candidates[m, k] = v`` of ``grad[m, k] · queries[m]``."""
    m, k = candidates.shape
    rows, dim = table_shape
    flat, offsets = candidates.reshape(-1), torch.arange(0, m * k + 1, k, device=candidates.device)
    if queries.device.type == "cpu" and queries.dtype == torch.float32:
        import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm)

        one = torch.zeros(1, dtype=torch.int64)
        out = torch.ops.fbgemm.split_embedding_backward_codegen_dense_cpu(
            queries.contiguous(), queries.new_empty(rows * dim), one, torch.tensor([0, dim], dtype=torch.int32),
            dim, torch.tensor([0, rows], dtype=torch.int64), int(rows).bit_length(), flat, offsets,
            0, grad.reshape(-1).contiguous())  # pooling mode 0: sum
        return out.view(rows, dim)
    table = torch.zeros(table_shape, dtype=queries.dtype, device=queries.device, requires_grad=True)
    with torch.enable_grad():
        bags = F.embedding_bag(flat, table, offsets[:-1], mode="sum", per_sample_weights=grad.reshape(-1))
        return torch.autograd.grad(bags, table, queries)[0]


class _SampledLogits(torch.autograd.Function):
    @staticmethod
    def forward(ctx, queries: torch.Tensor, table: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(queries, table, candidates)
        pattern = _csr_pattern(candidates, len(table), queries.dtype)
        return torch.sparse.sampled_addmm(pattern, queries, table.T, beta=0.0).values().view(candidates.shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        queries, table, candidates = ctx.saved_tensors
        grad = grad.contiguous()
        grad_queries = grad_table = None
        if ctx.needs_input_grad[0]:
            grad_queries = F.embedding_bag(candidates, table, mode="sum", per_sample_weights=grad)
        if ctx.needs_input_grad[1]:
            grad_table = _table_gradient(grad, queries, candidates, table.shape)
        return grad_queries, grad_table, None


def sampled_logits(queries: torch.Tensor, table: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """``queries (M, D)``, ``table (V, D)``, ``candidates (M, K)`` int64 rows of ``table`` -> ``(M, K)`` logits
    ``queries[m] · table[candidates[m, k]]``, differentiable in ``queries`` and ``table`` (see the module doc).
    Computed in float32 (float64 when both inputs are). With at least as many candidates per query as table rows,
    every row is scored (``queries @ table.T``, ``(M, V)``) and the candidates picked from it: less work then."""
    dtype = torch.float64 if queries.dtype == table.dtype == torch.float64 else torch.float32
    queries, table = queries.to(dtype), table.to(dtype)
    if candidates.shape[1] >= len(table):
        return (queries @ table.T).gather(1, candidates)
    return _SampledLogits.apply(queries, table, candidates)
