"""genrec_kernels: every Triton (and CUDA C++) kernel equals its PyTorch reference, outputs and gradients, on
hypothesis-drawn jagged shapes — on CPU through Triton's interpreter (small shapes, few examples) and on CUDA when
there is a GPU; the ops' registrations pass torch.library.opcheck; HSTU trained with ``attention=triton`` follows
the PyTorch path step by step; the CUDA source compiles with nvcc where nvcc exists."""
import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import genrec_kernels as gk
from genrec.models.attention import resolve
from genrec.models.attention.hstu import padded_hstu_attention
from genrec.models.hstu import HSTU
from genrec.ops.hstu import RelativeBias
from genrec.ops.jagged import JaggedLayout
from genrec_kernels import reference

CUDA = torch.cuda.is_available()
#: where the Triton kernels are tested: the GPU, else the CPU in Triton's interpreter (set up by conftest.py)
DEVICE = "cuda" if CUDA else "cpu"
#: hypothesis examples per test: the interpreter runs each program in Python, so few and small there
EXAMPLES = 15 if CUDA else 8
ROOT = Path(__file__).resolve().parents[2]
CUDA_SOURCES = ROOT / "kernels" / "genrec_kernels" / "cuda"

pytestmark = pytest.mark.skipif(not gk.triton_runs_on(torch.zeros(1, device=DEVICE)),
                                reason="needs triton and a GPU, or TRITON_INTERPRET=1 (tests/kernels/conftest.py)")


def _offsets(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], device=DEVICE)


