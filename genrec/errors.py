"""The errors a user can fix, in one place. Every CLI prints them as one line and exits with status 2
(:func:`genrec.cli.run_cli`); any other exception is a bug in genrec and keeps its traceback."""
from __future__ import annotations

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


def settings_from(cls: type[T], values: dict[str, Any], key: str) -> T:
    """``cls(**values)`` for a settings dataclass read from the config node ``key``: an unknown or missing field is
    a :class:`ConfigError` naming ``key``."""
    try:
        return cls(**values)
    except TypeError as err:
        raise ConfigError(key, str(err)) from None
