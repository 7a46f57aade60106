"""Files the trainer appends to (its CSV logs, the dead letters, the ledger of trained events), kept consistent with
its checkpoints: a checkpoint records each file's size, and a restarted trainer truncates the file to that size
before appending again, so a line is in the file exactly once whatever the crash (the lines written after the
checkpoint are written again by the restarted run). A full disk is one line naming the file (the restarted run
truncates the partial line away like any other line after its checkpoint)."""
from __future__ import annotations

import csv
import io
import json
import logging
import os
from pathlib import Path
from typing import Any

from genrec.errors import is_full, writing
from genrec.stream.events import REASONS, Rejected

log = logging.getLogger("genrec.stream")


class AppendLog:
    """A text file written line by line (flushed after every write; fsynced by :meth:`sync`)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, text: str) -> None:
        with writing(self.path):
            self._file.write(text)
            self._file.flush()

    def size(self) -> int:
        """Bytes written (what a checkpoint records)."""
        self._file.flush()
        return self._file.tell()

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def truncate(self, size: int) -> None:
        """Drop everything after the first ``size`` bytes (the state of a checkpoint)."""
        self._file.close()
        if self.path.exists():
            os.truncate(self.path, min(size, self.path.stat().st_size))
        self._file = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as err:  # the buffered rest did not fit; the file is closed, a restart rewrites the lines
            if not is_full(err):
                raise


class CsvLog(AppendLog):
    """A CSV file with the header ``columns`` (written when the file is empty); rows are dicts."""

    def __init__(self, path: str | Path, columns: list[str]):
        super().__init__(path)
        self.columns = columns

    def row(self, values: dict[str, Any]) -> None:
        if self.size() == 0:
            self.write(",".join(self.columns) + "\n")
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow([_cell(values.get(c)) for c in self.columns])
        self.write(buffer.getvalue())


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else value


class DeadLetters(AppendLog):
    """``dead_letters.jsonl``: one JSON object per rejected record — ``position`` (the source offset), ``reason``,
    ``detail``, ``record`` (as read) and ``events`` (how many records the trainer had read before this batch).
    Rejections are counted per reason; the first ``log_first`` of each reason are also logged."""

    def __init__(self, path: str | Path, log_first: int = 10):
        super().__init__(path)
        self.log_first = log_first
        self.counts = dict.fromkeys(REASONS, 0)

    def add(self, rejected: list[Rejected], events_before: int) -> None:
        lines = []
        for r in rejected:
            self.counts[r.reason] += 1
            if self.counts[r.reason] <= self.log_first:
                log.warning("rejected %s event at %s: %s%s", r.reason, r.position, r.detail,
                            " (further ones: dead_letters.jsonl)" if self.counts[r.reason] == self.log_first else "")
            lines.append(json.dumps({"position": r.position, "reason": r.reason, "detail": r.detail,
                                     "record": r.record, "events": events_before}, default=str) + "\n")
        if lines:
            self.write("".join(lines))
