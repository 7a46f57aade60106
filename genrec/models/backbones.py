"""Causal stacks the decoder-only generator (genrec/models/sid_generator.py) runs over token embeddings.

Every backbone is used in two ways:

* ``forward(x (N, D), offsets (B + 1,)) -> (N, D)``: jagged sequences, causal (the :class:`SequenceEncoder`
  interface), for training and for decoding without a cache;
* ``prefill`` / ``step`` / ``select``: KV-cached decoding of left-padded batches, one token per row per step.

:func:`as_backbone` wraps genrec's own encoders: one that offers a KV-cached backbone gets it (SASRec, a GPT-style
pre-norm transformer: :class:`CachedSASRec`); any other :class:`SequenceEncoder` (HSTU, ...) runs uncached. :class:`HFCausalLM` is any
`transformers` decoder-only model (a fresh one from a config, or a checkpoint on disk by name).
"""
from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from genrec.errors import UserError
from genrec.models.encoder import SequenceEncoder
from genrec.models.sasrec import SASRec
from genrec.ops.jagged import jagged_to_padded, padded_to_jagged


class TokenBackbone(nn.Module):
    """Interface. ``dim``: the width ``D``; ``supports_cache``: whether ``prefill``/``step``/``select`` exist;
    ``supports_branching``: whether ``prefill(..., every_state=True)`` and ``branch`` exist too;
    ``owns_vocabulary``: whether the generator's tokens live in the backbone's own vocabulary (``add_tokens``,
    ``embed``, ``logits``) instead of a token table of the generator's."""

    dim: int
    supports_cache: bool = False
    supports_branching: bool = False
    owns_vocabulary: bool = False

    def add_tokens(self, count: int) -> None:
        """Append ``count`` tokens (the generator's token IDs ``0 .. count - 1``) to the backbone's vocabulary."""
        raise NotImplementedError(f"{type(self).__name__} has no vocabulary of its own")

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(*,)`` generator token IDs -> ``(*, D)`` input embeddings."""
        raise NotImplementedError(f"{type(self).__name__} has no vocabulary of its own")

    def logits(self, states: torch.Tensor, tokens: slice) -> torch.Tensor:
        """``(..., D)`` states -> ``(..., len(tokens))`` logits of the generator tokens ``tokens``."""
        raise NotImplementedError(f"{type(self).__name__} has no vocabulary of its own")

    def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def prefill(self, x: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """``x (B, T, D)`` left-padded, ``valid (B, T)`` bool -> ``(B, D)`` state after each row's last token, and
        the cache."""
        raise NotImplementedError(f"{type(self).__name__} has no KV cache")

    def step(self, x: torch.Tensor, cache: Any) -> torch.Tensor:
        """One more token per row ``x (R, D)`` -> ``(R, D)`` states; extends ``cache`` in place."""
        raise NotImplementedError(f"{type(self).__name__} has no KV cache")

    def select(self, cache: Any, rows: torch.Tensor) -> Any:
        """The cache of rows ``rows (R,)`` (reordered, repeated or dropped)."""
        raise NotImplementedError(f"{type(self).__name__} has no KV cache")

    def branch(self, cache: Any, seen: torch.Tensor) -> Any:
        """A prefilled cache of ``B`` sequences -> the cache of ``B * W`` rows, ``W`` per sequence (user after
        user), row ``(b, w)`` continuing the first ``seen[b, w]`` tokens of sequence ``b`` only (``seen (B, W)``,
        counted from its first real token); :meth:`step` then attends to those tokens and the row's own."""
        raise NotImplementedError(f"{type(self).__name__} cannot branch its cache")


class EncoderBackbone(TokenBackbone):
    """Any genrec :class:`SequenceEncoder` (e.g. HSTU), without a KV cache."""

    def __init__(self, encoder: SequenceEncoder):
        super().__init__()
        self.encoder, self.dim = encoder, encoder.dim

    def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.encoder(x, offsets)

    def compile(self, *args, **kwargs) -> None:
        """Compiles the wrapped encoder in place, as its own ``compile`` does it (SASRec: its dense stack)."""
        self.encoder.compile(*args, **kwargs)


