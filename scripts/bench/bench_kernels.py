"""GPU benchmark of genrec_kernels: HSTU's jagged attention (Triton, relative bias in the kernel) against the padded
PyTorch reference and softmax attention of the same shape, forward and forward+backward, measured in one run.

For each total token count N, a batch of sequences is drawn with a realistic length skew (log-normal lengths, median
``max_len / 6``, capped at ``max_len``: many short histories, a few long ones) until the lengths sum to N. Every
implementation gets the same batch, dtype and heads:

* ``triton`` — ``torch.ops.genrec.hstu_attention`` (position and time-bucket bias inside the kernel);
* ``padded`` — the PyTorch reference (:mod:`genrec_kernels.reference`: the batch padded to its longest sequence,
  the bias materialised, the formula written out), the baseline of the ratios;
* ``sdpa`` — softmax attention, ``torch.nn.functional.scaled_dot_product_attention`` (causal, flash backend) on the
  padded batch (no bias; padding not timed): what a FlashAttention Transformer pays for the same shape;
* ``flash_varlen`` — flash-attn's varlen kernel on the jagged batch, when the flash_attn package is installed.

Wall times are CUDA-event medians over ``--steps`` calls after ``--warmup`` (Triton autotunes during the
warm-up): what a caller waits, host launch overhead included. GPU times are the summed durations of the kernels one
call runs (torch's profiler, mean of 5 calls): what the GPU works. TFLOP/s (on GPU time) counts the same useful
work for every implementation: ``2·pairs·H·(d_qk + d_v)`` forward and twice that backward, with
``pairs = sum_b n_b (n_b + 1) / 2`` the causal pairs of the jagged batch. Without CUDA the script
measures nothing (Triton's CPU interpreter says nothing about kernel speed) and exits with status 0.

Usage::

    python -m scripts.bench.bench_kernels             # N = 256, 1024, 4096, 8192 -> results/bench_kernels.json
    python -m scripts.bench.bench_kernels --quick     # N = 1024, 4096, fewer steps
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "kernels"))  # genrec_kernels, built in place

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, nargs="+", default=[256, 1024, 4096, 8192], help="total tokens N per batch")
    p.add_argument("--max-len", type=int, default=1024, help="longest sequence (capped at N)")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-qk", type=int, default=64)
    p.add_argument("--d-v", type=int, default=64)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="N = 1024 and 4096, 5 steps after 3 warm-up calls")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--commit", help="the commit measured, where the working copy is not this branch's checkout")
    p.add_argument("--out", default=str(ROOT / "results" / "bench_kernels.json"))
    args = p.parse_args()
    if args.quick:
        args.tokens, args.steps, args.warmup = [1024, 4096], 5, 3
    return args


def skewed_lengths(total: int, max_len: int, rng) -> list[int]:
    """Log-normal lengths (median ``max_len / 6``, sigma 1) capped at ``max_len``, the last one cut so they sum to
    ``total``."""
    lengths: list[int] = []
    while sum(lengths) < total:
        n = int(min(max_len, max(1, round(rng.lognormal(math.log(max_len / 6), 1.0)))))
        lengths.append(min(n, total - sum(lengths)))
    return lengths


def _time_ms(fn, warmup: int, steps: int) -> tuple[float, list[float]]:
    """Median and all CUDA-event times of ``fn()`` in ms."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), times


