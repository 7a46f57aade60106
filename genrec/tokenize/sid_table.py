"""The semantic-ID table: every item ⇄ one tuple of codes, both ways, saved as Parquet + safetensors.

This module is the whole loader: it imports only numpy, pyarrow and safetensors (and genrec's stdlib-only error
type), so a consumer can read a table without torch, faiss or the tokenizer code::

    from genrec.tokenize.sid_table import SIDTable
    table = SIDTable.load("runs/tokenize/beauty-rqvae/<time>")
    table.codes[42]               # (L,) int64 codes of dense item 42
    table.item_of([3, 17, 250, 0])  # dense item ID of a code tuple (0: no such item)

A table folder holds ``sid_table.safetensors`` (tensors ``codes (num_items + 1, L)`` and ``codebook_sizes (L,)``)
and ``sid_table.parquet`` (one row per item: ``item`` dense ID, ``raw_id``, ``level_0 .. level_{L-1}``). Both
carry the same JSON metadata (format version, dataset, codebook sizes, the tokenizer's config and a content
hash); loading checks that the hash matches the codes and raw IDs read back.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from safetensors.numpy import load_file, save_file

from genrec.errors import DataError, UserError

FORMAT_VERSION = 1
PARQUET_FILE, SAFETENSORS_FILE = "sid_table.parquet", "sid_table.safetensors"
_METADATA_KEY = "genrec_sid_table"
#: ``codes[0]``: the padding item has no semantic ID.
PAD_CODE = -1


def _raw_id_strings(raw_ids: np.ndarray) -> list[str]:
    return ["" if r is None else str(r) for r in raw_ids[1:]]


def content_hash(codes: np.ndarray, codebook_sizes: tuple[int, ...], item_raw_ids: np.ndarray) -> str:
    """SHA-256 (first 16 hex digits) over the codes, the codebook sizes and the items' raw IDs."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(codes, dtype=np.int64).tobytes())
    h.update(json.dumps(list(codebook_sizes)).encode())
    h.update("\x00".join(_raw_id_strings(item_raw_ids)).encode())
    return h.hexdigest()[:16]


