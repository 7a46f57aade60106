"""The attention switch: named implementations per attention family, chosen by config (``model.encoder.attention``).

Families and their call signatures:

* ``"softmax"`` (SASRec) — ``fn(q, k, v, offsets, dropout_p) -> out``: causal softmax attention over right-padded
  ``(B, H, L, d)`` tensors whose sequence ``b`` is ``offsets[b + 1] - offsets[b]`` long (``offsets=None``: every
  row is ``L`` long); ``out`` is ``(B, H, L, d)`` (values at padded query positions are unspecified).
* ``"hstu"`` (HSTU) — ``fn(q, k, v, layout, bias, scale) -> out``: pointwise causal attention over jagged
  ``q, k (N, H, d_qk)``, ``v (N, H, d_v)``; ``layout`` a :class:`~genrec.ops.jagged.JaggedLayout`, ``bias`` a
  :class:`~genrec.models.attention.hstu.RelativeBias` or ``None``, ``scale (B,)``; ``out`` is ``(N, H, d_v)``.

``"auto"`` picks, per call, the available implementation with the lowest ``auto_rank``; implementations registered
without a rank (the padded references) run only when named. A kernel package adds itself with
``register("hstu", "triton", fn, available=lambda t: t.is_cuda, auto_rank=0)`` and is then chosen by ``auto``
wherever it can run, with the PyTorch reference still there to test it against (``"triton"`` is registered so by
:mod:`genrec.models.attention.kernels`). ``auto_available`` narrows where ``auto`` may choose an implementation
that can run more widely when named (Triton's CPU interpreter: correct, far too slow to be picked by default).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from genrec.errors import UserError

AUTO = "auto"
CONFIG_KEY = "model.encoder.attention"


@dataclass(frozen=True)
class AttentionImpl:
    """One implementation. ``available(t)`` says whether it can run on tensors like ``t`` (device, dtype) in this
    environment; ``auto_rank`` orders the candidates of ``"auto"`` (lower first; ``None``: never chosen by auto);
    ``auto_available(t)`` (default: ``available``) says where ``"auto"`` may choose it. ``output`` (family
    ``"hstu"``, optional) is a fused ``output(u, a, weight, bias, eps) = u * LayerNorm(a)`` for HSTU's output path
    that goes with this implementation: ``u, a (N, E)``, ``weight, bias (E,)`` or ``None`` -> ``(N, E)``."""

    name: str
    fn: Callable[..., torch.Tensor]
    available: Callable[[torch.Tensor], bool]
    auto_rank: int | None
    requirement: str
    auto_available: Callable[[torch.Tensor], bool] | None = None
    output: Callable[..., torch.Tensor] | None = None


_REGISTRY: dict[str, dict[str, AttentionImpl]] = {"softmax": {}, "hstu": {}}


def _always(_: torch.Tensor) -> bool:
    return True


def register(family: str, name: str, fn: Callable[..., torch.Tensor],
             available: Callable[[torch.Tensor], bool] = _always, auto_rank: int | None = None,
             requirement: str = "", auto_available: Callable[[torch.Tensor], bool] | None = None,
             output: Callable[..., torch.Tensor] | None = None) -> Callable[..., torch.Tensor]:
    """Add ``fn`` as implementation ``name`` of ``family``; ``requirement`` explains ``available`` in error
    messages (e.g. ``"CUDA tensors in fp16/bf16 and the flash_attn package"``); ``auto_available`` and ``output``
    as in :class:`AttentionImpl`. Returns ``fn``."""
    if family not in _REGISTRY:
        raise ValueError(f"unknown attention family {family!r}; known: {sorted(_REGISTRY)}")
    if name == AUTO or name in _REGISTRY[family]:
        raise ValueError(f"attention implementation {family}/{name} is already defined")
    _REGISTRY[family][name] = AttentionImpl(name, fn, available, auto_rank, requirement, auto_available, output)
    return fn


def names(family: str) -> list[str]:
    """Every choice for ``family``, ``"auto"`` first."""
    return [AUTO, *_REGISTRY[family]]


def check_name(family: str, name: str) -> str:
    """Fail early (at model construction) on a name that does not exist for ``family``."""
    if name != AUTO and name not in _REGISTRY[family]:
        raise UserError(f"{CONFIG_KEY}={name!r} is not a {family} attention implementation; "
                        f"choose one of {names(family)}")
    return name


def resolve(family: str, name: str, like: torch.Tensor) -> AttentionImpl:
    """The implementation to run on tensors like ``like``: ``name`` itself (an error if it cannot run here), or
    for ``"auto"`` the best-ranked one that can."""
    impls = _REGISTRY[family]
    if name == AUTO:
        ranked = sorted((i for i in impls.values() if i.auto_rank is not None), key=lambda i: i.auto_rank)
        for impl in ranked:
            if (impl.auto_available or impl.available)(like):
                return impl
        raise ValueError(f"no {family} attention implementation can run on {like.device} {like.dtype}")
    impl = impls.get(check_name(family, name))
    if not impl.available(like):
        raise UserError(f"{CONFIG_KEY}={name!r} needs {impl.requirement or 'another environment'}; "
                        f"got {like.device} {like.dtype} tensors (use {CONFIG_KEY}=auto)")
    return impl
