"""Triton kernels of HSTU's jagged causal attention, forward and backward, with the relative attention bias
(position and time bucket) computed inside the kernel:

    s_ij = q_i·k_j + pos[i - j] + time[bucket(query_ts_i - ts_j)],   out_i = sum_{j <= i} SiLU(s_ij) · scale_b · v_j

for ``i, j`` positions within one sequence ``b`` (``bucket`` as :func:`genrec.ops.hstu.time_bucket`, in
float32). One program handles one block of ``BLOCK_M`` queries (forward, dQ) or ``BLOCK_N`` keys (dK, dV) of one
sequence and one head; it visits only the blocks on or below the diagonal of its own sequence, so the work follows
``sum_b n_b²`` and nothing is padded. The bias gradients are summed with atomic adds (fp32), after a reduction
within each tile (per distance, per time bucket).

Under ``TRITON_INTERPRET=1`` (set before this module is imported) the kernels run on CPU tensors through Triton's
interpreter, with fixed small blocks; on CUDA the block sizes are autotuned (2 candidates per kernel) per length
bucket, head dims, bias parts and dtype.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction


@triton.jit
def _time_bucket(QTS, TS, start, offs_m, offs_n, mask_m, mask_n, num_buckets):
    """``(BLOCK_M, BLOCK_N)`` int32 bucket of the gap between query ``offs_m``'s time and key ``offs_n``'s."""
    qt = tl.load(QTS + start + offs_m, mask=mask_m, other=0)
    kt = tl.load(TS + start + offs_n, mask=mask_n, other=0)
    gap = tl.maximum(tl.abs(qt[:, None] - kt[None, :]), 1).to(tl.float32)
    return tl.minimum((tl.log(gap) / 0.301).to(tl.int32), num_buckets)


@triton.jit
def _biased_scores(q, k, POS, TIME, QTS, TS, start, offs_m, offs_n, mask_m, mask_n, num_buckets,
                   HAS_POS: tl.constexpr, HAS_TIME: tl.constexpr, PRECISION: tl.constexpr):
    """One tile's ``s = q kᵀ + rab`` for queries ``offs_m`` and keys ``offs_n`` of the sequence at ``start``:
    ``q (BLOCK_M, d_qk)``, ``k (BLOCK_N, d_qk)`` -> ``s`` fp32, ``valid`` (causal and in range) and the time
    ``bucket`` of every pair (all ``(BLOCK_M, BLOCK_N)``; ``bucket`` is meaningless without the time part)."""
    dist = offs_m[:, None] - offs_n[None, :]
    valid = (dist >= 0) & mask_m[:, None] & mask_n[None, :]
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    bucket = dist
    if HAS_POS:
        s += tl.load(POS + tl.maximum(dist, 0), mask=valid, other=0.0)
    if HAS_TIME:
        bucket = _time_bucket(QTS, TS, start, offs_m, offs_n, mask_m, mask_n, num_buckets)
        s += tl.load(TIME + bucket, mask=valid, other=0.0)
    return s, valid, bucket


@triton.jit
def _add_position_grad(DPOS, ds, m0, n0, n, BLOCK: tl.constexpr):
    """``DPOS[i - j] += ds[i, j]`` for the square tile of queries ``i = m0 + r``, keys ``j = n0 + c``: the tile's
    diagonals are summed first (a gather skews each into a column), so there is one atomic add per distance rather
    than one per pair."""
    rows, cols = tl.arange(0, BLOCK)[:, None], tl.arange(0, BLOCK)
    skewed = tl.gather(ds, (rows - cols[None, :] + BLOCK) % BLOCK, axis=1)  # [r, c'] = ds[r, (r - c') mod BLOCK]
    below = tl.sum(tl.where(rows >= cols[None, :], skewed, 0.0), axis=0)  # r - c = c'
    above = tl.sum(tl.where(rows < cols[None, :], skewed, 0.0), axis=0)  # r - c = c' - BLOCK
    distance = m0 - n0 + cols
    tl.atomic_add(DPOS + distance, below, mask=(distance >= 0) & (distance < n))
    tl.atomic_add(DPOS + distance - BLOCK, above, mask=(distance >= BLOCK) & (distance - BLOCK < n))


@triton.jit
def _add_time_grad(DTIME, ds, bucket, valid):
    """``DTIME[bucket] += ds`` over a tile, one atomic add per bucket present in it (``ds`` is 0 where not
    ``valid``). A tile spans few buckets, and atomic adds of many pairs to one bucket would queue on one address."""
    lo = tl.min(tl.where(valid, bucket, 2**30))
    hi = tl.max(tl.where(valid, bucket, -1))
    for t in range(lo, hi + 1):
        tl.atomic_add(DTIME + t, tl.sum(tl.where(bucket == t, ds, 0.0)))


@triton.jit
def _hstu_fwd(Q, K, V, OUT, OFFSETS, SCALE, POS, TIME, TS, QTS,
              stride_qn, stride_qh, stride_kn, stride_kh, stride_vn, stride_vh, stride_on, stride_oh,
              num_buckets, L_KEY,
              D_QK: tl.constexpr, D_V: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
              HAS_POS: tl.constexpr, HAS_TIME: tl.constexpr, PRECISION: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Grid ``(cdiv(max_len, BLOCK_M), B, H)``: ``OUT[queries of the block, h]``."""
    pid_m, b, h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(OFFSETS + b)
    n = tl.load(OFFSETS + b + 1) - start
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < n
    offs_dqk, offs_dv = tl.arange(0, BLOCK_DQK), tl.arange(0, BLOCK_DV)
    q = tl.load(Q + (start + offs_m)[:, None] * stride_qn + h * stride_qh + offs_dqk[None, :],
                mask=mask_m[:, None] & (offs_dqk[None, :] < D_QK), other=0.0)
    scale = tl.load(SCALE + b).to(tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    hi = tl.where(m0 < n, tl.minimum(m0 + BLOCK_M, n), 0)  # keys up to the block's last query (none past the end)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < n
        k = tl.load(K + (start + offs_n)[:, None] * stride_kn + h * stride_kh + offs_dqk[None, :],
                    mask=mask_n[:, None] & (offs_dqk[None, :] < D_QK), other=0.0)
        v = tl.load(V + (start + offs_n)[:, None] * stride_vn + h * stride_vh + offs_dv[None, :],
                    mask=mask_n[:, None] & (offs_dv[None, :] < D_V), other=0.0)
        s, valid, bucket = _biased_scores(q, k, POS, TIME, QTS, TS, start, offs_m, offs_n, mask_m, mask_n,
                                          num_buckets, HAS_POS, HAS_TIME, PRECISION)
        p = tl.where(valid, s * tl.sigmoid(s) * scale, 0.0)
        acc += tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    tl.store(OUT + (start + offs_m)[:, None] * stride_on + h * stride_oh + offs_dv[None, :],
             acc.to(OUT.dtype.element_ty), mask=mask_m[:, None] & (offs_dv[None, :] < D_V))


@triton.jit
def _hstu_bwd_dkdv(Q, K, V, DO, DK, DV, DPOS, DTIME, OFFSETS, SCALE, POS, TIME, TS, QTS,
                   stride_qn, stride_qh, stride_kn, stride_kh, stride_vn, stride_vh,
                   num_buckets, L_KEY,
                   D_QK: tl.constexpr, D_V: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
                   HAS_POS: tl.constexpr, HAS_TIME: tl.constexpr, PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Grid ``(cdiv(max_len, BLOCK_N), B, H)``: ``DK, DV`` of the block's keys (``DO, DK, DV`` laid out like
    ``Q, K, V`` made contiguous), and the bias gradients ``DPOS, DTIME`` (fp32, atomically summed). Square tiles."""
    tl.static_assert(BLOCK_M == BLOCK_N)
    pid_n, b, h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(OFFSETS + b)
    n = tl.load(OFFSETS + b + 1) - start
    n0 = pid_n * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    mask_n = offs_n < n
    offs_dqk, offs_dv = tl.arange(0, BLOCK_DQK), tl.arange(0, BLOCK_DV)
    mask_kd = mask_n[:, None] & (offs_dqk[None, :] < D_QK)
    mask_vd = mask_n[:, None] & (offs_dv[None, :] < D_V)
    k = tl.load(K + (start + offs_n)[:, None] * stride_kn + h * stride_kh + offs_dqk[None, :], mask=mask_kd, other=0.0)
    v = tl.load(V + (start + offs_n)[:, None] * stride_vn + h * stride_vh + offs_dv[None, :], mask=mask_vd, other=0.0)
    scale = tl.load(SCALE + b).to(tl.float32)
    dk = tl.zeros((BLOCK_N, BLOCK_DQK), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_DV), dtype=tl.float32)
    heads = tl.num_programs(2)
    hi = tl.where(n0 < n, n, 0)
    for m0 in range(n0, hi, BLOCK_M):  # queries from the block's first key on
        offs_m = m0 + tl.arange(0, BLOCK_M)
        mask_m = offs_m < n
        q = tl.load(Q + (start + offs_m)[:, None] * stride_qn + h * stride_qh + offs_dqk[None, :],
                    mask=mask_m[:, None] & (offs_dqk[None, :] < D_QK), other=0.0)
        do = tl.load(DO + ((start + offs_m)[:, None] * heads + h) * D_V + offs_dv[None, :],
                     mask=mask_m[:, None] & (offs_dv[None, :] < D_V), other=0.0)
        s, valid, bucket = _biased_scores(q, k, POS, TIME, QTS, TS, start, offs_m, offs_n, mask_m, mask_n,
                                          num_buckets, HAS_POS, HAS_TIME, PRECISION)
        sig = tl.sigmoid(s)
        p = tl.where(valid, s * sig * scale, 0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = tl.where(valid, dp * scale * sig * (1.0 + s * (1.0 - sig)), 0.0)  # d SiLU(s) / ds
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)
        if HAS_POS:
            _add_position_grad(DPOS, ds, m0, n0, n, BLOCK_N)
        if HAS_TIME:
            _add_time_grad(DTIME, ds, bucket, valid)
    tl.store(DK + ((start + offs_n)[:, None] * heads + h) * D_QK + offs_dqk[None, :], dk.to(DK.dtype.element_ty),
             mask=mask_kd)
    tl.store(DV + ((start + offs_n)[:, None] * heads + h) * D_V + offs_dv[None, :], dv.to(DV.dtype.element_ty),
             mask=mask_vd)


@triton.jit
def _hstu_bwd_dq(Q, K, V, DO, DQ, OFFSETS, SCALE, POS, TIME, TS, QTS,
                 stride_qn, stride_qh, stride_kn, stride_kh, stride_vn, stride_vh,
                 num_buckets, L_KEY,
                 D_QK: tl.constexpr, D_V: tl.constexpr, BLOCK_DQK: tl.constexpr, BLOCK_DV: tl.constexpr,
                 HAS_POS: tl.constexpr, HAS_TIME: tl.constexpr, PRECISION: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Grid ``(cdiv(max_len, BLOCK_M), B, H)``: ``DQ`` of the block's queries."""
    pid_m, b, h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = tl.load(OFFSETS + b)
    n = tl.load(OFFSETS + b + 1) - start
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    mask_m = offs_m < n
    offs_dqk, offs_dv = tl.arange(0, BLOCK_DQK), tl.arange(0, BLOCK_DV)
    heads = tl.num_programs(2)
    q = tl.load(Q + (start + offs_m)[:, None] * stride_qn + h * stride_qh + offs_dqk[None, :],
                mask=mask_m[:, None] & (offs_dqk[None, :] < D_QK), other=0.0)
    do = tl.load(DO + ((start + offs_m)[:, None] * heads + h) * D_V + offs_dv[None, :],
                 mask=mask_m[:, None] & (offs_dv[None, :] < D_V), other=0.0)
    scale = tl.load(SCALE + b).to(tl.float32)
    dq = tl.zeros((BLOCK_M, BLOCK_DQK), dtype=tl.float32)
    hi = tl.where(m0 < n, tl.minimum(m0 + BLOCK_M, n), 0)
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < n
        k = tl.load(K + (start + offs_n)[:, None] * stride_kn + h * stride_kh + offs_dqk[None, :],
                    mask=mask_n[:, None] & (offs_dqk[None, :] < D_QK), other=0.0)
        v = tl.load(V + (start + offs_n)[:, None] * stride_vn + h * stride_vh + offs_dv[None, :],
                    mask=mask_n[:, None] & (offs_dv[None, :] < D_V), other=0.0)
        s, valid, bucket = _biased_scores(q, k, POS, TIME, QTS, TS, start, offs_m, offs_n, mask_m, mask_n,
                                          num_buckets, HAS_POS, HAS_TIME, PRECISION)
        sig = tl.sigmoid(s)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = tl.where(valid, dp * scale * sig * (1.0 + s * (1.0 - sig)), 0.0)
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + ((start + offs_m)[:, None] * heads + h) * D_QK + offs_dqk[None, :], dq.to(DQ.dtype.element_ty),
             mask=mask_m[:, None] & (offs_dqk[None, :] < D_QK))


