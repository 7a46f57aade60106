"""The embedded default source: a directory of event files that grows over time.

Files are read in the order of their names (producers name them so that this is arrival order, e.g.
``events-000042.parquet`` or a timestamp prefix) and must appear complete: write ``<name>.tmp`` (or a name starting
with ``.``, both ignored) and rename it. A file is never re-read, so it must not change once visible. Formats by
extension: ``.parquet``, ``.csv`` (a header line naming the fields), ``.jsonl`` / ``.json`` (one JSON object per
line). A line that cannot be parsed is a ``malformed`` record at its line (``events-3.jsonl:17``). Values are
handed over as read, in object columns (a Parquet integer column with nulls keeps its integers): the IDs are
decided record by record (:mod:`genrec.stream.events`).

No file is lost silently, whenever it appeared (also while the stream was stopped): a file whose name sorts after
the read position is read in its turn; one the stream has not read whose name sorts before it (it appeared after
later files were read) is not read, its events would arrive out of order: it is one ``late_file`` record, its name
dead-lettered, and from then on it counts as consumed.

The offset is ``{"file": name, "row": r, "consumed": [names]}``: the next record is data row ``r`` (0-based) of file
``name``; ``consumed`` lists the files sorting before ``name`` that the stream consumed (read, or dead-lettered as
late) and that were still in the folder, so that on resume every other file before ``name`` is found and reported
late (the list is bounded by the folder: a file a cleaner deleted drops out of it). An offset of the older form
``{"file", "row"}`` still loads: every file before ``name`` in the folder at resume then counts as consumed.
:meth:`DirectorySource.commit` writes the offset to ``commit_path`` (by default
``<path>/.genrec-consumer-<group>.json``; atomically: a temporary file, fsync, rename), so a cleaner may delete the
files before ``file``. One file is held in memory while it is read.
"""
from __future__ import annotations

import csv
import io
import json
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from genrec.errors import ConfigError
from genrec.stream.events import Records, record_frame
from genrec.stream.source import Source

FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
_JSON = json.JSONDecoder(parse_float=Decimal)  # numbers with a fraction exactly: 9007199254740993.0 is not 2^53


def event_files(folder: Path) -> list[str]:
    """The names of the readable event files in ``folder``, in reading order (hidden and ``.tmp`` files left out)."""
    return sorted(p.name for p in folder.iterdir()
                  if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in FORMATS)


class _File:
    """One event file loaded for reading: ``frame`` (one row per record), ``broken`` rows, raw records."""

    def __init__(self, path: Path):
        self.path, self.name = path, path.name
        self.format = FORMATS[path.suffix.lower()]
        self.arrival = path.stat().st_mtime
        self.broken: dict[int, tuple[str, str]] = {}
        self.lines: list[str] | None = None
        if self.format == "parquet":
            self.frame = pq.read_table(path).to_pandas(integer_object_nulls=True)  # nulls must not make floats
        elif self.format == "csv":
            self.frame = self._csv(path)
        else:
            self.frame = self._jsonl(path)
        self.rows = len(self.frame)

    def _text_lines(self, path: Path) -> list[str]:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()

    def _csv(self, path: Path) -> pd.DataFrame:
        lines = self._text_lines(path)
        header = next(csv.reader([lines[0]])) if lines else []
        self.lines = lines[1:]
        rows: list[list[str | None]] = []
        for i, line in enumerate(self.lines):
            try:
                values = next(csv.reader([line]))
            except (csv.Error, StopIteration) as err:
                values = []
                self.broken[i] = ("malformed", f"not a CSV line ({err})")
            if i not in self.broken and len(values) != len(header):
                self.broken[i] = ("malformed", f"{len(values)} fields, the header names {len(header)}")
            rows.append(values if i not in self.broken else [None] * len(header))
        return pd.DataFrame(rows, columns=header, dtype=object)

    def _jsonl(self, path: Path) -> pd.DataFrame:
        self.lines = self._text_lines(path)
        records: list[dict] = []
        for i, line in enumerate(self.lines):
            try:
                record = _JSON.decode(line)
            except ValueError as err:
                record, self.broken[i] = {}, ("malformed", f"not JSON ({err.args[0] if err.args else err})")
            if not isinstance(record, dict):
                record, self.broken[i] = {}, ("malformed", f"not a JSON object: {line[:80]!r}")
            records.append(record)
        return record_frame(records)

    def position(self, row: int) -> str:
        """A record's place in the file: the line for text files (CSV counts its header), the row for Parquet."""
        if self.format == "parquet":
            return f"{self.name}:row {row}"
        return f"{self.name}:{row + (2 if self.format == 'csv' else 1)}"

    def raw(self, row: int) -> Any:
        if self.lines is not None:
            return self.lines[row]
        return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in self.frame.iloc[row].items()}


