"""faiss indexes over the scoring-side item vectors, by config: exact inner product, IVF-PQ, HNSW.

Every index searches by inner product (cosine models export L2-normalised vectors on both sides, so inner
product is their cosine) and labels results with dense item IDs ``1..num_items`` (an ``IndexIDMap`` where the
index type has no IDs of its own). The search settings (``nprobe``, ``efSearch``, the refine factor) are stored
in the index file by faiss, so a loaded index searches exactly as it did here.
"""
from __future__ import annotations

import logging
from typing import Any

import faiss
import numpy as np

from genrec.errors import UserError

log = logging.getLogger("genrec.export")

INDEX_TYPES = ("flat", "ivfpq", "hnsw")


def gpu_available() -> bool:
    """True when faiss was built with GPU support (faiss-gpu) and sees a GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def _ivfpq(vectors: np.ndarray, nlist: int | None, m: int | None, nbits: int | None, nprobe: int,
           refine_k_factor: float, train_seed: int) -> tuple[faiss.Index, dict[str, Any]]:
    n, d = vectors.shape
    nlist = nlist or max(1, min(int(4 * np.sqrt(n)), n // 39))  # faiss wants >= 39 points per centroid
    nbits = nbits or int(np.clip(np.floor(np.log2(n)), 1, 8))  # k-means needs as many points as centroids
    m = m or max(1, d // 2)
    if d % m:
        raise UserError(f"index.m={m} must divide the vector dimension {d}")
    ivf = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, nlist, m, nbits, faiss.METRIC_INNER_PRODUCT)
    ivf.cp.seed = ivf.pq.cp.seed = train_seed
    ivf.nprobe = min(nprobe, nlist)
    index: faiss.Index = ivf
    if refine_k_factor > 1:  # re-rank the PQ candidates by exact inner product
        index = faiss.IndexRefineFlat(ivf)
        index.k_factor = float(refine_k_factor)
    return index, {"nlist": nlist, "m": m, "nbits": nbits, "nprobe": ivf.nprobe,
                   "refine_k_factor": float(refine_k_factor)}


def build_index(vectors: np.ndarray, ids: np.ndarray, cfg: dict[str, Any]) -> tuple[faiss.Index, dict[str, Any]]:
    """Index ``vectors (I, D)`` float32 under labels ``ids (I,)`` int64 as ``cfg`` says.

    ``cfg["type"]`` is one of :data:`INDEX_TYPES`; the other keys are that type's settings (see conf/index/).
    ``cfg["gpu"]``: ``auto`` builds on a GPU where faiss-gpu sees one, ``true`` requires one, ``false`` never.
    The returned index is always a CPU index (what ``faiss.write_index`` takes). Returns (index, the settings
    used, for the manifest).
    """
    kind, gpu = cfg.get("type"), cfg.get("gpu", "auto")
    if kind not in INDEX_TYPES:
        raise UserError(f"index.type must be one of {INDEX_TYPES}, got {kind!r}")
    if gpu not in ("auto", True, False):
        raise UserError(f"index.gpu must be auto, true or false, got {gpu!r}")
    if gpu is True and kind == "hnsw":
        raise UserError("index.gpu=true for an hnsw index: faiss has no GPU HNSW (use flat or ivfpq on the GPU)")
    if gpu is True and not gpu_available():
        raise UserError("index.gpu=true but faiss sees no GPU (install faiss-gpu on a CUDA machine, or set "
                        "index.gpu=auto)")
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    d = vectors.shape[1]
    if kind == "flat":
        index, params = faiss.IndexFlatIP(d), {}
    elif kind == "ivfpq":
        index, params = _ivfpq(vectors, cfg.get("nlist"), cfg.get("m"), cfg.get("nbits"),
                               int(cfg.get("nprobe", 16)), float(cfg.get("refine_k_factor", 0)),
                               int(cfg.get("seed", 0)))
    else:
        index = faiss.IndexHNSWFlat(d, int(cfg.get("M", 32)), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(cfg.get("ef_construction", 200))
        index.hnsw.efSearch = int(cfg.get("ef_search", 128))
        params = {"M": index.hnsw.nb_neighbors(1), "ef_construction": index.hnsw.efConstruction,
                  "ef_search": index.hnsw.efSearch}
    on_gpu = gpu is not False and kind != "hnsw" and gpu_available()
    index = faiss.IndexIDMap(index)
    if on_gpu:
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
    index.train(vectors)
    index.add_with_ids(vectors, np.ascontiguousarray(ids, dtype=np.int64))
    if on_gpu:
        index = faiss.index_gpu_to_cpu(index)
    log.info("built %s index over %d vectors (%s)%s", kind, index.ntotal, params, " on GPU" if on_gpu else "")
    return index, {"type": kind, "metric": "inner_product", "built_on": "gpu" if on_gpu else "cpu", **params}


def recall_at_k(approx: np.ndarray, exact: np.ndarray) -> float:
    """Mean over queries of ``|approx_i ∩ exact_i| / |exact_i|`` for ``(Q, k)`` label arrays (``-1`` = none)."""
    hits = sum(len(set(a[a >= 0]) & set(e[e >= 0])) for a, e in zip(approx, exact))
    total = int((exact >= 0).sum())
    return hits / total if total else float("nan")


def exact_top_k(queries: np.ndarray, vectors: np.ndarray, ids: np.ndarray, k: int, chunk: int = 2048) -> np.ndarray:
    """``(Q, k)`` labels of the ``k`` highest inner products of each of ``queries (Q, D)`` with ``vectors (I, D)``
    (labelled ``ids (I,)``), best first, ties towards the lower row, computed in chunks of queries."""
    out = []
    for start in range(0, len(queries), chunk):
        scores = queries[start:start + chunk] @ vectors.T  # (q, I)
        top = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
        order = np.lexsort((top, -np.take_along_axis(scores, top, axis=1)), axis=1)
        out.append(ids[np.take_along_axis(top, order, axis=1)])
    return np.concatenate(out)
