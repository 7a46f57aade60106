"""Semantic IDs as model tokens: the SID table on the model's device, the token layout, tuple -> item lookup.

Token layout shared by the generative models (``V = 2 + sum(K_l) + user_buckets`` tokens)::

    0                      PAD
    1                      BOS (start of a sequence / decoder start)
    2 + sum(K_<l) + c      code c of level l (each level has its own range, so a token names its level)
    2 + sum(K) + h         hashed user bucket h (optional, TIGER's user token)
"""
from __future__ import annotations

import torch
from torch import nn

from genrec.tokenize.sid_table import SIDTable

PAD_TOKEN, BOS_TOKEN = 0, 1
#: The layout above in one line (for export manifests).
TOKEN_LAYOUT = ("0 PAD, 1 BOS, 2 + sum(K_<l) + c: code c of level l, 2 + sum(K) + h: hashed user bucket h "
                "(h = (dense user ID * 2654435761) mod 2^32 mod user_buckets)")
_FIRST_CODE_TOKEN = 2
#: Knuth's multiplicative hash constant: spreads consecutive user IDs over the buckets.
_USER_HASH = 2654435761


class SemanticIDs(nn.Module):
    """An :class:`SIDTable` as tensors (non-persistent buffers, so they follow the model to its device).

    Args:
        table: the SID table; its codes are indexed by dense item ID.
        user_buckets: number of hashed user tokens (0: none).

    Attributes:
        codes: ``(num_items + 1, L)`` int64 (row 0 = -1).
        sizes: ``(L,)`` codebook size of every level.
        offsets: ``(L,)`` first token of every level.
    """

    def __init__(self, table: SIDTable, user_buckets: int = 0):
        super().__init__()
        self.codebook_sizes = tuple(table.codebook_sizes)
        self.num_levels, self.num_items = table.num_levels, table.num_items
        self.content_hash = table.content_hash
        self.user_buckets = int(user_buckets)
        sizes = torch.tensor(self.codebook_sizes, dtype=torch.int64)
        offsets = _FIRST_CODE_TOKEN + torch.cumsum(sizes, 0) - sizes
        self.register_buffer("codes", torch.from_numpy(table.codes.copy()), persistent=False)
        self.register_buffer("sizes", sizes, persistent=False)
        self.register_buffer("offsets", offsets, persistent=False)
        # mixed-radix keys of every item's tuple, sorted, for tuple -> item lookups
        radix = torch.ones(self.num_levels, dtype=torch.int64)
        for level in range(self.num_levels - 2, -1, -1):
            radix[level] = radix[level + 1] * sizes[level + 1]
        keys = self.codes[1:] @ radix
        sorted_keys, order = torch.sort(keys)
        self.register_buffer("sorted_keys", sorted_keys, persistent=False)
        self.register_buffer("key_order", order + 1, persistent=False)

    @property
    def user_token_offset(self) -> int:
        return _FIRST_CODE_TOKEN + sum(self.codebook_sizes)

    @property
    def vocab_size(self) -> int:
        return self.user_token_offset + self.user_buckets

    def level_slice(self, level: int) -> slice:
        """Token range of ``level``'s codes."""
        start = _FIRST_CODE_TOKEN + sum(self.codebook_sizes[:level])
        return slice(start, start + self.codebook_sizes[level])

    def item_tokens(self, items: torch.Tensor) -> torch.Tensor:
        """``(*,)`` dense item IDs (no padding) -> ``(*, L)`` tokens of their codes."""
        return self.codes[items] + self.offsets

    def user_tokens(self, users: torch.Tensor) -> torch.Tensor:
        """``(B,)`` dense user IDs -> ``(B,)`` hashed user tokens (needs ``user_buckets > 0``)."""
        return self.user_token_offset + (users * _USER_HASH) % (2 ** 32) % self.user_buckets

    def item_of_key(self, keys: torch.Tensor) -> torch.Tensor:
        """``(*,)`` mixed-radix keys of full code tuples -> ``(*,)`` dense item IDs, 0 where no item has it."""
        pos = torch.searchsorted(self.sorted_keys, keys).clamp(max=self.num_items - 1)
        return torch.where(self.sorted_keys[pos] == keys, self.key_order[pos], torch.zeros_like(keys))

    def item_of(self, codes: torch.Tensor) -> torch.Tensor:
        """``(*, L)`` code tuples -> ``(*,)`` dense item IDs, 0 where no item has that tuple."""
        keys = torch.zeros(codes.shape[:-1], dtype=torch.int64, device=codes.device)
        for level, size in enumerate(self.codebook_sizes):
            keys = keys * size + codes[..., level]
        return self.item_of_key(keys)