def _kernel_ms(fn, reps: int = 5) -> float | None:
    """GPU time of one ``fn()`` in ms: the summed durations of the kernels and copies it runs (torch's profiler),
    without the host's launch overhead; ``None`` where the profiler saw no GPU work."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    total_us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    return total_us / reps / 1000 if total_us > 0 else None


def _measure(forward, leaves: list[torch.Tensor], args: argparse.Namespace) -> dict:
    """Forward and forward+backward times in ms (wall: CUDA events, host overhead included; kernel: GPU time from
    the profiler) and the peak memory of forward+backward above what was allocated before."""
    out = forward()
    grad_out = torch.randn_like(out)

    def fwd_bwd():
        torch.autograd.grad(forward(), leaves, grad_out)

    fwd_ms, _ = _time_ms(lambda: forward(), args.warmup, args.steps)
    fwd_bwd()  # autotuning (and its benchmarking buffers) before the memory count
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fwd_bwd_ms, times = _time_ms(fwd_bwd, args.warmup, args.steps)
    peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    try:
        kernel = {"forward_kernel_ms": _kernel_ms(forward), "forward_backward_kernel_ms": _kernel_ms(fwd_bwd)}
    except Exception as e:  # a profiler that cannot see the GPU: wall times only
        kernel = {"kernel_ms_error": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"forward_ms": fwd_ms, "forward_backward_ms": fwd_bwd_ms, "forward_backward_times_ms": times,
            "peak_memory_mib": peak, **kernel}


def _errors_vs_fp32(impls: dict, leaves: list[torch.Tensor], rest: tuple, gen) -> dict:
    """Largest |difference| of each implementation's output and gradients (``q, k, v``, the two biases) from the
    fp32 PyTorch reference, relative to the reference's largest magnitude."""
    from genrec_kernels import reference

    offsets, scale, longest, timestamps, queries = rest
    exact = [t.detach().float().requires_grad_() for t in leaves]
    q, k, v, position, time_bias = exact
    out = reference.hstu_attention(q, k, v, offsets, scale.float(), longest, position, time_bias, timestamps, queries)
    grad_out = torch.randn(out.shape, device=out.device, generator=gen)
    expected = [out.detach(), *torch.autograd.grad(out, exact, grad_out)]
    names = ("output", "grad_q", "grad_k", "grad_v", "grad_position_bias", "grad_time_bias")
    errors = {}
    for impl, fn in impls.items():
        got = fn()
        got = [got.detach(), *torch.autograd.grad(got, leaves, grad_out.to(got.dtype))]
        errors[impl] = {name: ((g.float() - e).abs().max() / e.abs().max()).item()
                        for name, g, e in zip(names, got, expected)}
    return errors


