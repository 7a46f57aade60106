"""What a generative recommender recommends: one ranking policy per ``model.decoding.rank``, beside the beam search
they drive (:mod:`genrec.models.beam`).

A policy turns a model's scores into its recommended list (:meth:`RankingPolicy.ranked`) and says what score it
gives any item (:meth:`RankingPolicy.scores`, differentiable: what ``stage.score=ranking`` aligns and what the
evaluation's ``log p(target)`` reports), and what carries the ranking (``codes``, ``head`` or ``both``):

* ``codes`` (:class:`RankingPolicy`) — the beam over semantic IDs by the codes' log-probability (TIGER's generative
  retrieval; every generative model's default);
* ``items`` (:class:`HeadRanking`) — the item head alone over every item, no beam (dense retrieval on the
  generator's backbone);
* ``hybrid`` (:class:`LigerRanking`) — the codes' beam proposes, its items re-ranked by ``code_weight`` x code plus
  item-head log-probability (LIGER, Yang et al. 2024);
* ``guided`` (:class:`GuidedRanking`) — a beam steered by the item head's mass under each prefix, every prefix scored
  ``code_weight`` x code + head (:class:`~genrec.models.beam.GuidedDecoder`); at weight 0 no code model runs.

The policies other than ``codes`` read the model's item head (``model.generator.item_head=true``); the model offers
what they read: ``generate``, ``decoder``, ``trie``, ``item_log_probs`` / ``prefix_item_log_probs``,
``code_log_probs_and_states`` / ``prefix_code_log_probs_and_states``, ``head_log_probs``, ``item_head_log_probs``
and ``target_log_probs``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from genrec.errors import UserError
from genrec.models.beam import BeamResult, GuidedDecoder
from genrec.ops.jagged import jagged_index

if TYPE_CHECKING:
    from genrec.data.batch import JaggedBatch


_TRUNCATED = "items outside it count as misses (MRR truncated there)"


class RankingPolicy:
    """``rank=codes``: the beam's items by their code log-probability.

    Args:
        code_weight: the weight of the codes' log-probability beside the item head's (policies with a head).
    """

    name = "codes"
    needs_head = False

    def __init__(self, code_weight: float = 1.0):
        if code_weight < 0:
            raise UserError(f"model.decoding.code_weight: got {code_weight}, expected a value >= 0")
        self.code_weight = code_weight

    @property
    def carried_by(self) -> str:
        """What orders the list: ``codes``, ``head`` or ``both``."""
        return "codes"

    def describe(self, top_k: int) -> str:
        """How the list is ordered, in words (for run records)."""
        return f"the beam's top-{top_k} items ranked by log-probability; {_TRUNCATED}"

    def ranked(self, model, batch: "JaggedBatch") -> BeamResult:
        """The recommended ``top_k`` items of every user, best first."""
        return model.generate(batch)

    def scores(self, model, batch: "JaggedBatch", items: torch.Tensor) -> torch.Tensor:
        """Differentiable: ``(B, M)`` the score :meth:`ranked` gives ``items (B, M)`` after each history."""
        return model.item_log_probs(batch, items)

    def prefix_scores(self, model, batch: "JaggedBatch", items: torch.Tensor) -> torch.Tensor:
        """:meth:`scores` after every position of a training batch (``items (N, M)`` -> ``(N, M)``)."""
        return model.prefix_item_log_probs(batch, items)


def _masked_head(model, batch: "JaggedBatch") -> torch.Tensor:
    """``(B, num_items + 1)`` the item head's log-probabilities, the user's history removed when the model
    removes it."""
    log_probs = model.item_head_log_probs(batch)
    if model.exclude_history and batch.seen_ids is not None:
        log_probs[jagged_index(batch.seen_offsets)[0], batch.seen_ids] = float("-inf")
    return log_probs


def _head_scores(model, batch: "JaggedBatch", items: torch.Tensor) -> torch.Tensor:
    return model.item_head_log_probs(batch).gather(1, items)


def _head_prefix_scores(model, batch: "JaggedBatch", items: torch.Tensor) -> torch.Tensor:
    # one teacher-forced pass over the whole sequences gives the head after every position
    targets = model.target_log_probs(batch)
    return targets.item_head[targets.positions >= 0].gather(1, items)  # (N, num_items + 1), in order


class HeadRanking(RankingPolicy):
    """``rank=items``: the item head's ``top_k`` items over the whole corpus (no beam, no code model)."""

    name = "items"
    needs_head = True

    @property
    def carried_by(self) -> str:
        return "head"

    def describe(self, top_k: int) -> str:
        return f"the item head's top-{top_k} unseen items over the whole corpus (no generation)"

    def ranked(self, model, batch: "JaggedBatch") -> BeamResult:
        scores, items = _masked_head(model, batch).topk(model.top_k, dim=1)
        return BeamResult(items, scores, model.sids.codes[items])

    def scores(self, model, batch: "JaggedBatch", items: torch.Tensor) -> torch.Tensor:
        return _head_scores(model, batch, items)

    def prefix_scores(self, model, batch: "JaggedBatch", items: torch.Tensor) -> torch.Tensor:
        return _head_prefix_scores(model, batch, items)


