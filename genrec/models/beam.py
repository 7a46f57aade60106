"""Batched beam search over semantic IDs, constrained by a :class:`~genrec.models.trie.PrefixTrie`.

A model supplies a :class:`Decoder` for a batch of users; :func:`beam_search` keeps ``beam`` code prefixes per
user, level by level, and returns the best ``top_k`` complete tuples as items with their log-probabilities. All
users and beams move together as tensors; the decoder keeps its own state (KV caches) and reorders it with
:meth:`Decoder.select` after every step.

Scores are the sum of the model's per-level log-probabilities (log-softmax over the level's codes). By default they
are not renormalised over the allowed codes: constraints only remove candidates, and an item under a prefix whose
continuations the model gives little mass pays for the mass on tuples that are no item. With ``renormalize`` each
level's log-probabilities are renormalised over the codes the trie allows (the model conditioned on generating an
item). History removal: with ``seen`` given,
tuples of the user's own history are removed at the last level, before the final top-``k``, so the beam still
returns ``top_k`` unseen items whenever the surviving prefixes hold that many. :func:`sample_items` draws items
from the same decoder by ancestral sampling instead.

A :class:`GuidedDecoder` lets a distribution over whole items steer the beam: a prefix is scored by
``code_weight`` x its code log-probability plus the log of the item distribution's mass under it, so the beam
keeps the prefixes that hold the items the item-level model ranks high, and a finished tuple scores
``code_weight`` x code + item log-probability.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from genrec.models.semantic_ids import SemanticIDs
from genrec.models.trie import BruteForceConstraint, PrefixTrie


class Decoder(Protocol):
    """Incremental decoding state for ``B`` users (a model's ``decoder(batch)``)."""

    def start(self) -> torch.Tensor:
        """``(B, K_0)`` log-probabilities of the first code."""

    def select(self, rows: torch.Tensor) -> None:
        """Keep the state rows ``rows (R,)`` in that order (reorders, drops and repeats beams)."""

    def step(self, codes: torch.Tensor, level: int) -> torch.Tensor:
        """Feed each row's code ``codes (R,)`` of ``level``; -> ``(R, K_{level+1})`` log-probabilities."""


@dataclass
class BeamResult:
    """The best ``k`` tuples per user, best first.

    Attributes:
        items: ``(B, k)`` dense item IDs; 0 where the tuple is no item (unconstrained decoding) or no candidate was
            left (score ``-inf``).
        scores: ``(B, k)`` log-probability of each tuple.
        codes: ``(B, k, L)`` the decoded tuples.
    """

    items: torch.Tensor
    scores: torch.Tensor
    codes: torch.Tensor

    @property
    def found(self) -> torch.Tensor:
        """``(B, k)`` bool: a tuple was decoded in this slot (finite score)."""
        return torch.isfinite(self.scores)

    @property
    def invalid(self) -> torch.Tensor:
        """``(B, k)`` bool: a decoded tuple that is no item."""
        return self.found & (self.items == 0)

    def score_matrix(self, num_columns: int) -> torch.Tensor:
        """``(B, num_columns)``: each returned item's score, ``-inf`` for every other item (and invalid tuples),
        so genrec's evaluator ranks exactly the returned list and counts everything else as a miss."""
        out = torch.full((len(self.items), num_columns), float("-inf"), device=self.scores.device)
        keep = self.found & (self.items > 0)
        rows = torch.arange(len(self.items), device=self.items.device)[:, None].expand_as(self.items)
        out[rows[keep], self.items[keep]] = self.scores[keep].float()
        return out


def _seen_keys(seen_ids: torch.Tensor, seen_offsets: torch.Tensor, num_columns: int) -> torch.Tensor:
    """Sorted ``row * num_columns + item`` of every history item."""
    rows = torch.repeat_interleave(torch.arange(len(seen_offsets) - 1, device=seen_ids.device),
                                   seen_offsets[1:] - seen_offsets[:-1])
    return torch.sort(rows * num_columns + seen_ids).values


def _is_seen(items: torch.Tensor, seen: torch.Tensor, num_columns: int) -> torch.Tensor:
    """``items (B, ...)`` -> bool, True where the item is in its row's history (``seen`` from :func:`_seen_keys`)."""
    if not len(seen):
        return torch.zeros_like(items, dtype=torch.bool)
    rows = torch.arange(len(items), device=items.device).view(-1, *[1] * (items.dim() - 1))
    keys = rows * num_columns + items
    pos = torch.searchsorted(seen, keys.flatten()).clamp(max=len(seen) - 1).view_as(keys)
    return (seen[pos] == keys) & (items > 0)


@torch.no_grad()
def beam_search(decoder: Decoder, sids: SemanticIDs, beam: int, top_k: int,
                trie: PrefixTrie | BruteForceConstraint | None = None,
                seen: tuple[torch.Tensor, torch.Tensor] | None = None, renormalize: bool = False) -> BeamResult:
    """Decode the ``top_k`` most likely code tuples for every user of ``decoder``.

    Args:
        decoder: the model's decoding state for ``B`` users.
        sids: the semantic IDs (codebook sizes and tuple -> item lookup).
        beam: prefixes kept per user after each level but the last.
        top_k: tuples returned per user (``<= beam``).
        trie: constrain every step to valid prefixes (``None``: unconstrained); a
            :class:`BruteForceConstraint` does the same the naive way.
        seen: ``(seen_ids (S,), seen_offsets (B + 1,))`` history items to remove from the results.
        renormalize: renormalise each level's log-probabilities over the codes ``trie`` allows (needs ``trie``).
    Returns:
        :class:`BeamResult` with ``k = top_k`` columns.
    """
    if not 1 <= top_k <= beam:
        raise ValueError(f"top_k must lie in 1..beam, got top_k={top_k}, beam={beam}")
    if renormalize and trie is None:
        raise ValueError("renormalize needs a trie: it renormalises over the allowed codes")
    logp = decoder.start()[:, None, :]  # (B, 1, K_0)
    batch, device = logp.shape[0], logp.device
    num_columns = sids.num_items + 1
    seen_keys = _seen_keys(*seen, num_columns) if seen is not None else None
    scores = torch.zeros(batch, 1, device=device)
    keys = torch.zeros(batch, 1, dtype=torch.int64, device=device)
    nodes = torch.zeros(batch, 1, dtype=torch.int64, device=device)
    codes = torch.zeros(batch, 1, 0, dtype=torch.int64, device=device)
    last = sids.num_levels - 1
    for level, size in enumerate(sids.codebook_sizes):
        if trie is not None:
            logp = logp.masked_fill(~trie.allowed(level, nodes), float("-inf"))
            if renormalize:  # a dead prefix (nothing allowed) stays -inf
                total_mass = logp.logsumexp(-1, keepdim=True)
                logp = torch.where(torch.isfinite(total_mass), logp - total_mass, logp)
        candidates = keys[..., None] * size + torch.arange(size, device=device)  # (B, W, K)
        if level == last and seen_keys is not None:
            logp = logp.masked_fill(_is_seen(sids.item_of_key(candidates), seen_keys, num_columns), float("-inf"))
        total = (scores[..., None] + logp).flatten(1)  # (B, W * K)
        scores, flat = total.topk(min(beam if level < last else top_k, total.shape[1]), dim=1)
        parent, code = flat // size, flat % size
        keys = candidates.flatten(1).gather(1, flat)
        codes = torch.cat([codes.gather(1, parent[..., None].expand(-1, -1, level)), code[..., None]], dim=2)
        if level == last:
            break
        if trie is not None:  # a dead prefix (score -inf) gets node -1: park it on node 0, it stays -inf
            nodes = trie.advance(level, nodes.gather(1, parent), code).clamp(min=0)
        width = parent.shape[1]
        decoder.select((torch.arange(batch, device=device)[:, None] * logp.shape[1] + parent).flatten())
        logp = decoder.step(code.flatten(), level).view(batch, width, -1)
    items = torch.where(torch.isfinite(scores), sids.item_of_key(keys), torch.zeros_like(keys))
    if scores.shape[1] < top_k:  # fewer tuples than top_k exist at all
        pad = top_k - scores.shape[1]
        items = torch.cat([items, items.new_zeros(batch, pad)], 1)
        scores = torch.cat([scores, scores.new_full((batch, pad), float("-inf"))], 1)
        codes = torch.cat([codes, codes.new_zeros(batch, pad, codes.shape[2])], 1)
    return BeamResult(items, scores, codes)


class GuidedDecoder:
    """A :class:`Decoder` whose scores add an item distribution's mass under each prefix to the wrapped decoder's.

    Each step returns ``code_weight * log p(code) + mass(prefix + code) - mass(prefix)``, so the beam's running
    score of a prefix is ``code_weight`` x its code log-probability plus ``mass(prefix)``, the log of the summed
    probability of the items under it (the root: 0), and a complete tuple scores ``code_weight`` x code + item
    log-probability. A code with no item under it scores ``-inf``.

    Args:
        decoder: the model's decoding state for ``B`` users; ``None`` at code weight 0, where the code
            log-probabilities take no part in the scores: the beam then only searches the trie for the items the
            distribution ranks high, and no code model runs.
        trie: the valid code tuples (the node ids ``mass`` is indexed by).
        mass: :meth:`PrefixTrie.prefix_log_mass` of the item distribution, one ``(B, n_{l+1})`` tensor per level.
        code_weight: weight of the code log-probabilities (0: the item distribution alone).
    """

    def __init__(self, decoder: Decoder | None, trie: PrefixTrie, mass: list[torch.Tensor], code_weight: float):
        if decoder is None and code_weight:
            raise ValueError(f"code_weight={code_weight} scores the codes: the guided beam needs the code decoder")
        self.decoder, self.trie, self.mass, self.code_weight = decoder, trie, mass, code_weight
        self.users = torch.arange(len(mass[0]), device=mass[0].device)
        self.nodes = torch.zeros_like(self.users)

    def _guided(self, logp: torch.Tensor | None, level: int) -> torch.Tensor:
        """``logp (R, K_level)`` of the rows' next code (``None`` without a code decoder) -> the guided scores,
        ``(R, K_level)``."""
        children = self.trie.table(level)[self.nodes].long()  # (R, K): the next node, -1 where none
        gain = self.mass[level][self.users[:, None], children.clamp(min=0)]
        if level > 0:  # a prefix with no mass is dead already (its score is -inf): subtract 0, not -inf
            parent = self.mass[level - 1][self.users, self.nodes]
            gain = gain - torch.where(torch.isfinite(parent), parent, torch.zeros_like(parent))[:, None]
        if self.code_weight:
            gain = gain + self.code_weight * logp
        return gain.masked_fill(children < 0, float("-inf"))

    def start(self) -> torch.Tensor:
        return self._guided(None if self.decoder is None else self.decoder.start(), 0)

    def select(self, rows: torch.Tensor) -> None:
        if self.decoder is not None:
            self.decoder.select(rows)
        self.users, self.nodes = self.users[rows], self.nodes[rows]

    def step(self, codes: torch.Tensor, level: int) -> torch.Tensor:
        self.nodes = self.trie.advance(level, self.nodes, codes).clamp(min=0)
        return self._guided(None if self.decoder is None else self.decoder.step(codes, level), level + 1)


def sample_items(decoder: Decoder, trie: PrefixTrie, samples: int,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """``samples`` items per user drawn with replacement by ancestral sampling, code by code, each level's softmax
    renormalised over the codes ``trie`` allows (the scores of beam search with ``renormalize``) -> ``(B, samples)``
    dense item IDs. Where every code tuple is an item this is the model's distribution over items; otherwise the
    mass a level puts on codes that lead to no item goes to the allowed codes in proportion."""
    logp = decoder.start()  # (B, K_0)
    rows = torch.arange(len(logp), device=logp.device).repeat_interleave(samples)
    decoder.select(rows)
    logp = logp[rows]
    nodes = torch.zeros(len(rows), dtype=torch.int64, device=logp.device)
    for level in range(trie.num_levels):
        probs = logp.float().masked_fill(~trie.allowed(level, nodes), float("-inf")).softmax(-1)
        code = torch.multinomial(probs, 1, generator=generator)[:, 0]
        nodes = trie.advance(level, nodes, code)  # on the last level: the item IDs
        if level + 1 < trie.num_levels:
            logp = decoder.step(code, level)
    return nodes.view(-1, samples)