#: True when the kernels were built for Triton's CPU interpreter (``TRITON_INTERPRET=1`` at import).
INTERPRETED = isinstance(_hstu_fwd, InterpretedFunction)
if INTERPRETED and not isinstance(tl.sigmoid, InterpretedFunction):
    raise RuntimeError("TRITON_INTERPRET=1 was set after triton itself was imported, so triton's own library was "
                       "built for the GPU: set it before anything imports triton (lightning does)")
#: fixed blocks under the interpreter (small, so that short test sequences still span several blocks)
INTERPRETER_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 16}


def _configs(shapes: list[tuple[int, int, int]]) -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=2) for m, n, w in shapes]


if INTERPRETED:
    _fwd, _dkdv, _dq = _hstu_fwd, _hstu_bwd_dkdv, _hstu_bwd_dq
else:
    _KEY = ["L_KEY", "BLOCK_DQK", "BLOCK_DV", "HAS_POS", "HAS_TIME"]
    _fwd = triton.autotune(_configs([(64, 64, 4), (128, 64, 8)]), key=_KEY)(_hstu_fwd)
    _dkdv = triton.autotune(_configs([(32, 32, 4), (64, 64, 4)]), key=_KEY,
                            reset_to_zero=["DPOS", "DTIME"])(_hstu_bwd_dkdv)
    _dq = triton.autotune(_configs([(64, 64, 4), (128, 64, 8)]), key=_KEY)(_hstu_bwd_dq)


