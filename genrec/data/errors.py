"""The one error type for bad input data: it always names where the problem is and what was expected."""
from __future__ import annotations

from pathlib import Path


class DataError(ValueError):
    """Bad or unusable input data.

    The message reads ``<source>[:<line>][ (key '<key>')]: <what is wrong>``, so a user can open the file at the
    offending line without reading a traceback. The CLI entry points print it and exit with status 2.
    """

    def __init__(self, source: str | Path, message: str, *, line: int | None = None, key: str | None = None):
        self.source = str(source)
        self.line = line
        self.key = key
        where = self.source
        if line is not None:
            where += f":{line}"
        if key is not None:
            where += f" (key {key!r})"
        super().__init__(f"{where}: {message}")
