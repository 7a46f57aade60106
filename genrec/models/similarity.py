"""How a user state and an item vector score: one module, used wherever scores are formed (training losses, full-corpus
ranking, the exported user tower and item vectors, the stream's learner and hot exports).

The contract keeps every retrieval path an inner product: ``score(q, v) = <prepare(q), prepare(v)>``. A similarity
only says how each side is prepared, so an exported tower (which outputs ``prepare(q)``) and exported item vectors
(``prepare(v)``) serve from any inner-product index. A new similarity is one subclass in one file, registered in
:data:`SIMILARITIES` (a learned one may hold parameters: they are part of the recommender's state dict).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from genrec.errors import ConfigError


class Similarity(nn.Module):
    """The dot product: vectors are used as they are. Subclasses override :meth:`prepare`."""

    name = "dot"
    #: whether :meth:`prepare` makes unit vectors (recorded in export manifests)
    normalised = False

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        """``(*, D)`` query or item vectors -> ``(*, D)`` as they enter the inner product."""
        return x


class Cosine(Similarity):
    """Cosine similarity: both sides L2-normalised."""

    name = "cosine"
    normalised = True

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1)


#: ``model.similarity`` values
SIMILARITIES: dict[str, type[Similarity]] = {"dot": Similarity, "cosine": Cosine}


def as_similarity(value: str | Similarity) -> Similarity:
    """A :class:`Similarity` from its name (``model.similarity``) or as it is."""
    if isinstance(value, Similarity):
        return value
    if value not in SIMILARITIES:
        raise ConfigError("model.similarity", f"got {value!r}, expected one of {', '.join(SIMILARITIES)}")
    return SIMILARITIES[value]()