def _common(q, k, v, offsets, scale, max_len, position_bias, time_bias, timestamps, query_timestamps
            ) -> tuple[dict, int]:
    """The arguments shared by the three kernels (absent biases as 1-element placeholders), and ``H``."""
    heads, d_qk, d_v = q.shape[1], q.shape[2], v.shape[2]
    placeholder = q.new_zeros(1, dtype=torch.float32)
    no_times = offsets.new_zeros(1)
    has_time = time_bias is not None
    return dict(
        OFFSETS=offsets, SCALE=scale,
        POS=position_bias if position_bias is not None else placeholder,
        TIME=time_bias if has_time else placeholder,
        TS=timestamps if has_time else no_times, QTS=query_timestamps if has_time else no_times,
        stride_qn=q.stride(0), stride_qh=q.stride(1), stride_kn=k.stride(0), stride_kh=k.stride(1),
        stride_vn=v.stride(0), stride_vh=v.stride(1),
        num_buckets=len(time_bias) - 1 if has_time else 0, L_KEY=max(64, triton.next_power_of_2(max_len)),
        D_QK=d_qk, D_V=d_v, BLOCK_DQK=max(16, triton.next_power_of_2(d_qk)),
        BLOCK_DV=max(16, triton.next_power_of_2(d_v)), HAS_POS=position_bias is not None, HAS_TIME=has_time,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        **(INTERPRETER_BLOCKS if INTERPRETED else {})), heads