@dataclass
class SIDTable:
    """Item ⇄ semantic ID, indexed by genrec's dense item IDs.

    Attributes:
        codes: ``(num_items + 1, L)`` int64; row ``i`` is item ``i``'s code tuple, ``codes[l]`` in
            ``0..codebook_sizes[l]-1``; row 0 (padding) is all :data:`PAD_CODE`. Every row ``1..num_items`` is
            unique.
        codebook_sizes: ``(L,)`` vocabulary size of each level (the last one is the collision level's size when
            collisions were broken by an extra level).
        item_raw_ids: ``(num_items + 1,)`` the dataset's raw item ID of each dense ID (entry 0 unused).
        dataset: dataset name.
        config: the tokenizer's resolved config (encoder, quantizer, collision handling, seed).
        semantic_levels: how many leading levels come from the quantizer (the rest disambiguate collisions).
    """

    codes: np.ndarray
    codebook_sizes: tuple[int, ...]
    item_raw_ids: np.ndarray
    dataset: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    semantic_levels: int | None = None

    def __post_init__(self) -> None:
        self.codes = np.asarray(self.codes, dtype=np.int64)
        self.codebook_sizes = tuple(int(k) for k in self.codebook_sizes)
        self.item_raw_ids = np.asarray(self.item_raw_ids, dtype=object)
        if self.semantic_levels is None:
            self.semantic_levels = self.num_levels
        if self.codes.ndim != 2 or self.codes.shape[1] != len(self.codebook_sizes) or len(self.codes) < 2:
            raise UserError(f"codes must be (num_items + 1, {len(self.codebook_sizes)}) with num_items >= 1, "
                            f"got {self.codes.shape}")
        if len(self.item_raw_ids) != len(self.codes):
            raise UserError(f"item_raw_ids has {len(self.item_raw_ids)} entries, codes {len(self.codes)} rows")
        real = self.codes[1:]
        sizes = np.asarray(self.codebook_sizes)
        if real.size and ((real < 0).any() or (real >= sizes).any()):
            level = int(np.nonzero(((real < 0) | (real >= sizes)).any(axis=0))[0][0])
            raise UserError(f"codes at level {level} fall outside 0..{sizes[level] - 1}")
        if float(np.prod(sizes.astype(np.float64))) >= 2.0 ** 63:
            raise UserError(f"codebook sizes {self.codebook_sizes}: too many code tuples for int64 keys")
        self._radix = np.concatenate([np.cumprod(sizes[::-1])[::-1][1:], [1]]).astype(np.int64)
        keys = real @ self._radix
        self._order = np.argsort(keys, kind="stable")
        self._sorted_keys = keys[self._order]
        if len(keys) > 1 and (np.diff(self._sorted_keys) == 0).any():
            dup = self._order[1:][np.diff(self._sorted_keys) == 0]
            raise UserError(f"{len(dup)} items share a semantic ID with another item (e.g. dense IDs "
                            f"{(dup[:5] + 1).tolist()}); resolve collisions before building the table")

    @property
    def num_items(self) -> int:
        return len(self.codes) - 1

    @property
    def num_levels(self) -> int:
        return len(self.codebook_sizes)

    def item_of(self, codes) -> int | np.ndarray:
        """Dense item ID of a code tuple ``(L,)`` -> int, or of a batch ``(B, L)`` -> ``(B,)`` int64; 0 where
        no item has that tuple (including out-of-range codes)."""
        query = np.asarray(codes, dtype=np.int64)
        single = query.ndim == 1
        query = np.atleast_2d(query)
        if query.shape[-1] != self.num_levels:
            raise ValueError(f"expected code tuples of length {self.num_levels}, got shape {query.shape}")
        valid = ((query >= 0) & (query < np.asarray(self.codebook_sizes))).all(axis=1)
        keys = np.where(valid[:, None], query, 0) @ self._radix
        pos = np.minimum(np.searchsorted(self._sorted_keys, keys), len(self._sorted_keys) - 1)
        found = valid & (self._sorted_keys[pos] == keys)
        items = np.where(found, self._order[pos] + 1, 0).astype(np.int64)
        return int(items[0]) if single else items

    def require_items(self, item_raw_ids, source: str = "the dataset") -> None:
        """Raise :class:`DataError` unless ``item_raw_ids`` (``(num_items + 1,)``, entry 0 unused) are the raw IDs
        this table was built for, in the same dense order."""
        theirs = _raw_id_strings(np.asarray(item_raw_ids, dtype=object))
        ours = _raw_id_strings(self.item_raw_ids)
        if theirs != ours:
            differ = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
            raise DataError(source, f"items do not match the SID table of {self.dataset!r}: {len(theirs)} items vs "
                                    f"{len(ours)}, first difference at dense ID {differ + 1}")

    @property
    def content_hash(self) -> str:
        return content_hash(self.codes, self.codebook_sizes, self.item_raw_ids)

    def metadata(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, "dataset": self.dataset, "num_items": self.num_items,
                "codebook_sizes": list(self.codebook_sizes), "semantic_levels": self.semantic_levels,
                "content_hash": self.content_hash, "config": self.config}

    def save(self, folder: str | Path) -> Path:
        """Write ``sid_table.safetensors`` and ``sid_table.parquet`` into ``folder``; returns the folder."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        meta = json.dumps(self.metadata(), default=str)
        save_file({"codes": self.codes, "codebook_sizes": np.asarray(self.codebook_sizes, dtype=np.int64)},
                  str(folder / SAFETENSORS_FILE), metadata={_METADATA_KEY: meta})
        raw = list(self.item_raw_ids[1:])
        raw_column = (pa.array(raw, type=pa.int64()) if all(isinstance(r, (int, np.integer)) for r in raw)
                      else pa.array([str(r) for r in raw], type=pa.string()))
        columns = {"item": pa.array(np.arange(1, self.num_items + 1, dtype=np.int64)), "raw_id": raw_column}
        columns |= {f"level_{level}": pa.array(self.codes[1:, level]) for level in range(self.num_levels)}
        table = pa.table(columns).replace_schema_metadata({_METADATA_KEY: meta})
        pq.write_table(table, folder / PARQUET_FILE)
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "SIDTable":
        """Read a table folder written by :meth:`save`; :class:`DataError` when a file is missing, the two files
        disagree or the content hash does not match."""
        folder = Path(folder)
        tensors_path, parquet_path = folder / SAFETENSORS_FILE, folder / PARQUET_FILE
        for path in (tensors_path, parquet_path):
            if not path.is_file():
                raise DataError(path, "not found: expected a SID table folder written by genrec-tokenize")
        tensors = load_file(str(tensors_path))
        parquet = pq.read_table(parquet_path)
        raw_meta = (parquet.schema.metadata or {}).get(_METADATA_KEY.encode())
        if raw_meta is None or "codes" not in tensors:
            raise DataError(folder, "not a genrec SID table (metadata or 'codes' tensor missing)")
        meta = json.loads(raw_meta)
        if meta.get("format_version") != FORMAT_VERSION:
            raise DataError(parquet_path, f"SID table format {meta.get('format_version')}, this loader reads "
                                          f"{FORMAT_VERSION}")
        codes = tensors["codes"]
        expected = ["item", "raw_id"] + [f"level_{level}" for level in range(codes.shape[1])]
        missing = [name for name in expected if name not in parquet.column_names]
        if missing:
            raise DataError(parquet_path, f"lacks column(s) {missing}; has {parquet.column_names}")
        raw_ids = np.empty(parquet.num_rows + 1, dtype=object)
        raw_ids[1:] = parquet.column("raw_id").to_pylist()
        parquet_codes = np.stack([parquet.column(f"level_{level}").to_numpy()
                                  for level in range(codes.shape[1])], axis=1)
        if codes.shape[0] != parquet.num_rows + 1 or not np.array_equal(parquet_codes, codes[1:]):
            raise DataError(folder, f"{SAFETENSORS_FILE} and {PARQUET_FILE} hold different codes")
        table = cls(codes=codes, codebook_sizes=tuple(meta["codebook_sizes"]), item_raw_ids=raw_ids,
                    dataset=meta.get("dataset", ""), config=meta.get("config", {}),
                    semantic_levels=meta.get("semantic_levels"))
        if table.content_hash != meta["content_hash"]:
            raise DataError(folder, f"content hash {table.content_hash} does not match the saved "
                                    f"{meta['content_hash']}: the table was edited or is corrupt")
        return table
