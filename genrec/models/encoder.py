"""The interface every sequence encoder implements (SASRec, HSTU, ...): what training needs (:meth:`forward`), and what
the export and KV-cached decoding ask of an encoder, declared here so that no caller has to probe for it."""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from genrec.models.backbones import TokenBackbone


class SequenceEncoder(abc.ABC, nn.Module):
    """Jagged item embeddings -> per-position user states, causally (position ``t`` sees positions ``<= t``).

    Subclasses implement :meth:`forward` and set ``self.dim`` (input and output width ``D``) and ``self.max_len``
    (the longest sequence it encodes). Optional capabilities, each with a default here:

    * :meth:`forward_padded` — the same states from right-padded ``(B, L, D)`` input without data-dependent shapes:
      what ``torch.export`` captures for a user tower (genrec-export, the stream's hot exports).
      :attr:`exportable` says whether a subclass provides it.
    * :attr:`uses_time` — whether the states depend on timestamps (the exported tower then takes them as inputs).
    * :meth:`cached_backbone` — a KV-cached token backbone over the encoder's own weights, for the SID generator's
      beam search (``None``: decoding runs the encoder uncached).
    """

    dim: int
    max_len: int

    @abc.abstractmethod
    def forward(self, embeddings: torch.Tensor, offsets: torch.Tensor, timestamps: torch.Tensor | None = None,
                query_timestamps: torch.Tensor | None = None) -> torch.Tensor:
        """
        Args:
            embeddings: ``(N, D)`` input item embeddings, jagged by ``offsets``.
            offsets: ``(B + 1,)`` int64 sequence boundaries.
            timestamps: ``(N,)`` int64 event times, for encoders that use them.
            query_timestamps: ``(N,)`` int64 time of the event each position predicts (see JaggedBatch).
        Returns:
            ``(N, D)`` user state after each position.
        """

    def forward_padded(self, x: torch.Tensor, lengths: torch.Tensor, timestamps: torch.Tensor | None = None,
                       query_timestamps: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, L, D)`` right-padded embeddings (oldest item at position 0, ``L <= max_len``), the real
        ``lengths (B,)`` and, for encoders that use time, right-padded ``timestamps, query_timestamps (B, L)``
        -> ``(B, L, D)`` states equal to :meth:`forward`'s at the real positions."""
        raise NotImplementedError(f"{type(self).__name__} has no padded path (forward_padded): it cannot be exported")

    @property
    def exportable(self) -> bool:
        """Whether the subclass provides :meth:`forward_padded`."""
        return type(self).forward_padded is not SequenceEncoder.forward_padded

    @property
    def uses_time(self) -> bool:
        """Whether the states depend on the batch's timestamps."""
        return False

    def cached_backbone(self) -> "TokenBackbone | None":
        """A KV-cached token backbone over this encoder's weights, or ``None`` (decoding runs it uncached)."""
        return None
