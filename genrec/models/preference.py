"""Preference losses over item log-probabilities: DPO (Rafailov et al., 2023) and Softmax-DPO (S-DPO, Chen et al.,
NeurIPS 2024: one chosen item against several rejected ones).

Inputs are sequence log-probabilities ``log pi(item | history)`` of the policy and of the frozen reference model
(for a generative recommender: the sum of the item's code log-probabilities). The implicit reward of an item is
``r = beta * (log pi(item) - log pi_ref(item))``.

* DPO: ``-log sigmoid(r_chosen - r_rejected)``; with ``K`` rejected items per example, the mean over the ``K``
  pairs (what a pairwise trainer such as TRL's sees when each negative is its own pair).
* S-DPO: ``-log sigmoid(-log sum_k exp(r_rejected_k - r_chosen))``; with ``K = 1`` this is DPO exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

LOSSES = ("dpo", "sdpo")


@dataclass
class PreferenceLoss:
    """Per-example results of :func:`preference_loss` (``B`` examples, ``K`` rejected items each).

    Attributes:
        losses: ``(B,)`` the loss of every example (the training loss is their mean).
        chosen_rewards: ``(B,)`` ``beta * (log pi - log pi_ref)`` of the chosen item.
        rejected_rewards: ``(B, K)`` the same for every rejected item.
    """

    losses: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor

    def stats(self) -> dict[str, torch.Tensor]:
        """Scalars to log: mean rewards, the margin ``r_chosen - mean_k r_rejected_k``, and the share of examples
        whose chosen reward beats every rejected one."""
        return {"chosen_reward": self.chosen_rewards.mean(), "rejected_reward": self.rejected_rewards.mean(),
                "reward_margin": (self.chosen_rewards - self.rejected_rewards.mean(1)).mean(),
                "reward_accuracy": (self.chosen_rewards[:, None] > self.rejected_rewards).all(1).float().mean()}


def preference_loss(kind: str, chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor,
                    ref_rejected: torch.Tensor, beta: float) -> PreferenceLoss:
    """``kind`` ``"dpo"`` or ``"sdpo"``; ``chosen (B,)`` and ``rejected (B, K)`` policy log-probabilities,
    ``ref_chosen (B,)`` and ``ref_rejected (B, K)`` the reference model's."""
    if kind not in LOSSES:
        raise ValueError(f"unknown preference loss {kind!r}; expected one of {LOSSES}")
    chosen_rewards = beta * (chosen - ref_chosen)
    rejected_rewards = beta * (rejected - ref_rejected)
    differences = rejected_rewards - chosen_rewards[:, None]  # (B, K)
    if kind == "dpo":
        losses = -F.logsigmoid(-differences).mean(1)
    else:
        losses = -F.logsigmoid(-torch.logsumexp(differences, dim=1))
    return PreferenceLoss(losses, chosen_rewards, rejected_rewards)
