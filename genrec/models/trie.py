"""A prefix trie over the valid semantic IDs, stored as one dense transition table per level.

Level ``l`` has ``n_l`` nodes (the distinct code prefixes of length ``l``, in sorted order; level 0 has the
root only) and a table ``children[l] (n_l, K_l)``: the node at level ``l + 1`` reached by appending code ``c``,
or -1 when no item has that prefix. On the last level the entry is the dense item ID of the completed tuple.
A decoding step is then two gathers: ``children[l][nodes]`` gives every beam's allowed codes as a mask and
``children[l][nodes, codes]`` its next node, with no Python loop over beams or dictionary walk.

Memory: ``sum_l n_l * K_l`` int32 entries, e.g. 2.56M (10 MB) for Amazon Beauty's 12,101 items with codebooks
256 x 256 x 256 x 12.

:meth:`PrefixTrie.prefix_log_mass` sums a distribution over whole items into every prefix node (the mass of the
items under it), which lets a beam over codes be guided by an item-level model (:class:`~genrec.models.beam.GuidedDecoder`).
"""
from __future__ import annotations

import torch
from torch import nn


def _prefix_keys(codes: torch.Tensor, sizes: tuple[int, ...], length: int) -> torch.Tensor:
    """``(N, L)`` codes -> ``(N,)`` mixed-radix key of each row's first ``length`` codes."""
    keys = torch.zeros(len(codes), dtype=torch.int64)
    for level in range(length):
        keys = keys * sizes[level] + codes[:, level]
    return keys


class PrefixTrie(nn.Module):
    """The valid code tuples ``codes (N, L)`` (one row per item, item ``i + 1`` on row ``i``) as a trie.

    The tables are non-persistent buffers: they follow the model to its device and are rebuilt from the SID
    table rather than saved in checkpoints.
    """

    def __init__(self, codes: torch.Tensor, codebook_sizes: tuple[int, ...]):
        super().__init__()
        codes = codes.cpu().long()
        self.codebook_sizes = tuple(int(k) for k in codebook_sizes)
        self.num_levels = len(self.codebook_sizes)
        parents = torch.zeros(1, dtype=torch.int64)  # sorted keys of the level-l prefixes (level 0: the root)
        for level, size in enumerate(self.codebook_sizes):
            keys = _prefix_keys(codes, self.codebook_sizes, level + 1)
            table = torch.full((len(parents), size), -1, dtype=torch.int32)
            if level + 1 < self.num_levels:
                uniq = torch.unique(keys)  # sorted: the next level's node order
                target = torch.arange(len(uniq), dtype=torch.int32)
            else:
                uniq, target = keys, torch.arange(1, len(codes) + 1, dtype=torch.int32)  # leaves -> item IDs
            table[torch.searchsorted(parents, uniq // size), uniq % size] = target
            self.register_buffer(f"children_{level}", table, persistent=False)
            if level + 1 < self.num_levels:  # each item's node at level + 1 (padding item 0: node 0)
                nodes = torch.cat([torch.zeros(1, dtype=torch.int64), torch.searchsorted(uniq, keys)])
                self.register_buffer(f"item_nodes_{level}", nodes, persistent=False)
            parents = uniq

    def table(self, level: int) -> torch.Tensor:
        """``(n_level, K_level)`` int32 transition table of ``level``."""
        return getattr(self, f"children_{level}")

    def prefix_log_mass(self, item_log_probs: torch.Tensor) -> list[torch.Tensor]:
        """Sum a distribution over the items into the trie's nodes.

        Args:
            item_log_probs: ``(B, N + 1)`` log-probability of every item (column 0, the padding item, and any item
                to leave out: ``-inf``).
        Returns:
            ``L`` tensors: entry ``l < L - 1`` is ``(B, n_{l+1})``, the log of the summed probability of the items
            under each node of level ``l + 1`` (``-inf`` where none has mass); entry ``L - 1`` is ``item_log_probs``
            itself (the last level's "nodes" are the items). Summed in float64, so no item's mass underflows.
        """
        probs = item_log_probs.double().exp()
        out = []
        for level in range(self.num_levels - 1):
            index = getattr(self, f"item_nodes_{level}").expand_as(probs)
            mass = probs.new_zeros(len(probs), self.table(level + 1).shape[0]).scatter_add_(1, index, probs)
            out.append(mass.log().to(item_log_probs.dtype))
        return out + [item_log_probs]

    def allowed(self, level: int, nodes: torch.Tensor) -> torch.Tensor:
        """``nodes (*,)`` at ``level`` -> ``(*, K_level)`` bool: which next codes continue a valid prefix."""
        return self.table(level)[nodes] >= 0

    def advance(self, level: int, nodes: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """``nodes (*,)`` at ``level`` + the chosen ``codes (*,)`` -> ``(*,)`` int64 nodes at ``level + 1`` (on the
        last level: item IDs); -1 where the prefix is invalid."""
        return self.table(level)[nodes, codes].long()


def brute_force_allowed(codes: torch.Tensor, prefixes: torch.Tensor, size: int, chunk: int = 256) -> torch.Tensor:
    """Reference (and the naive decoder's check): compare every prefix with every valid tuple.

    Args:
        codes: ``(N, L)`` the valid code tuples.
        prefixes: ``(R, l)`` decoded prefixes of length ``l < L``.
        size: codebook size ``K_l`` of level ``l``.
        chunk: prefixes compared at once (bounds the ``(chunk, N)`` comparison).
    Returns:
        ``(R, size)`` bool: code ``c`` is allowed after prefix ``r`` iff some tuple starts with ``prefix + (c,)``.
    """
    length = prefixes.shape[1]
    out = torch.zeros(len(prefixes), size, dtype=torch.bool, device=prefixes.device)
    nxt = codes[:, length]
    for start in range(0, len(prefixes), chunk):
        part = prefixes[start:start + chunk]
        match = (codes[None, :, :length] == part[:, None, :]).all(-1)  # (chunk, N)
        rows, cols = match.nonzero(as_tuple=True)
        out[start + rows, nxt[cols]] = True
    return out


class BruteForceConstraint:
    """The naive decoder's constraint, with the trie's interface: a "node" is the mixed-radix key of the decoded
    prefix, and the allowed codes come from :func:`brute_force_allowed` against every valid tuple at every step.

    Args:
        codes: ``(N, L)`` the valid code tuples.
        codebook_sizes: ``(L,)`` codebook sizes.
    """

    def __init__(self, codes: torch.Tensor, codebook_sizes: tuple[int, ...]):
        self.codes, self.codebook_sizes = codes.long(), tuple(int(k) for k in codebook_sizes)

    def _prefixes(self, level: int, keys: torch.Tensor) -> torch.Tensor:
        """``(R,)`` keys of length-``level`` prefixes -> ``(R, level)`` codes."""
        out = torch.empty(len(keys), level, dtype=torch.int64, device=keys.device)
        for j in range(level - 1, -1, -1):
            out[:, j] = keys % self.codebook_sizes[j]
            keys = keys // self.codebook_sizes[j]
        return out

    def allowed(self, level: int, nodes: torch.Tensor) -> torch.Tensor:
        flat = self._prefixes(level, nodes.flatten())
        return brute_force_allowed(self.codes, flat, self.codebook_sizes[level]).view(*nodes.shape, -1)

    def advance(self, level: int, nodes: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        return nodes * self.codebook_sizes[level] + codes
