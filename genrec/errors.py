"""The errors a user can fix, in one place. Every CLI prints them as one line and exits with status 2
(:func:`genrec.cli.run_cli`); any other exception is a bug in genrec and keeps its traceback."""
from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class UserError(ValueError):
    """Something the user can fix: bad input data, a bad config value, a missing or corrupt checkpoint, a wrong run
    folder. The message names the file, line or key and says what was expected."""


class DataError(UserError):
    """Bad or unusable input data.

    The message reads ``<source>[:<line>][ (key '<key>')]: <what is wrong>``, so a user can open the file at the
    offending line without reading a traceback.
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


class ConfigError(UserError):
    """A config value that cannot work: the message names the key (``trainer.max_epochs``) and what was expected."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


class DiskFullError(UserError):
    """A file could not be written because the disk, the user's quota or the process's file-size limit is full."""

    def __init__(self, path: str | Path, err: OSError):
        self.path = Path(path)
        super().__init__(f"{path}: cannot be written: {err.strerror or err} (the disk, a quota or the file-size limit "
                         "is full); what was written before is intact: free space, then run again (a training "
                         "run continues with resume_from=<run folder>)")


#: the ``errno`` values of a write that found no room: a full disk, an exhausted quota, a file-size limit
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_full(err: BaseException) -> bool:
    """Whether ``err`` is a write that found no room (:data:`FULL_ERRNOS`)."""
    return isinstance(err, OSError) and err.errno in FULL_ERRNOS


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Writes to ``path`` inside the block that find no room raise :class:`DiskFullError` naming ``path``; other
    errors pass through."""
    try:
        yield
    except OSError as err:
        if is_full(err):
            raise DiskFullError(path, err) from None
        raise


def settings_from(cls: type[T], values: dict[str, Any], key: str) -> T:
    """``cls(**values)`` for a settings dataclass read from the config node ``key``: an unknown or missing field is
    a :class:`ConfigError` naming ``key``."""
    try:
        return cls(**values)
    except TypeError as err:
        raise ConfigError(key, str(err)) from None
