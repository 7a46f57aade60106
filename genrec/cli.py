"""What genrec's four CLIs share (genrec-train, -eval, -export, -tokenize): one error policy and the metric table.

The error policy: a :class:`~genrec.errors.UserError` (bad data, a bad config value, a missing or corrupt
checkpoint, a wrong run folder) is printed as one line, ``<prog>: error: <message>``, and the process exits with
status 2; so is a write that finds the disk or the file-size limit full (genrec's own checkpoint and log writers
name their file; anywhere else the file the OS names, if any). Any other exception is a bug in genrec and keeps its
traceback. Each CLI checks its config and the files it reads before doing anything expensive, so a user error costs
seconds, not a data load.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

from genrec.errors import DiskFullError, UserError, is_full

T = TypeVar("T")

#: exit status of a user error (2, as argparse uses for usage errors)
USER_ERROR_STATUS = 2


def run_cli(prog: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``; a :class:`UserError` (or a full disk) becomes one line on stderr and exit status 2."""
    try:
        return fn(*args)
    except (UserError, OSError) as err:
        if not isinstance(err, UserError):
            if not is_full(err):
                raise
            err = DiskFullError(err.filename or "a file genrec was writing", err)
        message = " ".join(str(err).split())  # one line, whatever the message
        print(f"{prog}: error: {message}", file=sys.stderr)
        sys.exit(USER_ERROR_STATUS)


def continue_in_run_folder(prog: str, resume_folder: Callable[[str], Path]) -> None:
    """``resume_from=<run>`` on the command line without ``hydra.run.dir``: append ``hydra.run.dir=<that run's
    folder>`` to ``sys.argv`` so that Hydra continues in it (``resume_folder(resume_from)`` finds it; its
    :class:`UserError` ends the process as :func:`run_cli` does)."""
    args = sys.argv[1:]
    resume = next((a.split("=", 1)[1] for a in args if a.startswith("resume_from=")), None)
    if resume and not any(a.startswith("hydra.run.dir=") for a in args):
        sys.argv.append(f"hydra.run.dir={run_cli(prog, resume_folder, resume)}")


def metric_columns(ks: list[int] | tuple[int, ...]) -> list[str]:
    """The columns of a printed metrics table: recall and NDCG at every cut-off, then MRR."""
    return [f"{m}@{k}" for k in ks for m in ("recall", "ndcg")] + ["mrr"]


def format_table(rows: dict[str, dict[str, float]], columns: list[str]) -> str:
    """A plain-text table: one row per model/baseline, one column per metric."""
    width = max(len(name) for name in rows) + 2
    lines = ["".ljust(width) + "".join(c.rjust(11) for c in columns)]
    for name, metrics in rows.items():
        lines.append(name.ljust(width) + "".join(f"{metrics.get(c, float('nan')):11.4f}" for c in columns))
    return "\n".join(lines)
