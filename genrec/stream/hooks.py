"""A test hook: stop the trainer at a named point so that a test can SIGKILL it exactly there.

With ``GENREC_STREAM_PAUSE=<point>:<n>`` and ``GENREC_STREAM_PAUSE_MARKER=<file>`` in its environment, the trainer
writes the marker file the ``n``-th time it reaches ``<point>`` and then sleeps until it is killed. Without these
variables :func:`pause_point` does nothing. Points: :data:`POINTS`.
"""
from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

#: where the trainer calls pause_point, in the order a micro-batch reaches them
POINTS = (
    "batch_read",           # records read from the source, nothing trained
    "batch_trained",        # the micro-batch trained and the state updated, no checkpoint yet
    "checkpoint_tables",    # inside a checkpoint: the tables written into the temporary folder, the rest not
    "checkpoint_rename",    # inside a checkpoint: the temporary folder complete, not yet renamed into place
    "checkpoint_durable",   # the checkpoint renamed into place, the offset not yet committed to the source
    "committed",            # the offset committed
    "export_written",       # an export version's files written, the version not yet renamed into place
)

_hits: Counter = Counter()


def pause_point(name: str) -> None:
    setting = os.environ.get("GENREC_STREAM_PAUSE")
    if not setting:
        return
    point, _, nth = setting.rpartition(":")
    if point != name:
        return
    _hits[name] += 1
    if _hits[name] == int(nth):
        Path(os.environ["GENREC_STREAM_PAUSE_MARKER"]).write_text(name)
        while True:
            time.sleep(3600)
