"""Item cold start (``data.split.cold_items``; TIGER §4.3, LIGER): rankings that can reach the items training never
saw, and metrics on the targets that are those items.

* :func:`unseen_items_beam`: a SID generator's beam decoded among the cold items' semantic IDs only (their codes come
  from their content, so constrained decoding reaches them although no interaction of theirs trained anything).
* :func:`unseen_items_by_first_code`: the cold items ranked by their first code alone (the level they most share with
  warm items), ties broken by the second.
* :func:`among`: a score matrix restricted to some items (every other item ``-inf``).
* :func:`reserve_share`: TIGER's ε: a list of ``k`` items of which a share ``epsilon`` comes from one ranking (the
  codes of the unseen items), at evenly spaced slots, and the rest from another (the warm model) in its own order.
* :func:`cold_split_metrics`: one evaluation pass's metrics on every target, on the cold targets and on the others.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from genrec.data.batch import JaggedBatch
from genrec.eval.breakdown import RankedUsers, group_metrics
from genrec.models.beam import BeamResult, beam_search
from genrec.models.sid_generator import SIDGenerator
from genrec.models.trie import PrefixTrie


def unseen_items_beam(model: SIDGenerator, batch: JaggedBatch, trie: PrefixTrie,
                      beam: int | None = None) -> BeamResult:
    """The model's beam (its ``top_k``, by code log-probability) constrained to the items of ``trie``:
    ``PrefixTrie(model.sids.codes[items], ...)`` over the cold ``items`` (the beam reads item IDs from the SID
    table, so the trie's own leaf numbering does not matter); the user's history removed as in :meth:`generate`.
    ``beam``: its width (default the model's); as wide as the number of items, it scores every one exactly."""
    seen = (batch.seen_ids, batch.seen_offsets) if model.exclude_history and batch.seen_ids is not None else None
    return beam_search(model.decoder(batch), model.sids, beam or model.beam, model.top_k, trie, seen)


def unseen_items_by_first_code(model: SIDGenerator, batch: JaggedBatch, items: torch.Tensor) -> torch.Tensor:
    """``items (M,)`` (the cold items) ranked by their first code's log-probability alone, the coarsest level, the one
    they most share with warm items; ties (items with the same first code) broken by the second level's ->
    ``(B, C)`` scores (``M - 1`` for each user's first item down to ``0``, ``-inf`` for every other item and the
    user's history)."""
    from genrec.eval.metrics import remove_seen

    users, width = batch.batch_size, len(items)
    logp = model.first_levels_log_probs(batch, items.expand(users, -1), min(2, model.sids.num_levels))
    order = logp[..., -1].argsort(dim=1, descending=True, stable=True)  # by the second level, then stably
    order = order.gather(1, logp[..., 0].gather(1, order).argsort(dim=1, descending=True, stable=True))  # by the first
    ranks = torch.arange(width - 1, -1, -1, dtype=logp.dtype, device=logp.device).expand(users, -1)
    scores = torch.full((users, model.num_items + 1), float("-inf"), dtype=logp.dtype, device=logp.device)
    scores.scatter_(1, items.to(logp.device)[order], ranks)
    return remove_seen(scores, batch)


def among(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """``scores (B, C)`` with every column where ``allowed (C,)`` is False set to ``-inf`` (a copy)."""
    return scores.masked_fill(~allowed.to(scores.device), float("-inf"))


def reserved_slots(k: int, share: float) -> list[int]:
    """The 0-based positions of a list of ``k`` given to the reserved ranking: ``m = round(share * k)`` of them,
    evenly spaced, each at the end of its block of ``k / m`` (``k = 20``, ``share = 0.1``: ranks 10 and 20)."""
    m = int(round(share * k))
    return [math.ceil((j + 1) * k / m) - 1 for j in range(m)]


def reserve_share(primary: torch.Tensor, reserved: torch.Tensor, share: float, k: int) -> torch.Tensor:
    """A list of ``k`` items per user whose :func:`reserved_slots` hold ``reserved``'s best items and whose other
    slots hold ``primary``'s best items in order (no item twice; a reserved slot with no finite reserved score left
    goes to ``primary``'s next item), as a score matrix: ``k - position`` for the listed items, ``-inf`` elsewhere.

    Args:
        primary / reserved: ``(B, C)`` scores (``-inf``: not a candidate).
        share: the share ε of the list that ``reserved`` may take.
        k: the list's length.
    """
    slots = set(reserved_slots(k, share))
    res_scores, res_items = reserved.topk(max(len(slots), 1), dim=1)
    res_ok = torch.isfinite(res_scores)
    # what the reserved ranking places is not listed twice
    blocked = primary.scatter(1, res_items, torch.where(res_ok, float("-inf"), primary.gather(1, res_items)))
    pri_scores, pri_items = blocked.topk(k, dim=1)
    pri_ok = torch.isfinite(pri_scores)
    out = torch.full_like(primary, float("-inf"))
    for row in range(len(primary)):
        reserved_row = [int(i) for i, ok in zip(res_items[row], res_ok[row]) if ok]
        primary_row = [int(i) for i, ok in zip(pri_items[row], pri_ok[row]) if ok]
        listed = []
        for position in range(k):
            source = reserved_row if position in slots and reserved_row else primary_row
            if source:
                listed.append(source.pop(0))
        out[row, listed] = torch.arange(k, k - len(listed), -1, dtype=out.dtype, device=out.device)
    return out


def cold_split_metrics(ranked: RankedUsers, cold_items: np.ndarray, ks: tuple[int, ...]) -> dict[str, dict]:
    """``{"all": metrics, "cold": metrics on the users whose target is a cold item, "warm": the others}``, each with
    its ``users`` count."""
    is_cold = np.isin(ranked.targets, cold_items).astype(np.int64)
    groups = group_metrics(ranked, 1 - is_cold, ["cold", "warm"], ks)
    return {"all": {"users": len(ranked.ranks), **ranked.metrics}, **groups}
