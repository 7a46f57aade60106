"""Redis Streams as a source: a consumer group read with ``XREADGROUP`` and acknowledged with ``XACK``.

An event is one stream entry whose fields are the event's fields (``XADD events * event_id 17 user_id 3 item_id 42
timestamp 1700000000``). The source reads as one named consumer of a consumer group (created at the first read
position ``start`` if missing): entries it read stay pending in the group until :meth:`RedisStreamSource.commit`
acknowledges them, which the trainer does only after its checkpoint is durable.

After a crash, :meth:`RedisStreamSource.restore` gets the checkpoint's offset (the ID of the last entry trained):
the consumer's pending entries up to that ID were trained and checkpointed but not acknowledged, so they are
acknowledged now without being read; the pending entries after it are delivered again, in order, before new ones
(``XREADGROUP ... 0`` then ``>``). One trainer per consumer name: two processes reading as the same consumer would
share its pending entries. An entry deleted from the stream while pending comes back without fields and is
reported as ``malformed``. An entry's ID carries the time Redis received it, which gives the arrival time. Fields
are text, handed over as read (an absent field is None): IDs are decided by :mod:`genrec.stream.events`' rules.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

from genrec.errors import ConfigError, UserError
from genrec.stream.events import Records, record_frame
from genrec.stream.source import Source


def entry_key(entry_id: str) -> tuple[int, int]:
    """A stream entry ID ``"<ms>-<seq>"`` -> ``(ms, seq)``, which orders entries as Redis does."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class RedisStreamSource(Source):
    """Records from one Redis stream through a consumer group (see the module doc).

    Args:
        url: the server, ``redis://host:port/db``.
        stream: the stream's key.
        group / consumer: the consumer group and this trainer's consumer name in it.
        start: where a new group starts: ``"0"`` (the stream's first entry) or ``"$"`` (only entries added later).
        block_ms: how long :meth:`read` waits for new entries when none is available.
    """

    #: an acknowledged entry is not delivered to the group again
    rewinds = False

    def __init__(self, url: str = "redis://localhost:6379/0", stream: str = "genrec-events", group: str = "genrec",
                 consumer: str = "genrec-stream", start: str = "0", block_ms: int = 1000):
        try:
            import redis
        except ImportError:
            raise UserError("source=redis needs the redis client: pip install redis") from None
        if start not in ("0", "$"):
            raise ConfigError("source.start", f"must be '0' (the stream's first entry) or '$' (new entries), got {start!r}")
        self.stream, self.group, self.consumer, self.start, self.block_ms = stream, group, consumer, start, block_ms
        self.client = redis.Redis.from_url(url, decode_responses=True)
        try:
            self.client.ping()
        except redis.RedisError as err:
            raise UserError(f"source.url={url}: cannot reach Redis ({err})") from None
        self.description = {"kind": "redis", "url": url, "stream": stream, "group": group, "consumer": consumer}
        self._pending_after: str | None = "0"  # reading this consumer's pending entries after this ID; None: new ones
        self._skip_through: tuple[int, int] | None = None  # pending entries up to here are acknowledged, not read
        self._unacked: list[str] = []
        self._position: str | None = None

    def _ensure_group(self) -> None:
        import redis

        try:
            self.client.xgroup_create(self.stream, self.group, id=self.start, mkstream=True)
        except redis.ResponseError as err:
            if "BUSYGROUP" not in str(err):
                raise

    def restore(self, offset: str | None) -> None:
        self._ensure_group()
        self._pending_after = "0"
        self._skip_through = entry_key(offset) if offset else None
        self._unacked = []
        self._position = offset

    def _read_group(self, after: str, count: int, block: int | None) -> list[tuple[str, dict | None]]:
        reply = self.client.xreadgroup(self.group, self.consumer, {self.stream: after}, count=count, block=block)
        return reply[0][1] if reply else []

    def read(self, max_records: int, wait: bool = True) -> Records:
        entries: list[tuple[str, dict | None]] = []
        while self._pending_after is not None and len(entries) < max_records:
            page = self._read_group(self._pending_after, max_records - len(entries), None)
            if not page:
                self._pending_after = None  # every pending entry is handled: new entries from now on
                break
            self._pending_after = page[-1][0]
            done = [e for e, _ in page if self._skip_through is not None and entry_key(e) <= self._skip_through]
            if done:  # trained and checkpointed before the crash, not yet acknowledged
                self.client.xack(self.stream, self.group, *done)
            entries += [(e, fields) for e, fields in page
                        if self._skip_through is None or entry_key(e) > self._skip_through]
        if self._pending_after is None and len(entries) < max_records:
            entries += self._read_group(">", max_records - len(entries),
                                        self.block_ms if wait and not entries else None)
        return self._records(entries)

    def _records(self, entries: list[tuple[str, dict | None]]) -> Records:
        ids = [e for e, _ in entries]
        self._unacked += ids
        if ids:
            self._position = ids[-1]
        broken = {i: ("malformed", "the entry was deleted from the stream before it was acknowledged")
                  for i, (_, fields) in enumerate(entries) if not fields}
        frame = record_frame([fields or {} for _, fields in entries])
        arrival = np.array([entry_key(e)[0] / 1000.0 for e in ids], dtype=np.float64)
        return Records(frame, ids, end=self._position, arrival=arrival, broken=broken,
                       raw=lambda row: {"id": entries[row][0], "fields": entries[row][1]})

    def commit(self, offset: str | None) -> None:
        if offset is None:
            return
        last = entry_key(offset)
        done = [e for e in self._unacked if entry_key(e) <= last]
        for start in range(0, len(done), 10000):
            self.client.xack(self.stream, self.group, *done[start:start + 10000])
        self._unacked = self._unacked[len(done):]

    def backlog(self) -> int | None:
        """Entries not yet delivered to the group (Redis 7's ``lag``; ``None`` when Redis cannot tell)."""
        for info in self.client.xinfo_groups(self.stream):
            if info["name"] == self.group:
                lag = info.get("lag")
                return int(lag) if lag is not None else None
        return None

    def close(self) -> None:
        self.client.close()


def publish(client, stream: str, frame: pd.DataFrame, chunk: int = 1000) -> int:
    """``XADD`` every row of ``frame`` (in order) to ``stream``, one entry per event, its values as text (a missing
    value is left out, not written as ``"nan"``); returns the count."""
    columns = list(frame.columns)
    values = frame.astype(object).to_numpy()
    for start in range(0, len(values), chunk):
        pipe = client.pipeline(transaction=False)
        for row in values[start:start + chunk]:
            pipe.xadd(stream, {name: str(v) for name, v in zip(columns, row) if not pd.isna(v)})
        pipe.execute()
    return len(values)


def wait_for_redis(client, seconds: float = 10.0) -> None:
    """Block until ``client`` answers PING (a server that was just started)."""
    import redis

    deadline = time.monotonic() + seconds
    while True:
        try:
            client.ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
