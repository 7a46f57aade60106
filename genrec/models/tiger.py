"""TIGER (Rajput et al., NeurIPS 2023): a T5 encoder-decoder that reads the history's semantic-ID tokens and
generates the next item's code tuple, on `transformers`' T5.

Encoder input: an optional hashed user token, then the code tokens of the history items, oldest first (the data
module truncates the history to the most recent ``data.max_len`` items). Decoder: BOS, then one token per level;
each level is a softmax over that level's codes only (the tokens of the other levels and the special tokens are
never candidates), in training and in decoding alike.

Decoding runs the encoder once per user and then the decoder one token at a time with a self-attention KV cache
per beam; the cross-attention keys and values are computed once per user and shared by that user's beams (no
copy per beam). ``decoder(batch, use_cache=False)`` is the plain alternative: the encoder once, then the whole
decoder on every beam's prefix at every step (the reference in tests and the naive decoder in
scripts/bench/bench_beam.py).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import T5Config, T5ForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutput

from genrec.data.batch import JaggedBatch
from genrec.models.generative import GenerativeRecommender, TargetLogProbs
from genrec.ops.jagged import jagged_to_padded
from genrec.models.semantic_ids import BOS_TOKEN, PAD_TOKEN
from genrec.tokenize.sid_table import SIDTable


class TIGER(GenerativeRecommender):
    """
    Args:
        sid_table: the items' semantic IDs.
        d_model / d_kv / d_ff / num_heads: T5 sizes (TIGER: 128, 64, 1024, 6).
        num_layers / num_decoder_layers: encoder / decoder depth (TIGER: 4 + 4).
        dropout: T5's ``dropout_rate`` (TIGER: 0.1).
        relative_attention_num_buckets: T5's relative position buckets.
        user_buckets: hashed user tokens prepended to the encoder input (TIGER: 2000; 0: none).
        beam / top_k / constrained: decoding settings (see :class:`GenerativeRecommender`).
    """

    def __init__(self, sid_table: SIDTable, d_model: int = 128, d_kv: int = 64, d_ff: int = 1024, num_heads: int = 6,
                 num_layers: int = 4, num_decoder_layers: int = 4, dropout: float = 0.1,
                 relative_attention_num_buckets: int = 32, user_buckets: int = 2000, beam: int = 20,
                 top_k: int = 20, constrained: bool = True):
        super().__init__(sid_table, user_buckets, beam, top_k, constrained)
        config = T5Config(vocab_size=self.sids.vocab_size, d_model=d_model, d_kv=d_kv, d_ff=d_ff, num_heads=num_heads,
                          num_layers=num_layers, num_decoder_layers=num_decoder_layers, dropout_rate=dropout,
                          relative_attention_num_buckets=relative_attention_num_buckets, feed_forward_proj="relu",
                          pad_token_id=PAD_TOKEN, decoder_start_token_id=BOS_TOKEN)
        self.t5 = T5ForConditionalGeneration(config)

    def sequence_stacks(self) -> list[nn.Module]:
        return [self.t5.encoder, self.t5.decoder]

    def encoder_inputs(self, batch: JaggedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """-> ``input_ids (B, T)`` (user token, then the history's code tokens, right-padded with PAD) and
        ``attention_mask (B, T)``."""
        levels = self.sids.num_levels
        tokens = self.sids.item_tokens(batch.item_ids).flatten()
        ids = jagged_to_padded(tokens, batch.offsets * levels, batch.max_length * levels, pad_value=PAD_TOKEN)
        if self.sids.user_buckets:
            ids = torch.cat([self.sids.user_tokens(batch.user_ids)[:, None], ids], dim=1)
        return ids, (ids != PAD_TOKEN).long()

    def _encode(self, batch: JaggedBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids, mask = self.encoder_inputs(batch)
        return ids, mask, self.t5.encoder(input_ids=ids, attention_mask=mask).last_hidden_state

    def _level_log_probs(self, logits: torch.Tensor, level: int) -> torch.Tensor:
        """``(..., V)`` logits -> ``(..., K_level)`` log-softmax over the level's codes."""
        return F.log_softmax(logits[..., self.sids.level_slice(level)].float(), dim=-1)

    def _level_log_probs_of(self, hidden: torch.Tensor, mask: torch.Tensor, items: torch.Tensor
                            ) -> list[torch.Tensor]:
        """Encoder states ``hidden (R, T, D)`` + ``mask (R, T)``, one target item per row ``items (R,)`` -> ``L``
        tensors ``(R, K_l)``: each level's log-probabilities given the item's codes before it (teacher forcing)."""
        tokens = self.sids.item_tokens(items)
        start = torch.full_like(tokens[:, :1], BOS_TOKEN)
        logits = self.t5(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask,
                         decoder_input_ids=torch.cat([start, tokens[:, :-1]], 1), use_cache=False).logits
        return [self._level_log_probs(logits[:, level], level) for level in range(self.sids.num_levels)]

    def target_log_probs(self, batch: JaggedBatch) -> TargetLogProbs:
        """One target per sequence (``batch.target_ids (B,)``, prefix examples), predicted after the prefix's last
        position."""
        _, mask, hidden = self._encode(batch)
        return TargetLogProbs(self._level_log_probs_of(hidden, mask, batch.target_ids), batch.target_ids,
                              batch.offsets[1:] - 1)

    def item_log_probs(self, batch: JaggedBatch, items: torch.Tensor) -> torch.Tensor:
        _, mask, hidden = self._encode(batch)
        rows = torch.arange(len(items), device=items.device).repeat_interleave(items.shape[1])
        flat = items.flatten()
        targets = TargetLogProbs(self._level_log_probs_of(hidden[rows], mask[rows], flat), flat, rows)
        return targets.code_log_probs(self.sids.codes[flat]).sum(1).view(items.shape)

    def decoder(self, batch: JaggedBatch, use_cache: bool = True):
        _, mask, hidden = self._encode(batch)
        return (_CachedDecoder if use_cache else _FullDecoder)(self, hidden, mask)


class _CachedDecoder:
    """T5's decoder one token at a time over the loaded weights of ``model.t5``: self-attention keys/values cached
    per beam, cross-attention keys/values computed once per user and attended by all of its beams at once (the
    beams of a user are consecutive rows, the same number for every user, as beam search keeps them).

    The self-attention cache is one preallocated tensor for all blocks, ``(L, blocks, 2, R, H * d_kv)`` with ``L``
    the tuple length: appending writes in place, and reordering the beams is one ``index_select`` of the positions
    filled so far. With at most ``L`` keys per row, the attention over them is an elementwise product and a sum
    (a batched matmul of ``R * H`` one-row products costs more in dispatch than in arithmetic). Inference only:
    nothing here records gradients.
    """

    def __init__(self, model: TIGER, hidden: torch.Tensor, mask: torch.Tensor):
        t5 = model.t5
        self.model, self.t5, self.blocks = model, t5, t5.decoder.block
        config = t5.config
        self.heads, self.d_kv = config.num_heads, config.d_kv
        self.scale = getattr(config, "scale_decoder_outputs", config.tie_word_embeddings)
        self.batch, length = hidden.shape[:2]
        self.qkv = [torch.cat([a.q.weight, a.k.weight, a.v.weight]) for a in
                    (block.layer[0].SelfAttention for block in self.blocks)]  # (3 * H * d_kv, D) per block
        self.cross = []  # per block: keys (B, H, d_kv, T) and values (B, H, T, d_kv), contiguous for the matmuls
        for block in self.blocks:
            attention = block.layer[1].EncDecAttention
            keys, values = (self._heads(proj(hidden)) for proj in (attention.k, attention.v))
            self.cross.append((keys.transpose(-1, -2).contiguous(), values.contiguous()))
        self.cross_bias = torch.zeros(self.batch, 1, 1, length, device=hidden.device)
        self.cross_bias.masked_fill_(~mask.bool()[:, None, None, :], torch.finfo(torch.float32).min)
        self.cache: torch.Tensor | None = None  # (L, blocks, 2, R, H * d_kv), allocated at the first token
        self.length = 0

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(R, T, H * d_kv)`` -> ``(R, H, T, d_kv)``."""
        return x.view(x.shape[0], x.shape[1], self.heads, self.d_kv).transpose(1, 2)

    @torch.no_grad()
    def _run(self, tokens: torch.Tensor, level: int) -> torch.Tensor:
        """Feed one token per row ``tokens (R,)`` -> ``(R, K_level)`` log-probabilities of the next token, a code
        of ``level`` (the output layer is applied to that level's rows only)."""
        rows, step, inner = len(tokens), self.length, self.heads * self.d_kv
        width = rows // self.batch
        x = self.t5.decoder.embed_tokens(tokens)  # (R, D)
        if self.cache is None:
            self.cache = x.new_zeros((self.model.sids.num_levels, len(self.blocks), 2, rows, inner))
        position_bias = self.blocks[0].layer[0].SelfAttention.compute_bias(step + 1, step + 1, device=x.device)
        position_bias = position_bias[0, :, -1].T  # (step + 1, H): this token's bias to every cached position
        for i, block in enumerate(self.blocks):
            layer, attention = block.layer[0], block.layer[0].SelfAttention
            q, k, v = F.linear(layer.layer_norm(x), self.qkv[i]).split(inner, dim=1)
            self.cache[step, i, 0], self.cache[step, i, 1] = k, v
            keys, values = self.cache[:step + 1, i].view(step + 1, 2, rows, self.heads, self.d_kv).unbind(1)
            scores = (q.view(rows, self.heads, self.d_kv) * keys).sum(-1) + position_bias[:, None]  # (step+1, R, H)
            weights = torch.softmax(scores.float(), dim=0).to(q.dtype)
            x = x + attention.o((weights[..., None] * values).sum(0).view(rows, inner))

            layer, attention = block.layer[1], block.layer[1].EncDecAttention
            q = attention.q(layer.layer_norm(x)).view(self.batch, width, self.heads, self.d_kv).transpose(1, 2)
            keys, values = self.cross[i]
            weights = torch.softmax((q @ keys + self.cross_bias).float(), dim=-1)  # (B, H, W, T)
            x = x + attention.o((weights.to(q.dtype) @ values).transpose(1, 2).reshape(rows, inner))

            layer = block.layer[2]
            x = x + layer.DenseReluDense(layer.layer_norm(x))
        x = self.t5.decoder.final_layer_norm(x)
        self.length += 1
        x = x * self.t5.config.d_model ** -0.5 if self.scale else x
        logits = x @ self.t5.lm_head.weight[self.model.sids.level_slice(level)].T
        return F.log_softmax(logits.float(), dim=-1)

    def start(self) -> torch.Tensor:
        bos = torch.full((self.batch,), BOS_TOKEN, dtype=torch.int64, device=self.cross_bias.device)
        return self._run(bos, 0)

    @torch.no_grad()
    def select(self, rows: torch.Tensor) -> None:
        cache = self.cache.new_empty(self.cache.shape[:3] + (len(rows), self.cache.shape[4]))
        torch.index_select(self.cache[:self.length], 3, rows, out=cache[:self.length])
        self.cache = cache

    def step(self, codes: torch.Tensor, level: int) -> torch.Tensor:
        return self._run(codes + self.model.sids.offsets[level], level + 1)


class _FullDecoder:
    """No cache: the encoder runs once per user, then T5's whole decoder runs on every beam's full prefix at every
    step (the encoder states are repeated per beam)."""

    def __init__(self, model: TIGER, hidden: torch.Tensor, mask: torch.Tensor):
        self.model, self.hidden, self.mask = model, hidden, mask
        self.prefix = torch.full((len(hidden), 1), BOS_TOKEN, dtype=torch.int64, device=hidden.device)

    def _logits(self) -> torch.Tensor:
        return self.model.t5(encoder_outputs=BaseModelOutput(last_hidden_state=self.hidden), attention_mask=self.mask,
                             decoder_input_ids=self.prefix, use_cache=False).logits[:, -1]

    def start(self) -> torch.Tensor:
        return self.model._level_log_probs(self._logits(), 0)

    def select(self, rows: torch.Tensor) -> None:
        self.hidden, self.mask, self.prefix = self.hidden[rows], self.mask[rows], self.prefix[rows]

    def step(self, codes: torch.Tensor, level: int) -> torch.Tensor:
        self.prefix = torch.cat([self.prefix, (codes + self.model.sids.offsets[level])[:, None]], dim=1)
        return self.model._level_log_probs(self._logits(), level + 1)
