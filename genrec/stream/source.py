"""The interface every event source implements (a directory of files, Redis Streams, a dataset replay).

A source hands out records in one fixed order and knows two positions:

* the **read** position: what :meth:`Source.read` returns next;
* the **committed** offset: what the consumer has durably processed (:meth:`Source.commit`), for the source's own
  bookkeeping (Redis: ``XACK``; a directory: an offsets file beside the files, which a cleaner may read).

The trainer owns exactly-once: it records the offset after the last record it trained (``Records.end``) inside its
checkpoint, and calls :meth:`commit` with that offset only once the checkpoint is durable. After a crash it calls
:meth:`restore` with the checkpoint's offset: the source then returns exactly the records after it (re-delivering
what was read but not checkpointed, and acknowledging what was checkpointed but not yet committed).
"""
from __future__ import annotations

from typing import Any

from genrec.stream.events import EventSchema, Records


class Source:
    """A stream of records. Offsets are JSON-able values the source defines; ``None`` is the stream's start."""

    #: what the source is, for logs and export manifests (set by subclasses)
    description: dict[str, Any]
    #: whether :meth:`restore` can go back to an offset older than the last one committed (a resume from an older
    #: checkpoint, when the newest is refused, needs it)
    rewinds: bool = True

    def bind(self, schema: EventSchema, run_dir: str) -> None:
        """Called once before reading: the trainer's schema and run folder (a source may use either)."""

    def restore(self, offset: Any) -> None:
        """Continue after ``offset`` (a checkpoint's ``Records.end``; ``None``: from the start)."""
        raise NotImplementedError

    def read(self, max_records: int, wait: bool = True) -> Records:
        """Up to ``max_records`` records that are available now, in stream order (possibly none: then
        ``Records.end`` is the current read position). When none is, waits for some up to the source's poll
        timeout (``wait``), or not at all."""
        raise NotImplementedError

    def commit(self, offset: Any) -> None:
        """Tell the source that everything up to ``offset`` is durably processed."""
        raise NotImplementedError

    def backlog(self) -> int | None:
        """Records available but not yet read (``None`` when the source cannot tell)."""
        return None

    def close(self) -> None:
        """Release connections and files."""