def attention_case(n_tokens: int, args: argparse.Namespace, rng) -> dict:
    """One N: the batch, every implementation's times, TFLOP/s and the ratios to the padded reference."""
    from genrec_kernels import ops, reference

    dtype, device = getattr(torch, args.dtype), "cuda"
    max_len = min(args.max_len, n_tokens)
    lengths = skewed_lengths(n_tokens, max_len, rng)
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=device)
    longest, batch, heads = max(lengths), len(lengths), args.heads
    gen = torch.Generator(device).manual_seed(args.seed)
    q, k = (torch.randn(n_tokens, heads, args.d_qk, device=device, dtype=dtype, generator=gen, requires_grad=True)
            for _ in range(2))
    v = torch.randn(n_tokens, heads, args.d_v, device=device, dtype=dtype, generator=gen, requires_grad=True)
    position = (torch.randn(longest, device=device, generator=gen) * 0.1).to(dtype).requires_grad_()
    time_bias = (torch.randn(129, device=device, generator=gen) * 0.1).to(dtype).requires_grad_()
    gaps = torch.randint(1, 10**6, (n_tokens + 1,), device=device, generator=gen)
    timestamps = gaps.cumsum(0)[:-1]
    queries = timestamps + gaps[1:]
    scale = torch.full((batch,), 1.0 / longest, device=device, dtype=dtype)  # as HSTU: the model's dtype
    bias_args = (position, time_bias, timestamps, queries)
    leaves = [q, k, v, position, time_bias]

    impls = {
        "triton": lambda: ops.hstu_attention(q, k, v, offsets, scale, longest, *bias_args),
        "padded": lambda: reference.hstu_attention(q, k, v, offsets, scale, longest, *bias_args),
    }
    errors = _errors_vs_fp32(impls, leaves, (offsets, scale, longest, timestamps, queries), gen)
    results = {name: _measure(fn, leaves, args) for name, fn in impls.items()}

    # softmax attention of the same shape (no relative bias: flash kernels have none)
    from genrec.ops.jagged import jagged_to_padded

    padded = [jagged_to_padded(t.detach(), offsets, longest).transpose(1, 2).contiguous().requires_grad_()
              for t in (q, k, v if args.d_v == args.d_qk else q)]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(*padded, is_causal=True)

    try:
        results["sdpa"] = _measure(sdpa, padded, args) | {"backend": "flash (torch SDPA)"}
    except RuntimeError as e:  # e.g. fp32, which the flash backend does not take
        results["sdpa"] = {"skipped": f"torch SDPA flash backend: {str(e).splitlines()[0]}"}
    if importlib.util.find_spec("flash_attn") is not None and dtype != torch.float32:
        from flash_attn import flash_attn_varlen_func

        cu = offsets.to(torch.int32)
        jag = [q, k, v if args.d_v == args.d_qk else q]
        results["flash_varlen"] = _measure(
            lambda: flash_attn_varlen_func(*jag, cu, cu, longest, longest, causal=True), jag, args)
    else:
        results["flash_varlen"] = {"skipped": "flash_attn is not installed" if dtype != torch.float32 else "fp32"}

    pairs = sum(n * (n + 1) // 2 for n in lengths)
    fwd_flop = 2 * pairs * heads * (args.d_qk + args.d_v)
    timed = {name: r for name, r in results.items() if "forward_ms" in r}
    for r in timed.values():
        for key, flop in (("forward", fwd_flop), ("forward_backward", 3 * fwd_flop)):
            r[f"{key}_tflops"] = flop / (r[f"{key}_ms"] * 1e-3) / 1e12
            if r.get(f"{key}_kernel_ms"):
                r[f"{key}_kernel_tflops"] = flop / (r[f"{key}_kernel_ms"] * 1e-3) / 1e12
    base = results["padded"]
    ratios = {f"{name}_vs_padded": {key: base[key] / r[key] for key in (
              "forward_ms", "forward_backward_ms", "forward_kernel_ms", "forward_backward_kernel_ms")
              if base.get(key) and r.get(key)} for name, r in timed.items() if name != "padded"}
    return {"tokens": n_tokens, "sequences": batch, "longest": longest, "mean_length": n_tokens / batch,
            "median_length": statistics.median(lengths), "causal_pairs_per_head": pairs,
            "padded_pairs_per_head": batch * longest * (longest + 1) // 2, "forward_flop": fwd_flop,
            "error_vs_fp32_reference": errors, "results": results, "ratios": ratios}


def other_ops(args: argparse.Namespace) -> list[dict]:
    """Forward+backward of the fused ``u ⊙ LayerNorm(x)`` and of jagged -> padded at the largest N, per backend,
    through genrec_kernels' functions (input checks included)."""
    import numpy as np

    import genrec_kernels as gk

    n, width, dtype = max(args.tokens), args.heads * args.d_v, getattr(torch, args.dtype)
    u, x = (torch.randn(n, width, device="cuda", dtype=dtype, requires_grad=True) for _ in range(2))
    weight, bias = (torch.randn(width, device="cuda", dtype=dtype, requires_grad=True) for _ in range(2))
    rows = []
    for backend in ("pytorch", "triton"):
        r = _measure(lambda: gk.layer_norm_mul(u, x, weight, bias, 1e-6, backend=backend), [u, x, weight, bias], args)
        rows.append({"op": "layer_norm_mul", "shape": [n, width], "backend": backend, **r})
    lengths = skewed_lengths(n, min(args.max_len, n), np.random.default_rng(args.seed))
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device="cuda")
    values = torch.randn(n, width, device="cuda", dtype=dtype, requires_grad=True)
    for backend in ("pytorch", "triton", "cuda"):
        try:
            r = _measure(lambda: gk.jagged_to_padded(values, offsets, max(lengths), backend=backend), [values], args)
        except Exception as e:  # the CUDA extension needs nvcc and a build
            r = {"skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
        rows.append({"op": "jagged_to_padded", "shape": [n, width], "sequences": len(lengths), "backend": backend,
                     **r})
    return rows


def _print(payload: dict) -> None:
    head = (f"{'N':>6} {'seqs':>5} {'longest':>7} | {'impl':>12} {'fwd ms':>8} {'fwd+bwd ms':>10} {'GPU ms':>8} "
            f"{'TFLOP/s':>8} {'padded/impl':>11} {'GPU ratio':>9} {'peak MiB':>9}")
    print(f"HSTU attention, {payload['heads']} heads, d_qk {payload['d_qk']}, d_v {payload['d_v']}, {payload['dtype']},"
          f" {payload['environment']['cuda']}: wall ms (CUDA events) and GPU ms (profiler) of fwd+bwd, TFLOP/s of "
          "useful jagged work on GPU time, ratios = padded time / implementation time")
    print(head)
    print("-" * len(head))
    for case in payload["attention"]:
        for name, r in case["results"].items():
            if "skipped" in r:
                print(f"{case['tokens']:>6} {case['sequences']:>5} {case['longest']:>7} | {name:>12} skipped: "
                      f"{r['skipped']}")
                continue
            ratio = case["ratios"].get(f"{name}_vs_padded", {})
            gpu_ms = r.get("forward_backward_kernel_ms") or float("nan")
            print(f"{case['tokens']:>6} {case['sequences']:>5} {case['longest']:>7} | {name:>12} "
                  f"{r['forward_ms']:>8.3f} {r['forward_backward_ms']:>10.3f} {gpu_ms:>8.3f} "
                  f"{r.get('forward_backward_kernel_tflops', float('nan')):>8.2f} "
                  f"{ratio.get('forward_backward_ms', 1.0):>10.2f}x "
                  f"{ratio.get('forward_backward_kernel_ms', 1.0):>8.2f}x {r['peak_memory_mib']:>9.1f}")
        for impl, errors in case["error_vs_fp32_reference"].items():
            print(f"{'':>21}{impl} vs the fp32 reference, largest |difference| / largest |value|: "
                  + ", ".join(f"{k} {v:.2g}" for k, v in errors.items()))
    for r in payload["other_ops"]:
        timing = (r["skipped"] if "skipped" in r else
                  f"fwd {r['forward_ms']:.3f} ms, fwd+bwd {r['forward_backward_ms']:.3f} ms")
        print(f"{r['op']} {tuple(r['shape'])} {r['backend']}: {timing}")


def main() -> None:
    args = _parse()
    if not torch.cuda.is_available():
        print("bench_kernels.py needs a CUDA GPU: the Triton kernels run on CPU only in Triton's interpreter, whose "
              "timings say nothing about kernel speed. Nothing was measured and nothing written.")
        return
    import numpy as np

    from genrec.utils.provenance import provenance, write_json

    rng = np.random.default_rng(args.seed)
    cases = []
    for n in args.tokens:
        cases.append(attention_case(n, args, rng))
        print(f"  N={n}: done", file=sys.stderr)
    import triton

    from genrec_kernels import triton_hstu

    tuned = {name: {str(key): str(config) for key, config in getattr(kernel, "cache", {}).items()}  # key -> best
             for name, kernel in (("forward", triton_hstu._fwd), ("backward_dk_dv", triton_hstu._dkdv),
                                  ("backward_dq", triton_hstu._dq))}
    prov = provenance()
    if args.commit:  # e.g. a copy of the branch run from inside another checkout, whose HEAD git would report
        prov["commit"] = args.commit
    payload = {"name": Path(args.out).stem, "kind": "benchmark", "benchmark": "kernels", "dataset": "synthetic "
               "lengths: log-normal, median max_len/6, sigma 1, capped at max_len", "max_len": args.max_len,
               "heads": args.heads, "d_qk": args.d_qk, "d_v": args.d_v, "dtype": args.dtype, "steps": args.steps,
               "warmup": args.warmup, "seed": args.seed, "triton": triton.__version__,
               "timing": "wall: CUDA-event median (host overhead included); GPU: summed kernel durations "
                         "(profiler); TFLOP/s = useful jagged work (fwd 2·pairs·H·(d_qk+d_v), bwd twice that) / "
                         "time, the same count for every implementation",
               "attention": cases, "triton_configs": tuned, "other_ops": other_ops(args), **prov}
    _print(payload)
    write_json(Path(args.out), payload)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