def _times(lengths: list[int], g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Increasing event times per sequence (gaps of seconds to months) and the time each position predicts."""
    timestamps, queries = [], []
    for n in lengths:
        t = 10**9 + torch.cumsum(torch.randint(0, 10**7, (n + 1,), generator=g), 0)
        timestamps.append(t[:-1])
        queries.append(t[1:])
    return torch.cat(timestamps).to(DEVICE), torch.cat(queries).to(DEVICE)


def _close(got: torch.Tensor, expected: torch.Tensor, tol: float) -> bool:
    """Equal up to ``tol`` relative to the largest magnitude of ``expected``."""
    return torch.allclose(got.float(), expected.float(), rtol=0, atol=tol * max(1.0, expected.abs().max().item()))


# ---- HSTU attention ---------------------------------------------------------------------------------------------

def _attention_case(lengths, heads, d_qk, d_v, parts, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    n, max_len = sum(lengths), max(lengths)
    q, k = (torch.randn(n, heads, d_qk, generator=g) for _ in range(2))
    v = torch.randn(n, heads, d_v, generator=g)
    timestamps, queries = _times(lengths, g)
    position = torch.randn(max_len + 3, generator=g) if parts in ("position", "both") else None
    time = torch.randn(129, generator=g) if parts in ("time", "both") else None
    scale = torch.rand(len(lengths), generator=g) + 0.1
    to = lambda t: None if t is None else t.to(DEVICE, dtype).requires_grad_()  # noqa: E731
    return dict(q=to(q), k=to(k), v=to(v), offsets=_offsets(lengths), scale=scale.to(DEVICE), max_len=max_len,
                position_bias=to(position), time_bias=to(time), timestamps=timestamps, query_timestamps=queries)


def _run_attention(case, backend, upcast=False):
    """Output and gradients (q, k, v, and the biases present) of ``sum(out * w)`` for a fixed ``w``."""
    args = dict(case)
    if upcast:  # the fp32 reference of a low-precision case
        args.update({key: case[key].detach().float().requires_grad_() for key in
                     ("q", "k", "v", "position_bias", "time_bias") if case[key] is not None})
    out = gk.hstu_attention(**args, backend=backend)
    weight = torch.linspace(-1, 1, out.numel(), device=out.device).view_as(out).sin()
    leaves = [args[key] for key in ("q", "k", "v", "position_bias", "time_bias") if args[key] is not None]
    return out, torch.autograd.grad((out.float() * weight).sum(), leaves)


@settings(max_examples=EXAMPLES, deadline=None)
@example(lengths=[40, 3, 17, 33], heads=2, d_qk=20, d_v=8, parts="both", seed=0)  # several blocks a sequence
@given(lengths=st.lists(st.integers(1, 40 if not CUDA else 300), min_size=1, max_size=4),
       heads=st.integers(1, 2), d_qk=st.sampled_from([4, 8, 20]), d_v=st.sampled_from([3, 8]),
       parts=st.sampled_from(["none", "position", "time", "both"]), seed=st.integers(0, 10**6))
def test_triton_attention_equals_the_reference_with_gradients(lengths, heads, d_qk, d_v, parts, seed):
    case = _attention_case(lengths, heads, d_qk, d_v, parts, seed)
    (out_t, grads_t), (out_r, grads_r) = _run_attention(case, "triton"), _run_attention(case, "pytorch")
    assert _close(out_t, out_r, 1e-5)
    assert len(grads_t) == len(grads_r)
    for got, expected in zip(grads_t, grads_r):
        assert _close(got, expected, 1e-4)


@pytest.mark.skipif(not CUDA, reason="bf16 kernels on the GPU")
@pytest.mark.parametrize("parts", ["none", "both"])
def test_triton_attention_in_bf16_is_close_to_the_fp32_reference(parts):
    case = _attention_case([1, 130, 77, 300, 64], 2, 64, 64, parts, seed=0, dtype=torch.bfloat16)
    (out_t, grads_t), (out_r, grads_r) = _run_attention(case, "triton"), _run_attention(case, "pytorch", True)
    assert out_t.dtype == torch.bfloat16 and _close(out_t, out_r, 2e-2)
    for got, expected in zip(grads_t, grads_r):
        assert _close(got, expected, 3e-2)


def test_the_reference_is_hstus_padded_reference():
    pytest.importorskip("fbgemm_gpu")
    case = _attention_case([3, 17, 1, 9], 2, 5, 4, "both", seed=1)
    case = {key: t.detach().cpu() if isinstance(t, torch.Tensor) else t for key, t in case.items()}
    bias = RelativeBias(case["position_bias"], case["time_bias"], case["timestamps"], case["query_timestamps"])
    expected = padded_hstu_attention(case["q"], case["k"], case["v"], JaggedLayout(case["offsets"]), bias,
                                     case["scale"])
    assert torch.allclose(reference.hstu_attention(**case), expected, atol=1e-6)


# ---- u * LayerNorm(x) -------------------------------------------------------------------------------------------

@settings(max_examples=EXAMPLES, deadline=None)
@example(rows=70, width=50, affine=True, strided=True, seed=0)
@given(rows=st.integers(1, 70), width=st.integers(2, 70), affine=st.booleans(), strided=st.booleans(),
       seed=st.integers(0, 10**6))
def test_triton_layer_norm_mul_equals_the_reference_with_gradients(rows, width, affine, strided, seed):
    """The kernel's error against a float64 reference is at most a few times float32 PyTorch's own error, plus a
    small floor: a row whose values nearly coincide makes LayerNorm ill-conditioned (its output moves by ~1/std per
    rounding error), and there both float32 paths are equally far from the exact value.
    (Width 1 left out: LayerNorm of one value is constant, and torch's own gradient there is rounding noise times
    ``1 / sqrt(eps)``, where the kernel gives the exact 0.)"""
    g = torch.Generator().manual_seed(seed)
    uv = torch.randn(rows, 2 * width, generator=g).to(DEVICE).requires_grad_()
    u = uv[:, :width] if strided else uv[:, :width].detach().clone().requires_grad_()  # a view, as in HSTU
    x = (torch.randn(rows, width, generator=g) * 3 + 1).to(DEVICE).requires_grad_()
    weight, bias = ((torch.randn(width, generator=g).to(DEVICE).requires_grad_() if affine else None)
                    for _ in range(2))
    leaves = [u, x] + ([weight, bias] if affine else [])
    copies = {dtype: [t.detach().to(dtype).requires_grad_() for t in leaves]
              for dtype in (torch.float32, torch.float64)}
    results = []
    for backend, inputs in (("triton", leaves), ("pytorch", copies[torch.float32]), ("pytorch", copies[torch.float64])):
        u_, x_, *affine_ = inputs
        out = gk.layer_norm_mul(u_, x_, *(affine_ or [None, None]), 1e-6, backend=backend)
        results.append([out, *torch.autograd.grad((out * out.detach().cos()).sum(), inputs)])
    for got, torch32, exact in zip(*results):
        scale = max(1.0, exact.abs().max().item())
        own_error = (torch32.double() - exact).abs().max().item()
        assert (got.double() - exact).abs().max().item() <= 4 * own_error + 1e-5 * scale


# ---- jagged <-> padded ------------------------------------------------------------------------------------------

JAGGED_BACKENDS = ["triton"] + (["cuda"] if CUDA and shutil.which("nvcc") else [])


@pytest.mark.parametrize("backend", JAGGED_BACKENDS)
@settings(max_examples=EXAMPLES, deadline=None)
@example(lengths=[40, 0, 3], extra=2, features=(130,), pad=-1.5, dtype=torch.float32, seed=0)
@given(lengths=st.lists(st.integers(0, 40), min_size=1, max_size=5), extra=st.integers(0, 3),
       features=st.sampled_from([(), (1,), (3, 5), (130,)]), pad=st.sampled_from([0.0, -1.5]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.int64]), seed=st.integers(0, 10**6))
def test_jagged_padded_conversion_equals_the_reference_with_gradients(backend, lengths, extra, features, pad, dtype,
                                                                     seed):
    g = torch.Generator().manual_seed(seed)
    offsets = _offsets(lengths)
    max_len = max(lengths) + extra
    values = (torch.randn(sum(lengths), *features, generator=g) * 10).to(DEVICE, dtype)
    differentiable = dtype.is_floating_point
    values.requires_grad_(differentiable)
    padded = gk.jagged_to_padded(values, offsets, max_len, pad, backend=backend)
    expected = reference.jagged_to_padded(values, offsets, max_len, pad)
    assert padded.dtype == dtype and torch.equal(padded, expected)
    back = gk.padded_to_jagged(padded, offsets, backend=backend)
    assert torch.equal(back, values) and torch.equal(back, reference.padded_to_jagged(expected, offsets))
    if differentiable:  # each op's gradient is the other op
        weight = torch.randn(padded.shape, generator=g).to(DEVICE, dtype)
        grad = torch.autograd.grad((padded * weight).sum(), values)[0]
        assert torch.equal(grad, reference.padded_to_jagged(weight, offsets))
        padded_leaf = expected.detach().requires_grad_()
        jagged = gk.padded_to_jagged(padded_leaf, offsets, backend=backend)
        grad = torch.autograd.grad((jagged * values.detach()).sum(), padded_leaf)[0]
        assert torch.equal(grad, reference.jagged_to_padded(values.detach(), offsets, max_len, 0.0))


# ---- op registration, errors, the switch ------------------------------------------------------------------------

def test_custom_ops_pass_opcheck():
    from genrec_kernels import ops

    case = _attention_case([3, 18], 1, 4, 3, "both", seed=2)
    tensors = [case[key] for key in ("q", "k", "v", "offsets", "scale")]
    rest = [case[key] for key in ("position_bias", "time_bias", "timestamps", "query_timestamps")]
    torch.library.opcheck(ops.hstu_attention, (*tensors, case["max_len"], *rest),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))
    u, x, w = (torch.randn(*shape, device=DEVICE, requires_grad=True) for shape in ((5, 6), (5, 6), (6,)))
    torch.library.opcheck(ops.layer_norm_mul, (u, x, w, None, 1e-5))
    values = torch.randn(21, 4, device=DEVICE, requires_grad=True)
    torch.library.opcheck(ops.jagged_to_padded, (values, case["offsets"], 18, 0.0, "triton"))
    torch.library.opcheck(ops.padded_to_jagged, (torch.randn(2, 18, 4, device=DEVICE, requires_grad=True),
                                                 case["offsets"], 21, "triton"))


def test_bad_inputs_are_clear_errors(monkeypatch):
    case = _attention_case([3, 5], 1, 4, 4, "both", seed=3)
    with pytest.raises(ValueError, match="a sequence has 5 positions but max_len=4"):
        gk.hstu_attention(**{**case, "max_len": 4})
    with pytest.raises(ValueError, match=r"position_bias must be \(P,\) with P >= max_len=9"):
        gk.hstu_attention(**{**case, "max_len": 9})
    with pytest.raises(ValueError, match="time_bias needs timestamps"):
        gk.hstu_attention(**{**case, "timestamps": None})
    with pytest.raises(ValueError, match=r"expected q, k \(N, H, d_qk\)"):
        gk.hstu_attention(**{**case, "k": case["k"][:, :, :2]})
    with pytest.raises(ValueError, match="backend must be one of"):
        gk.layer_norm_mul(torch.zeros(2, 3), torch.zeros(2, 3), backend="cuda")
    with pytest.raises(ValueError, match="backend='cuda' needs CUDA tensors"):
        gk.jagged_to_padded(torch.zeros(3, 2), torch.tensor([0, 3]), 3, backend="cuda")
    with pytest.raises(ValueError, match="every sequence <= max_len=2"):
        gk.jagged_to_padded(torch.zeros(3, 2), torch.tensor([0, 3]), 2)
    monkeypatch.setattr(gk, "interpreting", lambda: CUDA)  # the kernels built for the other kind of device
    with pytest.raises(ValueError, match="backend='triton' needs the triton package and CUDA tensors"):
        gk.hstu_attention(**case, backend="triton")


def test_the_switch_names_triton_and_auto_picks_it_on_cuda_only():
    x = torch.zeros(2, 3, device=DEVICE)
    assert resolve("hstu", "triton", x).name == "triton"
    assert resolve("hstu", "auto", x).name == ("triton" if CUDA else "jagged")  # never the interpreter by default
    assert resolve("hstu", "auto", torch.zeros(1)).name == "jagged"
    assert gk.hstu_attention.__module__ == "genrec_kernels" and gk.BACKENDS == ("auto", "pytorch", "triton", "cuda")


# ---- HSTU with attention=triton ---------------------------------------------------------------------------------

@pytest.mark.parametrize("variant,denominator", [("paper", "max_len"), ("production", "length")])
def test_hstu_trained_with_triton_follows_the_pytorch_path(variant, denominator):
    """Three AdamW steps of a tiny HSTU (time and position bias on), once with ``attention=triton`` (attention and
    the fused output norm) and once with the padded reference: the same losses and weights at every step. The
    reference runs on the CPU where fbgemm is its CPU build (no CUDA kernels for its jagged <-> dense ops)."""
    pytest.importorskip("fbgemm_gpu")  # HSTU's PyTorch paths pad with fbgemm
    fbgemm_device = DEVICE if torch._C._dispatch_has_kernel_for_dispatch_key(
        "fbgemm::jagged_to_padded_dense_forward", DEVICE.upper()) else "cpu"
    g = torch.Generator().manual_seed(4)
    lengths = [6, 11, 1, 9]
    offsets, (timestamps, queries) = _offsets(lengths), _times(lengths, g)
    inputs = torch.randn(sum(lengths), 16, generator=g).to(DEVICE)
    targets = torch.randn(sum(lengths), 16, generator=g).to(DEVICE)
    runs = {}
    for attention, device in (("padded", fbgemm_device), ("triton", DEVICE)):
        torch.manual_seed(0)
        model = HSTU(dim=16, num_layers=2, num_heads=2, attention_dim=8, hidden_dim=6, max_len=12, dropout=0.0,
                     variant=variant, denominator=denominator, attention=attention).to(device)
        inputs, targets, offsets, timestamps, queries = (t.to(device) for t in (inputs, targets, offsets, timestamps,
                                                                                  queries))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for _ in range(3):
            loss = (model(inputs, offsets, timestamps, queries) - targets).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        runs[attention] = (losses, {name: p.detach() for name, p in model.named_parameters()})
    (losses_p, weights_p), (losses_t, weights_t) = runs["padded"], runs["triton"]
    assert losses_t == pytest.approx(losses_p, rel=1e-5) and losses_t[-1] < losses_t[0]
    for name, weight in weights_p.items():
        assert torch.allclose(weights_t[name].cpu(), weight.cpu(), atol=1e-5), name


# ---- the CUDA C++ source ----------------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_cuda_kernel_source_compiles_with_nvcc(tmp_path):
    result = subprocess.run(["nvcc", "-c", str(CUDA_SOURCES / "jagged.cu"), "-o", str(tmp_path / "jagged.o"),
                             "-arch=sm_80", "-Werror", "all-warnings"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "jagged.o").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_cuda_extension_binding_compiles_against_torch():
    """The binding (torch/extension.h: about 20 s to parse on 2 cores) as torch.utils.cpp_extension compiles it."""
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    includes = [f"-I{p}" for p in [*include_paths(), sysconfig.get_paths()["include"]]]
    result = subprocess.run(["c++", "-std=c++20", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=genrec_kernels_cuda",
                             *includes, str(CUDA_SOURCES / "jagged.cpp")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_bench_script_refuses_cleanly_without_a_gpu(tmp_path):
    if CUDA:
        pytest.skip("the benchmark runs here")
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, "-m", "scripts.bench.bench_kernels", "--quick", "--out", str(out)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "needs a CUDA GPU" in result.stdout and not out.exists()