def count_rows(path: Path) -> int:
    """Data rows of an event file (Parquet: from its metadata; text: lines, minus the CSV header)."""
    kind = FORMATS[path.suffix.lower()]
    if kind == "parquet":
        return pq.ParquetFile(path).metadata.num_rows
    with open(path, "rb") as f:
        lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    size = path.stat().st_size
    if size:
        with open(path, "rb") as f:
            f.seek(size - 1)
            lines += f.read(1) != b"\n"  # a last line without a newline
    return max(lines - (kind == "csv"), 0)


class DirectorySource(Source):
    """Records from the event files of a folder, in name order, with ``(file, row)`` offsets (see the module doc).

    Args:
        path: the folder (it may be empty or not exist yet: the source waits for files).
        group: the consumer name in the default commit file.
        commit_path: where :meth:`commit` writes the offset (default ``<path>/.genrec-consumer-<group>.json``).
        poll_seconds: how long :meth:`read` waits for a new file when none is available.
    """

    def __init__(self, path: str, group: str = "genrec", commit_path: str | None = None, poll_seconds: float = 1.0):
        if not path:
            raise ConfigError("source.path", "set the folder of event files (source.path=<folder>)")
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError("source.path", f"{path} is not a folder")
        self.commit_path = Path(commit_path) if commit_path else self.path / f".genrec-consumer-{group}.json"
        self.poll_seconds = poll_seconds
        self.description = {"kind": "files", "path": str(self.path.resolve()), "group": group}
        self._known: set[str] = set()  # files seen: before the read position, the consumed ones
        self._late: list[str] = []
        self._file: _File | None = None
        self._offset: dict[str, Any] | None = None  # {"file", "row"} of the next record; None: before any file
        self._row_counts: dict[str, int] = {}

    def restore(self, offset: dict[str, Any] | None) -> None:
        self._offset = {"file": offset["file"], "row": int(offset["row"])} if offset else None
        self._file, self._late = None, []
        if not offset:
            self._known = set()
        elif "consumed" in offset:
            self._known = set(offset["consumed"])  # any other file before the position is late
        else:  # an offset of the older form: the files before it now count as consumed
            self._known = set(self._listing())

    def _listing(self) -> list[str]:
        return event_files(self.path) if self.path.is_dir() else []

    def _refresh(self) -> list[str]:
        """The current listing; files not seen before that sort before the read position are set aside as late,
        deleted files forgotten."""
        names = self._listing()
        current = self._offset["file"] if self._offset else None
        if self.path.is_dir():
            self._known.intersection_update(names)
        for name in names:
            if name not in self._known:
                self._known.add(name)
                if current is not None and name < current:
                    self._late.append(name)
        return names

    def _next_file(self, names: list[str]) -> str | None:
        current = self._offset["file"] if self._offset else None
        later = [n for n in names if current is None or n > current]
        return later[0] if later else None

    def _open(self, name: str) -> _File:
        if self._file is None or self._file.name != name:
            self._file = _File(self.path / name)
            self._row_counts[name] = self._file.rows
        return self._file

    def read(self, max_records: int, wait: bool = True) -> Records:
        names = self._refresh()
        parts: list[tuple[_File, int, int]] = []
        wanted = max_records
        deadline = time.monotonic() + (self.poll_seconds if wait else 0.0)
        while wanted > 0:
            if self._offset is not None and (self.path / self._offset["file"]).exists():
                file = self._open(self._offset["file"])
                start = self._offset["row"]
                if start < file.rows:
                    stop = min(file.rows, start + wanted)
                    parts.append((file, start, stop))
                    self._offset = {"file": file.name, "row": stop}
                    wanted -= stop - start
                    continue
            following = self._next_file(names)
            if following is None:
                if parts or self._late or time.monotonic() >= deadline:
                    break
                time.sleep(min(0.05, self.poll_seconds))
                names = self._refresh()
                continue
            self._offset = {"file": following, "row": 0}
        return self._records(parts)

    def _records(self, parts: list[tuple[_File, int, int]]) -> Records:
        late, self._late = self._late, []
        frames, positions, arrival, broken, raws = [], [], [], {}, []
        for name in late:  # a late file is one record: its name
            positions.append(name)
            arrival.append(time.time())
            broken[len(raws)] = ("late_file", f"{name} appeared after later files were read: not read (files must "
                                              "appear in name order)")
            raws.append({"file": name})
            frames.append(record_frame([{}]))
        for file, start, stop in parts:
            for row in range(start, stop):
                if row in file.broken:
                    broken[len(raws)] = file.broken[row]
                raws.append(file.raw(row) if row in file.broken else (file, row))
                positions.append(file.position(row))
            frames.append(file.frame.iloc[start:stop].astype(object))  # a batch mixing files keeps every value
            arrival.extend([file.arrival] * (stop - start))
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        return Records(frame, positions, end=self._end(),
                       arrival=np.array(arrival, dtype=np.float64), broken=broken,
                       raw=lambda row: raws[row] if not isinstance(raws[row], tuple) else raws[row][0].raw(raws[row][1]))

    def _end(self) -> dict[str, Any] | None:
        """The offset after what was read: the position and the consumed files before it (see the module doc)."""
        if self._offset is None:
            return None
        current = self._offset["file"]
        return {**self._offset, "consumed": sorted(n for n in self._known if n < current)}

    def commit(self, offset: dict[str, Any] | None) -> None:
        if offset is None:
            return
        self.commit_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.commit_path.with_name(self.commit_path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump({**offset, "committed": time.time()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.commit_path)

    def committed(self) -> dict[str, Any] | None:
        """The offset of the last :meth:`commit` (from ``commit_path``), or ``None``."""
        if not self.commit_path.exists():
            return None
        data = json.loads(self.commit_path.read_text())
        return {key: data[key] for key in ("file", "row", "consumed") if key in data}

    def backlog(self) -> int:
        names = self._listing()
        current, row = (self._offset["file"], self._offset["row"]) if self._offset else (None, 0)
        total = 0
        for name in names:
            if current is not None and name < current:
                continue
            if name not in self._row_counts:
                self._row_counts[name] = count_rows(self.path / name)
            total += self._row_counts[name] - (row if name == current else 0)
        return total

    def close(self) -> None:
        self._file = None


def write_event_files(frame: pd.DataFrame, folder: str | Path, rows_per_file: int, fmt: str = "parquet",
                      prefix: str = "events") -> list[Path]:
    """Write ``frame`` (one event per row, in stream order) as event files of ``rows_per_file`` rows each, named
    ``<prefix>-<000000>.<fmt>`` and renamed into place complete (what a producer should do). Returns the paths."""
    if fmt not in ("parquet", "csv", "jsonl"):
        raise ValueError(f"format must be parquet, csv or jsonl, got {fmt!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    existing = [p for p in folder.glob(f"{prefix}-*.{fmt}")]
    first = len(existing)
    paths = []
    for i, start in enumerate(range(0, len(frame), rows_per_file)):
        part = frame.iloc[start:start + rows_per_file]
        path = folder / f"{prefix}-{first + i:06d}.{fmt}"
        tmp = folder / f".{path.name}.tmp"
        if fmt == "parquet":
            part.to_parquet(tmp, index=False)
        elif fmt == "csv":
            part.to_csv(tmp, index=False)
        else:
            buffer = io.StringIO()
            part.to_json(buffer, orient="records", lines=True)
            tmp.write_text(buffer.getvalue())
        os.replace(tmp, path)
        paths.append(path)
    return paths