def _grid(max_len: int, batch: int, heads: int, block: str):
    return lambda meta: (triton.cdiv(max_len, meta[block]), batch, heads)


def _check_device(t: torch.Tensor) -> None:
    if t.is_cuda == INTERPRETED:
        raise RuntimeError("genrec_kernels' Triton kernels run on CUDA tensors, or on CPU tensors when "
                           f"TRITON_INTERPRET=1 was set before they were imported; got a {t.device} tensor with "
                           f"the kernels built {'for the interpreter' if INTERPRETED else 'for the GPU'}")


def hstu_attention_forward(q, k, v, offsets, scale, max_len, position_bias, time_bias, timestamps,
                           query_timestamps) -> torch.Tensor:
    """Shapes as :func:`genrec_kernels.hstu_attention` (last dims contiguous): ``(N, H, d_v)``."""
    _check_device(q)
    args, heads = _common(q, k, v, offsets, scale, max_len, position_bias, time_bias, timestamps, query_timestamps)
    out = v.new_empty(v.shape[0], heads, v.shape[2])
    _fwd[_grid(max_len, len(offsets) - 1, heads, "BLOCK_M")](
        q, k, v, out, stride_on=out.stride(0), stride_oh=out.stride(1), **args)
    return out


def hstu_attention_backward(grad, q, k, v, offsets, scale, max_len, position_bias, time_bias, timestamps,
                            query_timestamps) -> tuple[torch.Tensor, ...]:
    """``grad (N, H, d_v)`` -> ``dq, dk, dv`` and the bias gradients (``None`` for an absent bias)."""
    _check_device(q)
    args, heads = _common(q, k, v, offsets, scale, max_len, position_bias, time_bias, timestamps, query_timestamps)
    grad = grad.contiguous()
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    dpos = torch.zeros(len(position_bias) if position_bias is not None else 1, device=q.device)
    dtime = torch.zeros(len(time_bias) if time_bias is not None else 1, device=q.device)
    batch = len(offsets) - 1
    _dkdv[_grid(max_len, batch, heads, "BLOCK_N")](q, k, v, grad, dk, dv, dpos, dtime, **args)
    _dq[_grid(max_len, batch, heads, "BLOCK_M")](q, k, v, grad, dq, **args)
    return (dq, dk, dv, dpos.to(position_bias.dtype) if position_bias is not None else None,
            dtime.to(time_bias.dtype) if time_bias is not None else None)
