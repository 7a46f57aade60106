"""What every generative recommender over semantic IDs shares: the SID table and its trie on the model's
device, the decoding settings, beam search to items, and the ``score_all`` view genrec's evaluator ranks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from genrec.data.batch import JaggedBatch, prefixes
from genrec.errors import UserError
from genrec.models.beam import BeamResult, Decoder, beam_search, sample_items
from genrec.models.ranking import RankingPolicy
from genrec.models.semantic_ids import SemanticIDs
from genrec.models.trie import PrefixTrie
from genrec.tokenize.sid_table import SIDTable


@dataclass
class TargetLogProbs:
    """Teacher-forced log-probabilities along the code path of every training target of a batch (``P`` targets).

    Attributes:
        levels: ``L`` tensors ``(P, K_l)``: log-softmax over level ``l``'s codes given the target's first ``l`` codes.
        items: ``(P,)`` the target items.
        positions: ``(P,)`` the position of the batch's ``N`` inputs after which the target comes (where an ID
            model trained on the same batch predicts it), -1 where no input position precedes it.
        item_head: ``(P, num_items + 1)`` log-softmax of a model's item head (scores for whole items beside the
            codes, from the state that predicts the target's first code), ``None`` for a model without one.
    """

    levels: list[torch.Tensor]
    items: torch.Tensor
    positions: torch.Tensor
    item_head: torch.Tensor | None = None

    def code_log_probs(self, codes: torch.Tensor) -> torch.Tensor:
        """``codes (P, L)`` of the targets -> ``(P, L)`` the log-probability of each code."""
        return torch.stack([level.gather(1, codes[:, i:i + 1])[:, 0] for i, level in enumerate(self.levels)], 1)

    def nll(self, codes: torch.Tensor) -> torch.Tensor:
        """Mean negative log-probability per code token (the next-token cross-entropy)."""
        return -self.code_log_probs(codes).mean()

    def item_nll(self) -> torch.Tensor:
        """Mean negative log-probability of the targets under the item head (its full-softmax cross-entropy)."""
        return -self.item_head.gather(1, self.items[:, None]).mean()

    def loss(self, codes: torch.Tensor) -> torch.Tensor:
        """The training loss: :meth:`nll`, plus :meth:`item_nll` for a model with an item head."""
        return self.nll(codes) if self.item_head is None else self.nll(codes) + self.item_nll()


class GenerativeRecommender(nn.Module):
    """Base class: a model that generates the next item's code tuple token by token.

    Subclasses implement :meth:`loss`, :meth:`item_log_probs` and :meth:`decoder`.

    Args:
        sid_table: the semantic IDs of the dataset's items (checked against the dataset by the builder).
        user_buckets: hashed user tokens (0: none).
        beam: beam width at evaluation.
        top_k: items returned per user (``<= beam``); metrics at cut-offs above it count the rest as misses.
        constrained: restrict decoding to valid semantic IDs with the prefix trie.
    """

    def __init__(self, sid_table: SIDTable, user_buckets: int = 0, beam: int = 20, top_k: int = 20,
                 constrained: bool = True):
        super().__init__()
        if not 1 <= top_k <= beam:
            raise UserError(f"model.decoding: top_k must lie in 1..beam, got top_k={top_k}, beam={beam}")
        self.sids = SemanticIDs(sid_table, user_buckets)
        self.sid_config = dict(sid_table.config)  # how the table was made (encoder, quantizer), for run records
        self.trie = PrefixTrie(self.sids.codes[1:], sid_table.codebook_sizes)
        self.beam, self.top_k, self.constrained = beam, top_k, constrained
        #: what the model recommends (:mod:`genrec.models.ranking`): its beam by the codes, unless a model with an
        #: item head chooses another policy
        self.ranking: RankingPolicy = RankingPolicy()
        #: remove each user's history from the results (set from ``eval.exclude_history`` by the builder)
        self.exclude_history = True

    @property
    def num_items(self) -> int:
        return self.sids.num_items

    def sequence_stacks(self) -> list[nn.Module]:
        """The modules that carry the training step's compute (``compile=true`` compiles their forward; the
        decoders call their layers directly, so decoding stays eager)."""
        raise NotImplementedError

    def target_log_probs(self, batch: JaggedBatch) -> TargetLogProbs:
        """Teacher-forced per-level log-probabilities of the training batch's targets (what :meth:`loss` averages;
        distillation reads the same tensors)."""
        raise NotImplementedError

    def loss(self, batch: JaggedBatch) -> torch.Tensor:
        """Mean next-token cross-entropy of a training batch (:meth:`TargetLogProbs.loss`)."""
        targets = self.target_log_probs(batch)
        return targets.loss(self.sids.codes[targets.items])

    def item_log_probs(self, batch: JaggedBatch, items: torch.Tensor) -> torch.Tensor:
        """Teacher-forced ``log p(item | history)`` of candidate ``items (B, M)`` -> ``(B, M)``: the sum of the
        per-level log-probabilities of the item's code tuple (each level a softmax over that level's codes).
        Differentiable (preference alignment trains through it)."""
        raise NotImplementedError

    def prefix_item_log_probs(self, batch: JaggedBatch, items: torch.Tensor) -> torch.Tensor:
        """:meth:`item_log_probs` after every position of a training batch (``N`` positions): ``items (N, M)`` ->
        ``(N, M)``, each given its sequence up to and including that position (one prompt per position,
        :func:`~genrec.data.batch.prefixes`); a model may compute it without building those prompts."""
        return self.item_log_probs(prefixes(batch), items)

    def ranking_scores(self, batch: JaggedBatch, items: torch.Tensor) -> torch.Tensor:
        """Differentiable: ``(B, M)`` the score :meth:`ranked` orders candidate ``items (B, M)`` by after each
        history (the ranking policy's :meth:`~genrec.models.ranking.RankingPolicy.scores`)."""
        return self.ranking.scores(self, batch, items)

    def prefix_ranking_scores(self, batch: JaggedBatch, items: torch.Tensor) -> torch.Tensor:
        """:meth:`ranking_scores` after every position of a training batch, as :meth:`prefix_item_log_probs`."""
        return self.ranking.prefix_scores(self, batch, items)

    def decoder(self, batch: JaggedBatch, use_cache: bool = True) -> Decoder:
        """Decoding state for the batch's users (``use_cache=False``: recompute everything at every step)."""
        raise NotImplementedError

    @torch.no_grad()
    def generate(self, batch: JaggedBatch, beam: int | None = None, top_k: int | None = None,
                 constrained: bool | None = None, exclude_history: bool | None = None,
                 use_cache: bool = True, decoder: Decoder | None = None) -> BeamResult:
        """Beam search for the batch's users; arguments left ``None`` take the model's settings (``decoder``:
        ``self.decoder(batch, use_cache)``)."""
        constrained = self.constrained if constrained is None else constrained
        exclude = self.exclude_history if exclude_history is None else exclude_history
        seen = (batch.seen_ids, batch.seen_offsets) if exclude and batch.seen_ids is not None else None
        return beam_search(decoder or self.decoder(batch, use_cache), self.sids, beam or self.beam,
                           top_k or self.top_k, self.trie if constrained else None, seen)

    @torch.no_grad()
    def ranked(self, batch: JaggedBatch) -> BeamResult:
        """The ``top_k`` items the model recommends to the batch's users, by its ranking policy."""
        return self.ranking.ranked(self, batch)

    @torch.no_grad()
    def sample(self, batch: JaggedBatch, samples: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``(B, samples)`` items drawn for each of the batch's users, with replacement, by sampling the model's
        codes constrained to valid semantic IDs (:func:`~genrec.models.beam.sample_items`)."""
        return sample_items(self.decoder(batch), self.trie, samples, generator)

    def score_all(self, batch: JaggedBatch) -> torch.Tensor:
        """``(B, num_items + 1)``: the score of each of the :meth:`ranked` ``top_k`` items (the beam's
        log-probability), ``-inf`` elsewhere, so the shared evaluator ranks exactly that list (MRR is therefore
        truncated at ``top_k``)."""
        return self.ranked(batch).score_matrix(self.num_items + 1)

    def scorer(self) -> "BeamScorer":
        """:meth:`score_all` that also counts the decoded tuples that are no item (for genrec-eval)."""
        return BeamScorer(self)

    def get_extra_state(self) -> dict[str, Any]:
        return {"sid_table_hash": self.sids.content_hash}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        saved = state.get("sid_table_hash")
        if saved != self.sids.content_hash:
            raise UserError(f"sid_table: the checkpoint was trained with SID table {saved}, the configured table is "
                            f"{self.sids.content_hash}; point sid_table at the table the model was trained with")


class BeamScorer:
    """``score_fn(batch) -> (B, num_items + 1)`` of a generative model (its beam's list, as :meth:`score_all`) that
    also counts the tuples it decoded, how many of them are no item, and sums every user's true target's score
    under what ranks (:meth:`GenerativeRecommender.ranking_scores`, whether or not the beam found it): its
    teacher-forced code log-probability ``log p(target | history)`` where the codes rank, its item-head
    log-probability where the head alone ranks (no code model runs then), ``code_weight`` x code + item-head
    log-probability where both do."""

    def __init__(self, model: GenerativeRecommender):
        self.model = model
        self.decoded, self.invalid, self.users, self.target_log_prob = 0, 0, 0, 0.0

    def __call__(self, batch: JaggedBatch) -> torch.Tensor:
        result = self.model.ranked(batch)
        self.decoded += int(result.found.sum())
        self.invalid += int(result.invalid.sum())
        with torch.no_grad():
            self.target_log_prob += float(self.model.ranking_scores(batch, batch.target_ids[:, None]).sum())
        self.users += batch.batch_size
        return result.score_matrix(self.model.num_items + 1)

    def pop_counts(self) -> tuple[int, int, int, float]:
        """``(decoded, invalid, users, summed target log-probability)`` since the last call, then zero them."""
        counts = (self.decoded, self.invalid, self.users, self.target_log_prob)
        self.decoded, self.invalid, self.users, self.target_log_prob = 0, 0, 0, 0.0
        return counts
