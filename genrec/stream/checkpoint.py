"""The stream trainer's checkpoints: one folder per checkpoint holding everything the run depends on, written
atomically.

``<run>/checkpoints/step-<records consumed, 12 digits>/``:

* ``trainer.pt`` — model and optimizer state, the global random state, the source offset, counters, the
  prequential windows, the online baselines, the next export, and the size of every file the trainer appends to
  (read back with ``torch.load(weights_only=True)``);
* ``tables/`` — the dynamic item table (:func:`genrec.embedding.dynamic.checkpoint.save_checkpoint`: tier 0 and a
  snapshot of its store);
* ``users/``, ``events/`` — snapshots of the user-history and seen-event stores;
* ``meta.json`` — offset, records, time (for people; the trainer reads ``trainer.pt``);
* ``manifest.json`` — the run ID (``run.json`` of the run folder) and the sha256 of every file (``tables/`` by its
  own manifest), written last (:mod:`genrec.utils.integrity`).

Everything is written under ``.step-<n>.tmp/``, every file and folder fsynced, then the folder is renamed into
place and the parent fsynced: a ``step-*`` folder is complete, and the newest one is the state to resume from.
Only then is the offset committed to the source. Older checkpoints beyond ``keep`` are deleted after a new one is
in place. A write that finds the disk full is one line naming the checkpoint (its temporary folder is removed; the
kept checkpoints are untouched).

On resume, :meth:`Checkpoints.newest_intact` checks the newest checkpoint against its manifest and falls back to
the next older one kept when it is tampered with, truncated, incomplete or of another run; the refused ones are
set aside as ``refused-step-<n>/`` (kept for inspection, never read again).
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from genrec.storage.durable import fsync_dir, fsync_tree
from genrec.errors import DataError, DiskFullError, writing
from genrec.utils.integrity import check_manifest, write_manifest

PREFIX = "step-"
REFUSED_PREFIX = "refused-"


class Checkpoints:
    """The checkpoint folders of a run (``<run>/checkpoints``), keeping the newest ``keep``."""

    def __init__(self, folder: Path, keep: int = 2):
        self.folder, self.keep = Path(folder), keep

    def path(self, records: int) -> Path:
        return self.folder / f"{PREFIX}{records:012d}"

    def complete(self) -> list[Path]:
        """The complete checkpoints, oldest first."""
        if not self.folder.exists():
            return []
        return sorted(p for p in self.folder.iterdir() if p.is_dir() and p.name.startswith(PREFIX))

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1] if done else None

    def write(self, records: int, fill: Callable[[Path], None], before_rename: Callable[[], None],
              run_id: str | None) -> Path:
        """Write the checkpoint at ``records`` of the run ``run_id``: ``fill(folder)`` writes its files into a
        temporary folder, the manifest is added, all is made durable, then ``before_rename()`` runs (a test hook),
        then it is renamed into place. Returns it."""
        final = self.path(records)
        tmp = self.folder / f".{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            with writing(final):
                tmp.mkdir(parents=True)
                fill(tmp)
                write_manifest(tmp, run_id)
                fsync_tree(tmp)
        except DiskFullError:
            shutil.rmtree(tmp, ignore_errors=True)  # give the space back; the kept checkpoints are untouched
            raise
        before_rename()
        if final.exists():  # the same state written again (a restart that stopped where it resumed)
            shutil.rmtree(tmp)
            return final
        os.rename(tmp, final)
        fsync_dir(self.folder)
        return final

    def newest_intact(self, run_id: str | None) -> tuple[Path | None, list[tuple[Path, DataError]]]:
        """The newest complete checkpoint that passes its manifest check (of the run ``run_id``), and the newer
        ones refused, newest first, with why (:func:`~genrec.utils.integrity.check_manifest`)."""
        refused = []
        for path in reversed(self.complete()):
            try:
                check_manifest(path, run_id)
            except DataError as err:
                refused.append((path, err))
                continue
            return path, refused
        return None, refused

    def set_aside(self, path: Path) -> Path:
        """Rename a refused checkpoint to ``refused-<name>`` (never read, pruned or overwritten). Returns it."""
        aside, n = self.folder / f"{REFUSED_PREFIX}{path.name}", 1
        while aside.exists():
            aside, n = self.folder / f"{REFUSED_PREFIX}{path.name}.{n}", n + 1
        os.rename(path, aside)
        fsync_dir(self.folder)
        return aside

    def prune(self) -> None:
        """Delete all but the newest ``keep`` checkpoints, and unfinished ones."""
        for old in self.complete()[:-self.keep]:
            shutil.rmtree(old)
        for tmp in self.folder.glob(f".{PREFIX}*.tmp"):
            shutil.rmtree(tmp)
