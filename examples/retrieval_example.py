"""Serve recommendations from a genrec export with nothing but torch, faiss, numpy and json (no genrec import).

    python examples/retrieval_example.py runs/<data>-<model>/<time>/export --history 17 4 230 --k 10
    python examples/retrieval_example.py <export dir> --history 17 4 230 --index index_flat
    python examples/retrieval_example.py <HSTU export> --history 17 4 230 --times 100 200 300 --query-time 400

Loads ``manifest.json``, checks every file it uses against the manifest (checksum, dimensions, item count),
encodes the user's history (raw item IDs, oldest first; with their times and the request's time when the tower
takes them: HSTU trained with its time bias) with the exported user tower, searches the faiss index, drops the
padding ID and the history's own items (as genrec's evaluation does) and prints raw item IDs.
A file that is missing, corrupted or does not match the manifest stops with an :class:`ArtifactError` naming
the file and what differs.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import json
from pathlib import Path

import faiss
import numpy as np
import torch

FORMAT, FORMAT_VERSION = "genrec-export", 1


class ArtifactError(ValueError):
    """An exported file that is missing, corrupted or inconsistent with the manifest."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class ExportedRetriever:
    """Query encoder + faiss index + ID map of one export folder.

    Args:
        export_dir: the folder written by ``genrec-export`` (holds ``manifest.json``).
        index: artifact name of the index to search (``manifest["retrieval"]["indexes"]``); default: the
            manifest's ``default_index``.
    """

    def __init__(self, export_dir: str | Path, index: str | None = None):
        self.dir = Path(export_dir)
        manifest_path = self.dir / "manifest.json"
        if not manifest_path.exists():
            raise ArtifactError(f"{manifest_path}: not found (an export folder written by genrec-export has one; "
                                "a folder without it is an unfinished export)")
        try:
            self.manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as err:
            raise ArtifactError(f"{manifest_path}: not valid JSON ({err})") from None
        m = self.manifest
        if (m.get("format"), m.get("format_version")) != (FORMAT, FORMAT_VERSION):
            raise ArtifactError(f"{manifest_path}: format {m.get('format')!r} version {m.get('format_version')!r}; "
                                f"this reader understands {FORMAT!r} version {FORMAT_VERSION}")
        if m["model"]["kind"] != "retrieval":
            raise ArtifactError(f"{manifest_path}: model kind {m['model']['kind']!r} is not served by this example "
                                "(it serves retrieval models: user tower + item index)")
        self.dim, self.num_items = m["model"]["dim"], m["model"]["num_items"]
        retrieval = m["retrieval"]
        self.index_name = index or retrieval["default_index"]
        if self.index_name not in retrieval["indexes"]:
            raise ArtifactError(f"{manifest_path}: no index {self.index_name!r}; exported: {retrieval['indexes']}")
        self.exclude_history = retrieval["exclude_history"]

        self.raw_ids = json.loads(self._checked(retrieval["id_map"]).read_text())
        if len(self.raw_ids) != self.num_items + 1:
            raise ArtifactError(f"{self._path(retrieval['id_map'])}: {len(self.raw_ids)} entries, manifest says "
                                f"num_items + 1 = {self.num_items + 1}")
        self.dense_of = {raw: dense for dense, raw in enumerate(self.raw_ids) if dense != 0}

        tower_path = self._checked(retrieval["query_encoder"])
        inputs = [i["name"] for i in m["artifacts"][retrieval["query_encoder"]]["inputs"]]
        self.with_time = "timestamps" in inputs  # HSTU with its time bias: item times and the request's time
        try:
            self.tower = torch.export.load(tower_path).module()
        except Exception as err:  # torch raises many types for a bad archive
            raise ArtifactError(f"{tower_path}: cannot be loaded by torch.export.load ({type(err).__name__}: "
                                f"{err})") from None
        probe = self.encode([[1]], [[0]], [0]) if self.with_time else self.encode([[1]])
        if probe.shape != (1, self.dim):
            raise ArtifactError(f"{tower_path}: query vectors have shape {tuple(probe.shape[1:])} per user, "
                                f"manifest says dim {self.dim}")

        index_path = self._checked(self.index_name)
        try:
            self.index = faiss.read_index(str(index_path))
        except RuntimeError as err:
            raise ArtifactError(f"{index_path}: cannot be read by faiss ({str(err).splitlines()[0]})") from None
        if self.index.d != self.dim or self.index.ntotal != self.num_items:
            raise ArtifactError(f"{index_path}: index holds {self.index.ntotal} vectors of dim {self.index.d}, "
                                f"manifest says {self.num_items} items of dim {self.dim}")

    def _path(self, artifact: str) -> Path:
        return self.dir / self.manifest["artifacts"][artifact]["file"]

    def _checked(self, artifact: str) -> Path:
        """The artifact's path after checking that it exists and its SHA-256 equals the manifest's."""
        if artifact not in self.manifest["artifacts"]:
            raise ArtifactError(f"{self.dir / 'manifest.json'}: lists no artifact {artifact!r}")
        entry, path = self.manifest["artifacts"][artifact], self._path(artifact)
        if not path.exists():
            raise ArtifactError(f"{path}: not found (listed in manifest.json as {artifact!r})")
        actual = _sha256(path)
        if actual != entry["sha256"]:
            raise ArtifactError(f"{path}: SHA-256 {actual[:16]}… does not match the manifest's "
                                f"{entry['sha256'][:16]}… "
                                "(the file is corrupted or comes from another export)")
        return path

    def to_dense(self, raw_history: list) -> list[int]:
        """Raw item IDs -> dense IDs; an ID the model never saw is an error (not silently dropped)."""
        unknown = [raw for raw in raw_history if raw not in self.dense_of]
        if unknown:
            raise ValueError(f"raw item IDs not in the exported catalogue ({self._path('item_ids')}): {unknown[:10]}")
        return [self.dense_of[raw] for raw in raw_history]

    @torch.no_grad()
    def encode(self, histories: list[list[int]], times: list[list[int]] | None = None,
               query_times: list[int] | None = None) -> np.ndarray:
        """Dense-ID histories (each non-empty, oldest first) -> ``(B, D)`` float32 query vectors. A tower with
        :attr:`with_time` also takes every history item's time and each request's time (unix seconds)."""
        lengths = [len(h) for h in histories]
        if min(lengths) < 1:
            raise ValueError("every history needs at least one item")
        ids = torch.tensor([i for h in histories for i in h], dtype=torch.int64)
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int64)
        if not self.with_time:
            if times is not None or query_times is not None:
                raise ValueError("this export's user tower takes no times (its model was trained without them)")
            return self.tower(ids, offsets).numpy()
        if times is None or query_times is None:
            raise ValueError("this export's user tower (HSTU trained with its time bias) needs every history "
                             "item's time and the request's time")
        if [len(t) for t in times] != lengths or len(query_times) != len(histories):
            raise ValueError(f"times: expected one per history item ({lengths}) and one request time per history "
                             f"({len(histories)}), got {[len(t) for t in times]} and {len(query_times)}")
        return self.tower(ids, offsets, torch.tensor([t for ts in times for t in ts], dtype=torch.int64),
                          torch.tensor(query_times, dtype=torch.int64)).numpy()

    def search_dense(self, histories: list[list[int]], k: int = 10, times: list[list[int]] | None = None,
                     query_times: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` dense item IDs ``(B, k)`` and scores ``(B, k)`` per history (times as :meth:`encode`'s), the
        history's items removed when the model was evaluated that way; ``-1`` pads a row with fewer than ``k``
        results."""
        queries = self.encode(histories, times, query_times)
        exclude = [set(h) if self.exclude_history else set() for h in histories]
        scores, labels = self.index.search(queries, k + max(len(e) for e in exclude))
        ids, kept_scores = np.full((len(histories), k), -1, np.int64), np.zeros((len(histories), k), np.float32)
        for row, (found, score, seen) in enumerate(zip(labels, scores, exclude)):
            keep = [j for j, item in enumerate(found) if item > 0 and item not in seen][:k]
            ids[row, :len(keep)], kept_scores[row, :len(keep)] = found[keep], score[keep]
        return ids, kept_scores

    def recommend(self, raw_history: list, k: int = 10, times: list[int] | None = None,
                  query_time: int | None = None) -> list[tuple[object, float]]:
        """One user's raw-ID history (oldest first; with its items' times and the request's time when
        :attr:`with_time`) -> ``k`` (raw item ID, score), best first."""
        ids, scores = self.search_dense([self.to_dense(raw_history)], k, None if times is None else [times],
                                        None if query_time is None else [query_time])
        return [(self.raw_ids[i], float(s)) for i, s in zip(ids[0], scores[0]) if i > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export_dir", type=Path)
    parser.add_argument("--history", nargs="+", required=True, help="raw item IDs, oldest first")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--index", default=None, help="artifact name of the index (default: the manifest's)")
    parser.add_argument("--times", nargs="+", type=int, default=None,
                        help="unix seconds of every history item (an HSTU tower trained with its time bias)")
    parser.add_argument("--query-time", type=int, default=None, help="unix seconds of the request (with --times)")
    args = parser.parse_args()
    try:
        retriever = ExportedRetriever(args.export_dir, args.index)
        as_raw = {str(raw): raw for raw in retriever.dense_of}  # command-line strings -> raw IDs of their JSON type
        history = [as_raw.get(h, h) for h in args.history]
        top = retriever.recommend(history, args.k, args.times, args.query_time)
    except ValueError as err:  # ArtifactError included
        sys.exit(f"retrieval_example: error: {err}")
    print(f"{retriever.index_name}: top {args.k} for history {history}")
    for rank, (item, score) in enumerate(top, 1):
        print(f"{rank:>3}  {item}  {score:.4f}")


if __name__ == "__main__":
    main()
