"""Item-embedding initialisation from the training split's co-occurrence statistics (``model.item_init``).

``transitions_svd``: the item table starts from a low-rank factorisation of the items' transition counts, so that
items that follow one another start close and the first steps train the sequence model instead of discovering the
item graph. The counts are those of the ``transitions_last3_skip`` baseline (direct and skip-one transitions of the
training parts only: :class:`~genrec.models.counts.ItemTransitions`), made symmetric and log-damped,
``A = log(1 + T + Tᵀ)``; the vectors are ``U · sqrt(Λ)`` of its ``D`` largest eigenpairs (ARPACK, a fixed start
vector: the same vectors on every run), whose inner products are the best rank-``D`` positive approximation of
``A``. They are rescaled to the standard deviation of the random initialisation they replace (the optimizer's
steps keep their usual size); items without any training transition keep their random row.
"""
from __future__ import annotations

import numpy as np
import torch
from scipy.sparse.linalg import eigsh

from genrec.data.schema import SequenceData
from genrec.embedding import ItemEmbedding
from genrec.errors import ConfigError
from genrec.models.counts import LAST3_SKIP, ItemTransitions

#: ``model.item_init`` values
ITEM_INITS = ("random", "transitions_svd")


def transition_vectors(data: SequenceData, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(num_items + 1, dim)`` vectors of the items (see the module doc) and ``(num_items + 1,)`` bool: the items
    with at least one training transition (the other rows are zero)."""
    counts = ItemTransitions(data, **LAST3_SKIP).counts
    damped = (counts + counts.T).tocsr()
    damped.data = np.log1p(damped.data)
    if dim >= damped.shape[0] - 1:
        raise ConfigError("model.item_init", f"transitions_svd takes {dim} eigenvectors of a {damped.shape[0]}-item "
                                             "matrix: it needs more items than model.dim")
    start = np.random.default_rng(0).standard_normal(damped.shape[0])
    values, vectors = eigsh(damped, k=dim, which="LA", v0=start)
    return vectors * np.sqrt(np.clip(values, 0.0, None)), np.diff(damped.indptr) > 0


def initialize_items(model: torch.nn.Module, data: SequenceData, how: str) -> None:
    """Overwrite ``model``'s item table by ``how`` (one of :data:`ITEM_INITS`; ``random`` leaves it as built).
    ``data``: the dataset, of which only the training parts are read."""
    if how not in ITEM_INITS:
        raise ConfigError("model.item_init", f"got {how!r}, expected one of {', '.join(ITEM_INITS)}")
    if how == "random":
        return
    table = model.item_embedding
    weight = table.tables.weight(table.table_name) if isinstance(table, ItemEmbedding) else None
    if weight is None:
        raise ConfigError("model.item_init", f"{how} writes the whole item table: it needs the static table in one "
                                             "process (embedding@model.embedding=static, sharding=none)")
    vectors, known = transition_vectors(data, weight.shape[1])
    vectors = torch.from_numpy(vectors[known]).to(weight)
    with torch.no_grad():
        weight[torch.from_numpy(known)] = vectors * (weight[1:].std() / vectors.std())
