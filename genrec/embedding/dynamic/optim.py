"""Sparse row optimizers whose state lives beside each row (and travels with it between tiers).

Applied to the touched rows only, right after their gradients are aggregated in the backward pass, as FBGEMM's
fused TBE kernels do. ``weight (R, D)`` and ``state (R, S)`` are a tier's tensors; ``slots (U,)`` are distinct
rows and ``grad (U, D)`` their summed gradients. The formulas are FBGEMM's for ``sgd`` (EXACT_SGD), ``adagrad``
(EXACT_ADAGRAD) and ``rowwise_adagrad`` (EXACT_ROWWISE_ADAGRAD: one accumulator per row, the mean of the squared
gradient); ``adam`` is torch.optim.Adam run on each row as if it were its own parameter, stepped when the row is
touched (its step count is the last state column), so a row admitted late gets a full bias correction.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

SPARSE_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "adam")


@dataclass(frozen=True)
class RowOptimizer:
    """Args: name: one of :data:`SPARSE_OPTIMIZERS`; lr; eps; betas (adam)."""

    name: str = "adagrad"
    lr: float = 0.05
    eps: float = 1e-8
    betas: tuple[float, float] = (0.9, 0.999)

    def __post_init__(self) -> None:
        if self.name not in SPARSE_OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {SPARSE_OPTIMIZERS}, got {self.name!r}")

    def state_width(self, dim: int) -> int:
        """State columns per row: sgd 0, adagrad D, rowwise_adagrad 1, adam 2D + 1 (moments and step)."""
        return {"sgd": 0, "adagrad": dim, "rowwise_adagrad": 1, "adam": 2 * dim + 1}[self.name]

    @torch.no_grad()
    def step(self, weight: torch.Tensor, state: torch.Tensor, slots: torch.Tensor, grad: torch.Tensor) -> None:
        """Update rows ``slots (U,)`` of ``weight (R, D)`` and ``state (R, S)`` in place with ``grad (U, D)``."""
        if self.name == "sgd":
            weight.index_copy_(0, slots, weight.index_select(0, slots) - self.lr * grad)
            return
        rows, moments = weight.index_select(0, slots), state.index_select(0, slots)
        if self.name == "adagrad":
            moments += grad * grad
            rows -= self.lr * grad / (moments.sqrt() + self.eps)
        elif self.name == "rowwise_adagrad":
            moments += (grad * grad).mean(dim=1, keepdim=True)
            rows -= self.lr * grad / (moments.sqrt() + self.eps)
        else:
            dim = weight.shape[1]
            beta1, beta2 = self.betas
            exp_avg, exp_avg_sq, count = moments[:, :dim], moments[:, dim:2 * dim], moments[:, 2 * dim:]
            count += 1
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias_correction1 = 1 - beta1 ** count
            bias_correction2 = 1 - beta2 ** count
            denom = (exp_avg_sq.sqrt() / bias_correction2.sqrt()).add_(self.eps)
            rows -= (self.lr / bias_correction1) * exp_avg / denom
        weight.index_copy_(0, slots, rows)
        state.index_copy_(0, slots, moments)