class _WeightedRanking(RankingPolicy):
    """A list scored ``code_weight`` x code + item-head log-probability (the head alone at weight 0)."""

    needs_head = True

    @property
    def carried_by(self) -> str:
        return "both"

    #: what the beam is, in :meth:`describe`
    beam = "beam"

    def describe(self, top_k: int) -> str:
        code = "code" if self.code_weight == 1 else f"{self.code_weight:g} x code"
        return f"the {self.beam} top-{top_k} items ranked by {code} plus item-head log-probability; {_TRUNCATED}"

    def scores(self, model, batch: "JaggedBatch", items: torch.Tensor) -> torch.Tensor:
        if self.code_weight == 0:
            return _head_scores(model, batch, items)
        codes, states = model.code_log_probs_and_states(batch, items)  # one backbone pass gives both
        return model.head_log_probs(states).gather(1, items) + self.code_weight * codes

    def prefix_scores(self, model, batch: "JaggedBatch", items: torch.Tensor) -> torch.Tensor:
        if self.code_weight == 0:
            return _head_prefix_scores(model, batch, items)
        codes, states = model.prefix_code_log_probs_and_states(batch, items)
        return model.head_log_probs(states).gather(1, items) + self.code_weight * codes


class LigerRanking(_WeightedRanking):
    """``rank=hybrid``: the codes' beam proposes, the weighted score re-ranks its items (only the beam's items can
    be recommended, so the codes choose the candidates at any weight)."""

    name = "hybrid"

    def ranked(self, model, batch: "JaggedBatch") -> BeamResult:
        beam = model.generate(batch)
        hybrid = self.code_weight * beam.scores + model.item_head_log_probs(batch).gather(1, beam.items)
        scores, order = hybrid.sort(dim=1, descending=True)
        return BeamResult(beam.items.gather(1, order), scores,
                          beam.codes.gather(1, order[..., None].expand_as(beam.codes)))


class GuidedRanking(_WeightedRanking):
    """``rank=guided``: a beam steered by the item head's mass under each prefix; at weight 0 the beam only searches
    the trie for the head's best items (the head alone carries the list)."""

    name = "guided"
    beam = "beam, steered by the item head's mass under each prefix,"

    @property
    def carried_by(self) -> str:
        return "head" if self.code_weight == 0 else "both"

    def ranked(self, model, batch: "JaggedBatch") -> BeamResult:
        mass = model.trie.prefix_log_mass(_masked_head(model, batch))
        codes = model.decoder(batch) if self.code_weight else None  # weight 0: the codes are not scored at all
        return model.generate(batch, decoder=GuidedDecoder(codes, model.trie, mass, self.code_weight))


#: ``model.decoding.rank`` -> its policy
RANKINGS: dict[str, type[RankingPolicy]] = {p.name: p for p in (RankingPolicy, HeadRanking, LigerRanking,
                                                                  GuidedRanking)}


def ranking_policy(rank: str, code_weight: float = 1.0) -> RankingPolicy:
    """The policy of ``model.decoding.rank`` and ``code_weight``."""
    if rank not in RANKINGS:
        raise UserError(f"model.decoding.rank: got {rank!r}, expected one of {tuple(RANKINGS)}")
    return RANKINGS[rank](code_weight)
