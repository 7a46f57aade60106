"""The CUDA C++ jagged <-> padded kernels (``cuda/jagged.cu`` + the binding ``cuda/jagged.cpp``), built as a torch
extension with :func:`torch.utils.cpp_extension.load` on first use (needs a CUDA torch and nvcc; about a minute
the first time, cached in torch's extension folder afterwards)."""
from __future__ import annotations

import functools
from pathlib import Path

import torch

SOURCES = [Path(__file__).parent / "cuda" / name for name in ("jagged.cpp", "jagged.cu")]


@functools.cache
def extension():
    """The built module (``jagged_to_padded``, ``padded_to_jagged``)."""
    if not torch.cuda.is_available():
        raise RuntimeError("genrec_kernels' CUDA extension needs a CUDA build of torch and a GPU")
    from torch.utils.cpp_extension import load

    return load("genrec_kernels_cuda", [str(p) for p in SOURCES], extra_cuda_cflags=["-O3"], verbose=False)


def _pad_bits(pad_value: float, dtype: torch.dtype) -> int:
    """The bit pattern of ``pad_value`` in ``dtype``, as a signed int64 (what the binding's pad_bits takes)."""
    raw = torch.tensor([pad_value], dtype=dtype).view(torch.uint8)
    return int(torch.cat([raw, raw.new_zeros(8 - len(raw))]).view(torch.int64))


def jagged_to_padded(values: torch.Tensor, offsets: torch.Tensor, max_len: int, pad_value: float) -> torch.Tensor:
    """``values (N, D)`` contiguous CUDA -> ``(B, max_len, D)``."""
    with torch.cuda.device(values.device):
        stream = torch.cuda.current_stream().cuda_stream
        return extension().jagged_to_padded(values, offsets, max_len, _pad_bits(pad_value, values.dtype), stream)


def padded_to_jagged(padded: torch.Tensor, offsets: torch.Tensor, total: int) -> torch.Tensor:
    """``padded (B, L, D)`` contiguous CUDA -> ``(total, D)``."""
    with torch.cuda.device(padded.device):
        return extension().padded_to_jagged(padded, offsets, total, torch.cuda.current_stream().cuda_stream)