class CachedSASRec(EncoderBackbone):
    """genrec's SASRec (pre-norm causal transformer, learned positions) with a KV cache over its own weights.

    Positions count from each row's first real token, as in SASRec's own forward, so cached decoding of a
    left-padded batch gives the states of the unpadded sequences. The history's keys and values are kept once per
    user; each beam caches only the tokens it decoded itself, and a step attends to both with one softmax. So
    :meth:`step` and :meth:`select` expect what beam search does: the rows are the users' beams, user after user,
    the same number per user.
    """

    supports_cache = True
    supports_branching = True

    def __init__(self, encoder: SASRec):
        super().__init__(encoder)

    def _embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if int(positions.max()) >= self.encoder.max_len:
            raise UserError(f"a sequence reaches {int(positions.max()) + 1} tokens but the backbone was built with "
                            f"max_len={self.encoder.max_len}")
        return x * math.sqrt(self.dim) + self.encoder.positions(positions)

    @staticmethod
    def _qkv(block, x: torch.Tensor) -> torch.Tensor:
        """``(R, t, D)`` -> ``(3, R, H, t, D / H)``."""
        rows, length, _ = x.shape
        return block.attn.qkv(block.norm1(x)).view(rows, length, 3, block.attn.num_heads, -1).permute(2, 0, 3, 1, 4)

    def prefill(self, x: torch.Tensor, valid: torch.Tensor, every_state: bool = False
                ) -> tuple[torch.Tensor, dict[str, Any]]:
        """As :meth:`TokenBackbone.prefill`; ``every_state``: the ``(B, T, D)`` states after every token."""
        rows, length, dim = x.shape
        positions = (valid.long().cumsum(1) - 1).clamp(min=0)
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        # padding keys are hidden; a padding query sees itself so that no softmax row is empty
        mask = ((causal & valid[:, None, :]) | torch.eye(length, dtype=torch.bool, device=x.device))[:, None]
        h = self._embed(x, positions)
        cache = {"keys": [], "values": [], "valid": valid, "next_position": valid.long().sum(1),
                 "own_keys": [None] * len(self.encoder.blocks), "own_values": [None] * len(self.encoder.blocks)}
        for block in self.encoder.blocks:
            q, k, v = self._qkv(block, h)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            h = h + block.attn.out(y.transpose(1, 2).reshape(rows, length, dim))
            h = h + block.ffn(block.norm2(h))
            cache["keys"].append(k)
            cache["values"].append(v)
        return self.encoder.final_norm(h if every_state else h[:, -1]), cache

    def step(self, x: torch.Tensor, cache: dict[str, Any]) -> torch.Tensor:
        valid = cache["valid"]
        users, history = valid.shape
        rows, dim = x.shape
        width = rows // users
        h = self._embed(x, cache["next_position"])[:, None]  # (R, 1, D)
        hidden = ~valid[:, None, None, :]  # (B, 1, 1 or W, T): the history keys a row does not see
        if "history_end" in cache:  # a branched cache: each row sees its user's history up to its own end
            columns = torch.arange(history, device=x.device)
            hidden = hidden | (columns >= cache["history_end"].view(users, 1, width, 1))
        for i, block in enumerate(self.encoder.blocks):
            q, k, v = self._qkv(block, h)  # (R, H, 1, D / H)
            heads, head_dim = q.shape[1], q.shape[3]
            own_keys = k if cache["own_keys"][i] is None else torch.cat([cache["own_keys"][i], k], dim=2)
            own_values = v if cache["own_values"][i] is None else torch.cat([cache["own_values"][i], v], dim=2)
            cache["own_keys"][i], cache["own_values"][i] = own_keys, own_values
            q = q * head_dim ** -0.5
            by_user = q.view(users, width, heads, head_dim).transpose(1, 2)  # (B, H, W, D / H)
            on_history = (by_user @ cache["keys"][i].transpose(-1, -2)).masked_fill(hidden, float("-inf"))
            on_own = (q @ own_keys.transpose(-1, -2)).view(users, width, heads, -1).transpose(1, 2)  # (B, H, W, t)
            weights = torch.softmax(torch.cat([on_history, on_own], dim=-1), dim=-1)
            y = (weights[..., :history] @ cache["values"][i]).transpose(1, 2).reshape(rows, heads, 1, head_dim)
            y = y + weights[..., history:].transpose(1, 2).reshape(rows, heads, 1, -1) @ own_values
            h = h + block.attn.out(y.reshape(rows, 1, dim))
            h = h + block.ffn(block.norm2(h))
        cache["next_position"] = cache["next_position"] + 1
        return self.encoder.final_norm(h[:, 0])

    def select(self, cache: dict[str, Any], rows: torch.Tensor) -> dict[str, Any]:
        def pick(tensors):
            return [None if t is None else t[rows] for t in tensors]

        picked = {**cache, "own_keys": pick(cache["own_keys"]), "own_values": pick(cache["own_values"]),
                  "next_position": cache["next_position"][rows]}
        if "history_end" in cache:
            picked["history_end"] = cache["history_end"][rows]
        return picked

    def branch(self, cache: dict[str, Any], seen: torch.Tensor) -> dict[str, Any]:
        users, width = seen.shape
        first = cache["valid"].shape[1] - cache["valid"].long().sum(1)  # (B,) each row's first real column
        rows = torch.arange(users, device=seen.device).repeat_interleave(width)
        branched = self.select(cache, rows)
        branched["history_end"] = (first[:, None] + seen).flatten()  # (B * W,) exclusive column
        branched["next_position"] = seen.flatten()
        return branched


