"""A decoder-only generator over semantic-ID tokens: one causal stack reads the history's code tokens and
continues them with the next item's codes.

A user's sequence is ``[BOS or user token, c(i_1, 0), ..., c(i_1, L-1), c(i_2, 0), ...]``: every item becomes its
``L`` code tokens. Training is next-token prediction at every position of each training sequence (one pass per
user, as for SASRec); each position predicts a token of a known level, so its softmax runs over that level's codes
only. Token embeddings come from a TorchRec table (:class:`genrec.embedding.ItemEmbedding` over the token
vocabulary, the same module the ID-based models use) and the output layer is tied to it, unless the backbone owns
a vocabulary (:class:`~genrec.models.backbones.HFVocabLM`, LC-Rec style): then the SID tokens are added to the
language model's own vocabulary and its input embeddings and LM head are used. With ``item_inputs`` every history
item also has its own embedding row, added at its last code token: the codes are shared by many items, the row
lets the stack tell apart items that share them (an item's own codes are generated from earlier tokens only).
With ``item_head`` the state that predicts an item's first code also scores every whole item (a softmax over the
items, trained beside the next-token loss, as in LIGER, Yang et al. 2024): codes shared by many items cannot tell
them apart, the item head can. With both and ``tie_item_tables`` the item head scores items with the item-input
table, as SASRec ties its input and output item embeddings: the row that says "this item was read" is the row that
says "this item comes next", so the full softmax trains every row at every position. ``rank`` chooses what the model recommends: a ranking policy of
:mod:`genrec.models.ranking` (``codes``, ``hybrid``, ``guided``, ``items``; every one but ``codes`` reads the item head).

Backbones (genrec/models/backbones.py): genrec's SASRec as a GPT-style stack with a KV cache, any other genrec
sequence encoder (HSTU) without one, or a `transformers` causal LM.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from genrec.data.batch import JaggedBatch, prefixes
from genrec.embedding import ItemEmbedding
from genrec.errors import UserError
from genrec.models.backbones import TokenBackbone, as_backbone
from genrec.models.generative import GenerativeRecommender, TargetLogProbs
from genrec.models.ranking import ranking_policy
from genrec.ops.jagged import jagged_index
from genrec.models.semantic_ids import BOS_TOKEN
from genrec.tokenize.sid_table import SIDTable

TOKEN_FEATURE = "sid_token"
ITEM_HEAD_FEATURE = "item_head"
def ranking_mode(name: str) -> dict:
    """A named ranking setting of conf/ranking (``codes``, ``head``, ``liger``, ``guided``) -> its
    ``model.decoding`` keys (``rank``, ``code_weight``)."""
    from omegaconf import OmegaConf

    from genrec.conf import CONF_DIR

    path = CONF_DIR / "ranking" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise UserError(f"ranking: got {name!r}, expected one of {known}")
    return OmegaConf.to_container(OmegaConf.load(path))


class SIDGenerator(GenerativeRecommender):
    """
    Args:
        sid_table: the items' semantic IDs.
        backbone: a causal stack (see :func:`genrec.models.backbones.as_backbone`); its width sets the
            token-embedding width.
        init_std: initialisation of the token table.
        user_buckets: when > 0, a hashed user token replaces BOS at the start of every sequence.
        item_inputs: also give every history item its own embedding (a table of ``num_items + 1`` rows), added to
            the input of the item's last code token; the tokens an item is generated from never see it, so
            training and decoding read the same inputs.
        item_head: also score whole items (a table of ``num_items + 1`` output rows) from the state that predicts
            an item's first code; trained with a full softmax over the items beside the next-token loss.
        tie_item_tables: the item head uses the ``item_inputs`` table (needs both); no table of its own.
        beam / top_k / constrained: decoding settings (see :class:`GenerativeRecommender`).
        rank / code_weight: the ranking policy (:func:`genrec.models.ranking.ranking_policy`); all but ``codes``
            need ``item_head``.
    """

    def __init__(self, sid_table: SIDTable, backbone: nn.Module, init_std: float = 0.02, user_buckets: int = 0,
                 beam: int = 20, top_k: int = 20, constrained: bool = True, item_inputs: bool = False,
                 item_head: bool = False, rank: str = "codes", tie_item_tables: bool = False,
                 code_weight: float = 1.0):
        super().__init__(sid_table, user_buckets, beam, top_k, constrained)
        self.ranking = ranking_policy(rank, code_weight)
        if self.ranking.needs_head and not item_head:
            raise UserError(f"model.decoding.rank={rank} ranks with the item head: set model.generator.item_head=true")
        if tie_item_tables and not (item_inputs and item_head):
            raise UserError("model.generator.tie_item_tables=true scores items with the item-input table: set "
                            "model.generator.item_inputs=true and model.generator.item_head=true")
        self.backbone: TokenBackbone = as_backbone(backbone)
        if self.backbone.owns_vocabulary:  # the SID tokens become new entries of the backbone's own vocabulary
            self.backbone.add_tokens(self.sids.vocab_size)
            self.tokens = None
        else:
            self.tokens = ItemEmbedding(self.sids.vocab_size - 1, self.backbone.dim, init_std, feature=TOKEN_FEATURE)
        self.item_inputs = ItemEmbedding(self.num_items, self.backbone.dim, init_std) if item_inputs else None
        self.has_item_head, self.tie_item_tables = item_head, tie_item_tables
        self.item_head = (ItemEmbedding(self.num_items, self.backbone.dim, init_std, feature=ITEM_HEAD_FEATURE)
                          if item_head and not tie_item_tables else None)

    def sequence_stacks(self) -> list[nn.Module]:
        return [self.backbone]  # its forward (training); prefill and step (decoding) are other methods

    def embed(self, tokens: torch.Tensor, token_items: torch.Tensor | None = None) -> torch.Tensor:
        """``(*,)`` tokens -> ``(*, D)`` input embeddings; with ``item_inputs``, plus the embedding of
        ``token_items (*,)`` (the item whose last code token it is, 0: none)."""
        x = self.backbone.embed(tokens) if self.tokens is None else self.tokens.lookup(tokens)
        if self.item_inputs is None or token_items is None:
            return x
        return x + self.item_inputs.lookup(token_items) * (token_items > 0).unsqueeze(-1).to(x.dtype)

    def _start_tokens(self, batch: JaggedBatch) -> torch.Tensor:
        if self.sids.user_buckets:
            return self.sids.user_tokens(batch.user_ids)
        return torch.full((batch.batch_size,), BOS_TOKEN, dtype=torch.int64, device=batch.item_ids.device)

    def _sequences(self, batch: JaggedBatch, items: torch.Tensor, offsets: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Item sequences ``items`` jagged by ``offsets (B + 1,)`` -> their token sequences with the start token:
        ``(T,)`` tokens, ``(B + 1,)`` offsets and ``(T,)`` token items (the item at its last code token, else 0)."""
        levels = self.sids.num_levels
        row, col = jagged_index(offsets)
        token_offsets = offsets * levels + torch.arange(len(offsets), device=offsets.device)
        tokens = torch.empty(int(token_offsets[-1]), dtype=torch.int64, device=items.device)
        tokens[token_offsets[:-1]] = self._start_tokens(batch)
        at = (token_offsets[:-1][row] + 1 + col * levels)[:, None] + torch.arange(levels, device=items.device)
        tokens[at] = self.sids.item_tokens(items)
        token_items = torch.zeros_like(tokens)
        token_items[at[:, -1]] = items
        return tokens, token_offsets, token_items

    def _logits(self, states: torch.Tensor, level: int) -> torch.Tensor:
        """``(..., D)`` states -> ``(..., K_level)`` logits over the level's codes (tied to the token table)."""
        if self.tokens is None:
            return self.backbone.logits(states, self.sids.level_slice(level))
        return states @ self.tokens.table()[self.sids.level_slice(level)].T

    def _level_log_probs(self, states: torch.Tensor, level: int) -> torch.Tensor:
        return F.log_softmax(self._logits(states, level).float(), dim=-1)

    def head_log_probs(self, states: torch.Tensor) -> torch.Tensor:
        """``(..., D)`` states -> ``(..., num_items + 1)`` the item head's log-softmax over the items (padding row 0:
        ``-inf``)."""
        table = self.item_inputs.table() if self.tie_item_tables else self.item_head.table()
        logits = (states @ table.T).float()
        logits[..., 0] = float("-inf")
        return F.log_softmax(logits, dim=-1)

    def item_head_log_probs(self, batch: JaggedBatch) -> torch.Tensor:
        """``(B, num_items + 1)``: the item head's log-probability of every item after each user's history."""
        users = torch.arange(batch.batch_size, device=batch.item_ids.device)
        no_prefix = torch.zeros(batch.batch_size, 0, dtype=torch.int64, device=users.device)
        return self.head_log_probs(self._run_rows(self._history(batch), users, no_prefix)[:, -1])

    def target_log_probs(self, batch: JaggedBatch) -> TargetLogProbs:
        """Training batch (``TrainSequences``: inputs and the next item at every position): the token sequence
        of each user's items plus the last target, every token predicted from the ones before it. The targets are
        every item of those sequences (``P = N + B``), user after user; a user's first item is predicted from the
        start token alone (no position of ``batch`` predicts it: ``positions`` is -1 there)."""
        levels = self.sids.num_levels
        # each user's items followed by its last target: (N + B,) jagged by offsets + arange
        full_offsets = batch.offsets + torch.arange(batch.batch_size + 1, device=batch.offsets.device)
        row, _ = jagged_index(batch.offsets)
        at_input = torch.arange(len(batch.item_ids), device=row.device) + row
        items = torch.empty(len(batch.item_ids) + batch.batch_size, dtype=torch.int64, device=batch.item_ids.device)
        items[at_input] = batch.item_ids
        items[full_offsets[1:] - 1] = batch.target_ids[batch.offsets[1:] - 1]
        # item j of a user (j >= 1) is the target of the batch's position j - 1 of that user
        positions = torch.full_like(items, -1)
        positions[at_input + 1] = torch.arange(len(batch.item_ids), device=row.device)
        tokens, token_offsets, token_items = self._sequences(batch, items, full_offsets)
        # inputs: every token but each sequence's last; labels: every item token (level = position % L)
        keep = torch.ones(len(tokens), dtype=torch.bool, device=tokens.device)
        keep[token_offsets[1:] - 1] = False
        states = self.backbone(self.embed(tokens[keep], token_items[keep]), full_offsets * levels)
        states = states.view(len(items), levels, -1)
        item_head = self.head_log_probs(states[:, 0]) if self.has_item_head else None
        return TargetLogProbs([self._level_log_probs(states[:, level], level) for level in range(levels)],
                              items, positions, item_head)

    def _history(self, batch: JaggedBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self._sequences(batch, batch.item_ids, batch.offsets)

    def _run_rows(self, history: tuple[torch.Tensor, torch.Tensor, torch.Tensor], users: torch.Tensor,
                  prefix: torch.Tensor) -> torch.Tensor:
        """Uncached: the backbone over ``history`` tokens of ``users (R,)`` followed by ``prefix (R, t)`` tokens ->
        ``(R, t + 1, D)`` states at the last ``t + 1`` positions."""
        tokens, offsets, token_items = history
        lengths = (offsets[1:] - offsets[:-1])[users] + prefix.shape[1]
        row_offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        row, col = jagged_index(row_offsets)
        at = (offsets[:-1][users][row] + col).clamp(max=len(tokens) - 1)
        values, items = tokens[at], token_items[at]
        if prefix.shape[1]:
            in_prefix = col - (lengths[row] - prefix.shape[1])  # position within the prefix, < 0 in the history
            values = torch.where(in_prefix >= 0, prefix[row, in_prefix.clamp(min=0)], values)
            items = torch.where(in_prefix >= 0, 0, items)
        states = self.backbone(self.embed(values, items), row_offsets)
        last = row_offsets[1:, None] - prefix.shape[1] - 1 + torch.arange(prefix.shape[1] + 1, device=users.device)
        return states[last]

    def item_log_probs(self, batch: JaggedBatch, items: torch.Tensor, use_cache: bool = True) -> torch.Tensor:
        """Differentiable. With a KV-cached backbone the history runs once per user and each candidate adds its
        ``L - 1`` code tokens (the decoder's cache, as in beam search); ``use_cache=False`` runs the backbone on
        every (user, candidate) sequence whole."""
        return self.code_log_probs_and_states(batch, items, use_cache)[0]

    def code_log_probs_and_states(self, batch: JaggedBatch, items: torch.Tensor, use_cache: bool = True
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`item_log_probs` ``(B, M)`` and the ``(B, D)`` states after each history (what the item head
        reads), from one pass."""
        if use_cache and self.backbone.supports_cache:
            levels, first_states = self._cached_level_log_probs(batch, items, self.sids.num_levels)
            total = levels[..., 0]
            for level in range(1, levels.shape[2]):  # level by level, as the beam adds them
                total = total + levels[..., level]
            return total, first_states
        codes = self.sids.codes[items]  # (B, M, L)
        tokens = self.sids.item_tokens(items.flatten())  # (B * M, L)
        users = torch.arange(len(items), device=items.device).repeat_interleave(items.shape[1])
        states = self._run_rows(self._history(batch), users, tokens[:, :-1])  # (B * M, L, D)
        codes = codes.flatten(0, 1)
        logp = torch.stack([self._level_log_probs(states[:, level], level).gather(1, codes[:, level:level + 1])[:, 0]
                            for level in range(self.sids.num_levels)], dim=1)
        return logp.sum(1).view(items.shape), states[:, 0].unflatten(0, items.shape)[:, 0]

    def first_levels_log_probs(self, batch: JaggedBatch, items: torch.Tensor, levels: int) -> torch.Tensor:
        """``items (B, M)`` -> ``(B, M, levels)``: each candidate's code log-probability at each of its first
        ``levels`` levels (the history runs once per user; the later levels are never decoded). Needs a KV-cached
        backbone."""
        if not self.backbone.supports_cache:
            raise ValueError("first_levels_log_probs needs a backbone with a KV cache")
        return self._cached_level_log_probs(batch, items, levels)[0]

    def _cached_level_log_probs(self, batch: JaggedBatch, items: torch.Tensor, levels: int
                                ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, M, levels)`` log-probabilities of ``items (B, M)``'s first code levels and the ``(B, D)`` states
        after each history, with the decoder's cache (as in beam search)."""
        codes = self.sids.codes[items]  # (B, M, L)
        users, width = items.shape
        decoder = _CachedDecoder(self, *self._history(batch))
        out = [decoder.start().gather(1, codes[..., 0])]  # (B, M)
        if levels > 1:
            decoder.select(torch.arange(users, device=items.device).repeat_interleave(width))
        for level in range(levels - 1):
            logp = decoder.step(codes[..., level].flatten(), level)  # (B * M, K_{level + 1})
            out.append(logp.gather(1, codes[..., level + 1].reshape(-1, 1)).view(users, width))
        return torch.stack(out, dim=2), decoder.first_states

    def prefix_item_log_probs(self, batch: JaggedBatch, items: torch.Tensor) -> torch.Tensor:
        """Differentiable :meth:`item_log_probs` at every position of a training batch (:class:`TrainSequences`:
        ``B`` sequences, ``N`` positions): ``items (N, M)`` candidates for the item after each position ->
        ``(N, M)`` log-probabilities, each given its sequence up to and including that position, i.e.
        ``item_log_probs(prefixes(batch), items)``. With a backbone that branches its cache (genrec's SASRec) the
        whole sequences run once and each candidate adds its ``L - 1`` code tokens, attending to its own prefix."""
        return self.prefix_code_log_probs_and_states(batch, items)[0]

    def prefix_code_log_probs_and_states(self, batch: JaggedBatch, items: torch.Tensor
                                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`prefix_item_log_probs` ``(N, M)`` and the ``(N, D)`` states after each prefix, from one pass."""
        if not self.backbone.supports_branching:
            return self.code_log_probs_and_states(prefixes(batch), items)
        levels, width, users = self.sids.num_levels, items.shape[1], batch.batch_size
        x, valid = self._left_padded(*self._history(batch))
        states, cache = self.backbone.prefill(x, valid, every_state=True)  # (B, T, D)
        row, col = jagged_index(batch.offsets)  # the sequence and position of each of the N prefixes
        seen = 1 + (col + 1) * levels  # each prefix's tokens: the start token and the codes of items 0 .. col
        first = valid.shape[1] - valid.long().sum(1)  # (B,) each sequence's first real column
        codes = self.sids.codes[items]  # (N, M, L)
        prefix_states = states[row, first[row] + seen - 1]  # (N, D) after each prefix's last token
        total = self._level_log_probs(prefix_states, 0).gather(1, codes[..., 0])
        # one row per (sequence, position slot, candidate), the same number per sequence; unused slots see the start
        # token only and are dropped below
        slots = int(batch.lengths.max())
        slot = row * slots + col  # (N,)
        slot_seen = torch.ones(users * slots, dtype=torch.int64, device=items.device)
        slot_seen[slot] = seen
        cache = self.backbone.branch(cache, slot_seen.view(users, slots).repeat_interleave(width, dim=1))
        slot_codes = codes.new_zeros(users * slots, width, levels)
        slot_codes[slot] = codes
        slot_codes = slot_codes.flatten(0, 1)  # (B * slots * M, L)
        for level in range(levels - 1):
            step = self.backbone.step(self.embed(slot_codes[:, level] + self.sids.offsets[level]), cache)
            logp = self._level_log_probs(step, level + 1).gather(1, slot_codes[:, level + 1:level + 2])
            total = total + logp.view(users * slots, width)[slot]
        return total, prefix_states

    def _left_padded(self, tokens: torch.Tensor, offsets: torch.Tensor, token_items: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Jagged token sequences (:meth:`_sequences`) -> ``(B, T, D)`` input embeddings, left-padded so that every
        row ends at the last column, and ``(B, T)`` bool: which are real tokens."""
        lengths = offsets[1:] - offsets[:-1]
        longest = int(lengths.max())
        row, col = jagged_index(offsets)
        padded = torch.zeros(len(lengths), longest, dtype=torch.int64, device=tokens.device)
        padded_items = torch.zeros_like(padded)
        valid = torch.zeros(len(lengths), longest, dtype=torch.bool, device=tokens.device)
        at = (row, col + longest - lengths[row])
        padded[at], padded_items[at], valid[at] = tokens, token_items, True
        return self.embed(padded, padded_items), valid

    def decoder(self, batch: JaggedBatch, use_cache: bool = True):
        if use_cache and self.backbone.supports_cache:
            return _CachedDecoder(self, *self._history(batch))
        return _FullDecoder(self, self._history(batch))


class _CachedDecoder:
    """Prefill the left-padded histories once, then one token per beam per step through the backbone's cache."""

    def __init__(self, model: SIDGenerator, tokens: torch.Tensor, offsets: torch.Tensor, token_items: torch.Tensor):
        self.model = model
        self.first_states, self.cache = model.backbone.prefill(*model._left_padded(tokens, offsets, token_items))

    def start(self) -> torch.Tensor:
        return self.model._level_log_probs(self.first_states, 0)

    def select(self, rows: torch.Tensor) -> None:
        self.cache = self.model.backbone.select(self.cache, rows)

    def step(self, codes: torch.Tensor, level: int) -> torch.Tensor:
        x = self.model.embed(codes + self.model.sids.offsets[level])
        return self.model._level_log_probs(self.model.backbone.step(x, self.cache), level + 1)


class _FullDecoder:
    """No cache: the backbone over every beam's whole history and prefix at every step."""

    def __init__(self, model: SIDGenerator, history: tuple[torch.Tensor, torch.Tensor, torch.Tensor]):
        self.model, self.history = model, history
        batch = len(history[1]) - 1
        self.users = torch.arange(batch, device=history[0].device)
        self.prefix = torch.zeros(batch, 0, dtype=torch.int64, device=history[0].device)

    def _next(self, level: int) -> torch.Tensor:
        states = self.model._run_rows(self.history, self.users, self.prefix)[:, -1]
        return self.model._level_log_probs(states, level)

    def start(self) -> torch.Tensor:
        return self._next(0)

    def select(self, rows: torch.Tensor) -> None:
        self.users, self.prefix = self.users[rows], self.prefix[rows]

    def step(self, codes: torch.Tensor, level: int) -> torch.Tensor:
        self.prefix = torch.cat([self.prefix, (codes + self.model.sids.offsets[level])[:, None]], dim=1)
        return self._next(level + 1)
