"""Digests that bind what a run writes to the run and detect what changed since: the content digest a checkpoint file
carries inside itself, and the ``manifest.json`` of a checkpoint folder (docs/TRUST.md).

* :func:`state_sha256` — the sha256 of a checkpoint's content (nested dicts, lists and tuples of tensors and plain
  values), the same before ``torch.save`` and after ``torch.load``: a file can carry the digest of everything else it
  holds, so no second file can disagree with it after a crash.
* :func:`write_manifest` / :func:`check_manifest` — ``manifest.json`` inside a checkpoint folder: the run ID and the
  sha256 and size of every file. The writer calls it last, inside the temporary folder, before the folder is renamed
  into place, so a folder in place always has its manifest. A sub-folder holding its own manifest (a dynamic-table
  snapshot inside a stream checkpoint) is covered by that manifest's digest, not file by file. Files that are not in
  the manifest are ignored (a store opened read-only writes its own ``LOG``).

A digest detects a file of another run, a truncated, corrupted or missing file; it is not a signature: whoever can
write the folder can write a matching manifest.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from genrec.errors import DataError

MANIFEST_FILE = "manifest.json"
FORMAT = 1
#: files never changed once written (RocksDB table files, uniquely numbered): their digests are remembered
IMMUTABLE_SUFFIXES = (".sst",)
_CACHE_LIMIT = 1 << 16
_cache: dict[tuple, str] = {}


def state_sha256(state: Any) -> str:
    """sha256 of nested dicts (in their order), lists, tuples, tensors (dtype, shape and bytes) and plain values
    (``None``, bool, int, float, str, bytes, torch dtypes and devices). Anything else is a :class:`TypeError`."""
    digest = hashlib.sha256()
    _feed(digest, state)
    return digest.hexdigest()


def _feed(digest: "hashlib._Hash", value: Any) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"T{tensor.dtype}{tuple(value.shape)}:".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    elif isinstance(value, dict):
        digest.update(f"D{len(value)}:".encode())
        for key, item in value.items():
            _feed(digest, key)
            _feed(digest, item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"{'L' if isinstance(value, list) else 'U'}{len(value)}:".encode())
        for item in value:
            _feed(digest, item)
    elif value is None or isinstance(value, (bool, int, float, str, bytes, torch.dtype, torch.device)):
        digest.update(f"{type(value).__name__}:{value!r};".encode())
    else:
        raise TypeError(f"a checkpoint holds a {type(value).__qualname__}, which genrec cannot digest (tensors and "
                        "plain values only)")


def update_with_file(digest: "hashlib._Hash", path: Path) -> None:
    """Feed the bytes of the file ``path`` to ``digest``."""
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)


def file_sha256(path: str | Path, remember: bool = False) -> str:
    """sha256 of a file. With ``remember``, the digest of an immutable store file (:data:`IMMUTABLE_SUFFIXES`) is
    remembered by its name, inode, size and modification time, so that the successive snapshots of a large store,
    which share its table files (hard links), hash each file once per process (writing; a check always reads)."""
    path = Path(path)
    key = None
    if remember and path.name.endswith(IMMUTABLE_SUFFIXES):
        stat = path.stat()
        key = (path.name, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key in _cache:
            return _cache[key]
    digest = hashlib.sha256()
    update_with_file(digest, path)
    if key is not None:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[key] = digest.hexdigest()
    return digest.hexdigest()


def _covered_files(folder: Path) -> list[str]:
    """The files a manifest of ``folder`` lists (relative paths, sorted): every file, except that a sub-folder with
    its own manifest is listed by that manifest only."""
    files = []
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        if here != folder and MANIFEST_FILE in names:
            files.append(str((here / MANIFEST_FILE).relative_to(folder)))
            dirs.clear()
            continue
        dirs.sort()
        files += [str((here / n).relative_to(folder)) for n in names if not (here == folder and n == MANIFEST_FILE)]
    return sorted(files)


def write_manifest(folder: str | Path, run_id: str | None) -> None:
    """Write ``<folder>/manifest.json`` (fsynced): the run ID and every file's sha256 and size."""
    folder = Path(folder)
    files = {name: {"sha256": file_sha256(folder / name, remember=True), "bytes": (folder / name).stat().st_size}
             for name in _covered_files(folder)}
    with open(folder / MANIFEST_FILE, "w") as f:
        json.dump({"format": FORMAT, "run_id": run_id, "files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def expected_run(run_id: str | None) -> str:
    """How an error names the run a checkpoint must belong to."""
    return f"run {run_id} of this folder (run.json)" if run_id else "this folder, which names no run (no run.json)"


def check_manifest(folder: str | Path, run_id: str | None) -> bool:
    """Check ``folder`` against its manifest: written by the run ``run_id`` (``None``: a run folder without a
    recorded identity), every listed file present with its size and sha256, and every sub-folder's own manifest
    checked the same way. Returns whether the folder has a manifest: a folder without one passes only when
    ``run_id`` is ``None`` (written before genrec wrote manifests). Raises :class:`DataError` naming the file at
    fault."""
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    if not path.is_file():
        if run_id is None:
            return False
        raise DataError(folder, f"holds no {MANIFEST_FILE} (an incomplete checkpoint, or not written by "
                                f"{expected_run(run_id)})")
    try:
        manifest = json.loads(path.read_text())
        owner, files = manifest["run_id"], manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(path, f"cannot be read as a checkpoint manifest: {err}") from None
    if owner != run_id:
        raise DataError(path, f"written by run {owner}, not by {expected_run(run_id)}: a checkpoint of another run")
    for name, entry in files.items():
        file = folder / name
        if not file.is_file():
            raise DataError(file, f"missing: the checkpoint lists it in {path} (an incomplete checkpoint)")
        size = file.stat().st_size
        if size != entry["bytes"]:
            raise DataError(file, f"{size} bytes, {entry['bytes']} when the checkpoint was written (truncated or "
                                  "replaced)")
        if file_sha256(file) != entry["sha256"]:
            raise DataError(file, f"its sha256 differs from the one in {path} (modified or corrupted since the "
                                  "checkpoint was written)")
        if file.name == MANIFEST_FILE:
            check_manifest(file.parent, run_id)
    return True