def as_backbone(module: nn.Module) -> TokenBackbone:
    """A token backbone from a config's module: backbones as they are, a SequenceEncoder with the KV-cached backbone
    it offers (:meth:`~genrec.models.encoder.SequenceEncoder.cached_backbone`: SASRec's), or uncached."""
    if isinstance(module, TokenBackbone):
        return module
    if isinstance(module, SequenceEncoder):
        return module.cached_backbone() or EncoderBackbone(module)
    raise UserError(f"model.backbone: expected a SequenceEncoder or a TokenBackbone, got {type(module).__name__}")


def load_hf_model(auto_class, pretrained: str | None, config: dict[str, Any] | None):
    """A `transformers` model of ``auto_class``: ``pretrained`` (a local folder or a name in the local Hugging Face
    cache, ``local_files_only``: nothing is downloaded) or a fresh one from ``config`` (``model_type`` + that
    architecture's keys)."""
    from transformers import AutoConfig

    if pretrained:
        try:
            return auto_class.from_pretrained(pretrained, local_files_only=True)
        except OSError as err:
            raise UserError(f"model.backbone.pretrained={pretrained!r}: not a local model folder nor in the local "
                            f"Hugging Face cache (nothing is downloaded): {err}") from err
    if config:
        config = dict(config)
        return auto_class.from_config(AutoConfig.for_model(config.pop("model_type"), **config))
    raise UserError("model.backbone: set `pretrained` (a local checkpoint) or `config` (with model_type)")


