"""Writes that survive a crash: a file's bytes and a folder's entries reach the disk before a run goes on (the
checkpoints of dynamic tables and of genrec-stream, hot exports)."""
from __future__ import annotations

import json
import os
from pathlib import Path


def write_json_durably(path: Path, payload: dict) -> None:
    """Write ``payload`` as JSON to ``path`` and fsync the file."""
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """fsync a folder (its entries: a rename or a new file in it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """fsync every file and folder under ``path``."""
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(root))
