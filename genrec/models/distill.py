"""Distillation of an ID-based teacher (SASRec, HSTU: a distribution over every item) into a generative model over
semantic IDs (a distribution over code tuples, one level at a time).

The student's probability of an item is the product of its codes' probabilities, ``p(i) = prod_l p(c_l(i) |
c_<l(i))``. Summing the teacher's item probabilities by code prefix gives the teacher's distribution at every level
of the prefix tree (the trie's nodes): ``q(c_l = c | prefix) ∝ sum of q(i) over the items i under prefix + c``.
The student is trained teacher-forced along the true target's code path, where it already computes one softmax per
level for the next-token loss; so the distillation term compares, at every level, the student's softmax with the
teacher's distribution *under the target's own prefix* — no extra forward pass of the student. At level 0 this is
the exact cross-entropy between the teacher's and the student's item distributions marginalised to the first code;
deeper levels condition on the true prefix (levels where none of the teacher's top items shares that prefix carry
no teacher information and are left out).
"""
from __future__ import annotations

import torch


def teacher_top_k(scores: torch.Tensor, k: int, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``scores (P, num_items + 1)`` (the teacher's logits, ``-inf`` for padding) -> the top ``k`` items ``(P, k)``
    and their probabilities ``(P, k)``: ``softmax(scores / temperature)`` renormalised over those ``k`` items."""
    top, items = scores.topk(min(k, scores.shape[1] - 1), dim=1)
    return items, torch.softmax(top.float() / temperature, dim=1)


def level_targets(item_codes: torch.Tensor, items: torch.Tensor, probs: torch.Tensor, target_codes: torch.Tensor,
                  codebook_sizes: tuple[int, ...]) -> list[torch.Tensor]:
    """The teacher's unnormalised distribution over each level's codes under the target's own prefix.

    Args:
        item_codes: ``(num_items + 1, L)`` every item's codes (the SID table).
        items / probs: ``(P, k)`` the teacher's items and their probabilities (:func:`teacher_top_k`).
        target_codes: ``(P, L)`` the codes of the true targets.
        codebook_sizes: ``(L,)``.
    Returns:
        ``L`` tensors ``(P, K_l)``: entry ``c`` of level ``l`` sums ``probs`` over the teacher's items whose first
        ``l`` codes equal the target's and whose code ``l`` is ``c`` (rows sum to the mass under that prefix).
    """
    codes = item_codes[items]  # (P, k, L)
    under_prefix = probs.clone()  # the probability of items that share the target's prefix so far, else 0
    out = []
    for level, size in enumerate(codebook_sizes):
        out.append(torch.zeros(len(items), size, dtype=probs.dtype, device=probs.device)
                   .scatter_add_(1, codes[..., level], under_prefix))
        under_prefix = under_prefix * (codes[..., level] == target_codes[:, level:level + 1])
    return out


def distillation_loss(student_levels: list[torch.Tensor], teacher_levels: list[torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy ``-sum_c q(c) log p(c)`` between the teacher's level distributions (normalised per row)
    and the student's log-probabilities ``(P, K_l)``, over every (target, level) where the teacher has mass.
    The cross-entropy has the gradient of the KL divergence (they differ by the teacher's entropy)."""
    total, count = student_levels[0].new_zeros(()), 0
    for logp, q in zip(student_levels, teacher_levels):
        mass = q.sum(1)
        keep = mass > 0
        total = total - ((q[keep] / mass[keep, None]) * logp[keep]).sum()
        count += int(keep.sum())
    return total / max(count, 1)


def item_distillation_loss(student_items: torch.Tensor, items: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy ``-sum_j q_j log p(i_j)`` between the teacher's top items ``items (P, k)`` with
    probabilities ``probs (P, k)`` (:func:`teacher_top_k`) and a student's log-softmax over whole items
    ``student_items (P, num_items + 1)`` (an item head): the teacher's item distribution taught to it directly."""
    return -(probs * student_items.gather(1, items)).sum(1).mean()