class HFCausalLM(TokenBackbone):
    """A `transformers` decoder-only model (``AutoModel``: the stack without its LM head) over our embeddings.

    Args:
        pretrained: a model folder or a name in the local Hugging Face cache (loaded with ``local_files_only``:
            nothing is downloaded); its text vocabulary is not used, only the transformer stack.
        config: when ``pretrained`` is None, a fresh model: ``model_type`` (e.g. ``llama``, ``gpt2``, ``qwen2``)
            and that architecture's config keys.
        max_len: longest token sequence the generator will feed (checked against the model's position limit).
        gradient_checkpointing: recompute each layer's activations in the backward pass (less memory).
    """

    supports_cache = True

    def __init__(self, pretrained: str | None = None, config: dict[str, Any] | None = None, max_len: int | None = None,
                 gradient_checkpointing: bool = False):
        super().__init__()
        from transformers import AutoModel

        self.model = load_hf_model(AutoModel, pretrained, config)
        self._setup(max_len, gradient_checkpointing)

    def _setup(self, max_len: int | None, gradient_checkpointing: bool) -> None:
        config = self.model.config
        self.dim = int(config.hidden_size)
        limit = getattr(config, "max_position_embeddings", None)
        if max_len is not None and limit is not None and max_len > limit:
            raise UserError(f"model.backbone: sequences of up to {max_len} tokens, but the model takes at most "
                            f"{limit} positions (max_position_embeddings)")
        if gradient_checkpointing:  # transformers 5 renamed it activation checkpointing
            enable = getattr(self.model, "activation_checkpointing_enable", None)
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # transformers 5 renamed `past_key_values` to `cache`
        self._cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"

    def forward(self, x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        lengths = offsets[1:] - offsets[:-1]
        padded = jagged_to_padded(x, offsets, int(lengths.max()))
        mask = (torch.arange(padded.shape[1], device=x.device)[None, :] < lengths[:, None]).long()
        return padded_to_jagged(self.model(inputs_embeds=padded, attention_mask=mask).last_hidden_state, offsets)

    def _run(self, x: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache) -> torch.Tensor:
        return self.model(inputs_embeds=x, attention_mask=mask, position_ids=positions, use_cache=True,
                          **{self._cache_arg: cache}).last_hidden_state

    def prefill(self, x: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        from transformers import DynamicCache

        cache = {"kv": DynamicCache(), "mask": valid.long(), "next_position": valid.long().sum(1)}
        positions = (valid.long().cumsum(1) - 1).clamp(min=0)
        return self._run(x, cache["mask"], positions, cache["kv"])[:, -1], cache

    def step(self, x: torch.Tensor, cache: dict[str, Any]) -> torch.Tensor:
        cache["mask"] = torch.cat([cache["mask"], cache["mask"].new_ones(len(x), 1)], dim=1)
        h = self._run(x[:, None], cache["mask"], cache["next_position"][:, None], cache["kv"])[:, 0]
        cache["next_position"] = cache["next_position"] + 1
        return h

    def select(self, cache: dict[str, Any], rows: torch.Tensor) -> dict[str, Any]:
        cache["kv"].reorder_cache(rows)
        return {"kv": cache["kv"], "mask": cache["mask"][rows], "next_position": cache["next_position"][rows]}


class HFVocabLM(HFCausalLM):
    """LC-Rec style: a `transformers` causal LM (``AutoModelForCausalLM``) whose own vocabulary gains the
    generator's tokens (PAD, BOS, every level's codes, user buckets) as new entries after its text tokens; inputs go
    through its input embeddings and each level's softmax through its LM head's rows of that level. A text prompt
    can share the sequence (the vocabulary is the model's), and the model exports as an ordinary LM.

    With ``lora``, the stack is adapted by `peft` LoRA (``r``, ``alpha``, ``dropout``, ``target_modules``) and only
    the new token rows of the embeddings (and of an untied LM head) are trained (peft's trainable tokens), the base
    weights frozen; :meth:`save_adapter` writes the adapter alone, :meth:`merge` folds it into the weights for export.

    Args:
        pretrained / config / max_len / gradient_checkpointing: as :class:`HFCausalLM`. A ``pretrained`` folder
            saved by :meth:`save_merged` already holds the SID tokens: give ``text_vocab``.
        lora: LoRA settings, or ``None`` for full fine-tuning.
        adapter: a folder written by :meth:`save_adapter` to load onto the base model (implies LoRA).
        text_vocab: the size of the text vocabulary before the SID tokens (default: the model's vocabulary).
    """

    owns_vocabulary = True

    def __init__(self, pretrained: str | None = None, config: dict[str, Any] | None = None, max_len: int | None = None,
                 gradient_checkpointing: bool = False, lora: dict[str, Any] | None = None,
                 adapter: str | None = None, text_vocab: int | None = None):
        TokenBackbone.__init__(self)
        from transformers import AutoModelForCausalLM

        self.lm = load_hf_model(AutoModelForCausalLM, pretrained, config)
        self.text_vocab = int(text_vocab or self.lm.get_input_embeddings().num_embeddings)
        self.lora, self.adapter = (dict(lora) if lora else None), adapter
        self._setup(max_len, gradient_checkpointing)

    @property
    def causal_lm(self) -> nn.Module:
        """The `transformers` causal LM (inside the peft wrapper when LoRA is on; LoRA layers injected)."""
        return self.lm.get_base_model() if self.is_peft else self.lm

    @property
    def is_peft(self) -> bool:
        return hasattr(self.lm, "peft_config")

    @property
    def model(self) -> nn.Module:
        """The transformer stack without the LM head (what :class:`HFCausalLM` runs)."""
        return self.causal_lm.base_model

    def _embedding_names(self) -> tuple[str, str | None]:
        """Module names of the input embeddings and of the LM head when its weight is not tied to them."""
        lm = self.causal_lm
        names = {id(m): n for n, m in lm.named_modules()}
        inputs, outputs = lm.get_input_embeddings(), lm.get_output_embeddings()
        tied = outputs is None or outputs.weight is inputs.weight
        return names[id(inputs)], None if tied else names[id(outputs)]

    def add_tokens(self, count: int) -> None:
        self.lm.resize_token_embeddings(self.text_vocab + count, mean_resizing=False)
        if self.adapter:
            from peft import PeftModel

            self.lm = PeftModel.from_pretrained(self.lm, self.adapter, is_trainable=True)
        elif self.lora:
            from peft import LoraConfig, get_peft_model

            new = list(range(self.text_vocab, self.text_vocab + count))
            inputs, outputs = self._embedding_names()
            trainable = {inputs.rsplit(".", 1)[-1]: new}
            if outputs:
                trainable[outputs.rsplit(".", 1)[-1]] = new
            settings = dict(self.lora)
            self.lm = get_peft_model(self.lm, LoraConfig(
                r=settings.pop("r", 8), lora_alpha=settings.pop("alpha", 16), lora_dropout=settings.pop("dropout", 0.0),
                target_modules=list(settings.pop("target_modules", ["q_proj", "k_proj", "v_proj", "o_proj"])),
                trainable_token_indices=trainable, **settings))

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.causal_lm.get_input_embeddings()(tokens + self.text_vocab)

    def logits(self, states: torch.Tensor, tokens: slice) -> torch.Tensor:
        out = self.causal_lm.get_output_embeddings()(states)
        return out[..., self.text_vocab + tokens.start:self.text_vocab + tokens.stop]

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def save_adapter(self, folder: str | Path) -> None:
        """The LoRA adapter alone (peft's ``adapter_config.json`` + ``adapter_model.safetensors``: LoRA matrices and
        the new token rows), loadable onto the base model with ``PeftModel.from_pretrained``."""
        if not self.is_peft:
            raise UserError("model.backbone: no LoRA adapter to save (model.backbone.lora is null: full fine-tuning)")
        # the resized embedding matrices stay out: the trainable-token rows in the adapter hold every SID token
        self.lm.save_pretrained(str(folder), save_embedding_layers=False)

    def merge(self) -> None:
        """Fold the LoRA adapter into the weights (``merge_and_unload``): a plain causal LM, same outputs."""
        if self.is_peft:
            self.lm = self.lm.merge_and_unload()

    def save_merged(self, folder: str | Path) -> None:
        """Export: the adapter merged in, the whole causal LM (text vocabulary + SID tokens) with
        ``save_pretrained``; loads back with ``pretrained=<folder>`` and ``text_vocab``."""
        self.merge()
        self.lm.save_pretrained(str(folder))
