"""What genrec's CLIs share (genrec-train, -eval, -export, -tokenize, -stream, -report): one error policy and the
metric table.

The error policy: a :class:`~genrec.errors.UserError` (bad data, a bad config value, a missing or corrupt
checkpoint, a wrong run folder) is printed as one line, ``<prog>: error: <message>``, and the process exits with
status 2; so is a write that finds the disk or the file-size limit full (genrec's own checkpoint and log writers
name their file; anywhere else the file the OS names, if any). The same holds for the mistakes Hydra and OmegaConf
find: an override that does not compose (a misspelled key or group option, a bad override: checked by
:func:`check_command_line` before Hydra starts), a mandatory value left unset (``???``), and genrec's own errors
raised inside ``hydra.utils.instantiate`` (which wraps them). Any other exception is a bug in genrec and keeps its
traceback. Each CLI checks its config and the files it reads before doing anything expensive, so a user error costs
seconds, not a data load.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

from omegaconf.errors import MissingMandatoryValue

from genrec.errors import ConfigError, DiskFullError, UserError, is_full

T = TypeVar("T")

#: exit status of a user error (2, as argparse uses for usage errors)
USER_ERROR_STATUS = 2


def _exit_with(prog: str, message: str) -> None:
    print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)  # one line, whatever the message
    sys.exit(USER_ERROR_STATUS)


def user_error(err: BaseException) -> UserError | None:
    """The :class:`UserError` ``err`` is or wraps (``hydra.utils.instantiate`` raises its target's errors as the
    ``__cause__`` of an ``InstantiationException``); a full disk as a :class:`DiskFullError`; an unset mandatory value
    (``???``) as a :class:`ConfigError` naming its key; else ``None``."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, UserError):
            return seen
        if isinstance(seen, OSError) and is_full(seen):
            return DiskFullError(seen.filename or "a file genrec was writing", seen)
        if isinstance(seen, MissingMandatoryValue):
            key = seen.full_key or "?"
            return ConfigError(key, f"missing mandatory value: set it on the command line ({key}=...)")
        seen = seen.__cause__
    return None


def run_cli(prog: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``; a :class:`UserError` (or one of the errors :func:`user_error` finds: a full disk, an unset
    value, a wrapped UserError) becomes one line on stderr and exit status 2."""
    try:
        return fn(*args)
    except Exception as err:
        found = user_error(err)
        if found is None:
            raise
        _exit_with(prog, str(found))


#: config groups that were renamed -> what replaced them: an override naming the old one is refused with the new one
RENAMED_GROUPS = {"align": "stage", "distill": "stage"}


def _renamed(override: str) -> str | None:
    """The one-line advice for an override of a renamed group (``align=dpo``, ``distill.teacher=...``), or None."""
    key, _, value = override.lstrip("+~").partition("=")
    group, _, rest = key.partition(".")
    if group not in RENAMED_GROUPS:
        return None
    new = RENAMED_GROUPS[group]
    spelling = f"{new}.{rest}=..." if rest else f"{new}={'distill' if group == 'distill' else value or '<name>'}"
    return (f"{override}: the post-training stages are one config group now (genrec/conf/stage: sft, dpo, sdpo, "
            f"distill): use {spelling}")


def check_command_line(prog: str, config_name: str, argv: list[str] | None = None) -> None:
    """Compose ``config_name`` with the command line's overrides (``sys.argv[1:]``) before Hydra runs: an override
    that names no key (``trainer.max_epochz=3``), no group option (``model=sasrecc``) or does not parse ends the
    process with one line and exit status 2 (Hydra would print a multi-line report and exit 1), and so does an
    override of a renamed group (:data:`RENAMED_GROUPS`), naming the new spelling. A command line with flags
    (``--help``, ``-m``, ``--cfg``...) is left to Hydra."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from genrec.conf import compose_config

    overrides = sys.argv[1:] if argv is None else argv
    if any(arg.startswith("-") for arg in overrides):
        return
    for override in overrides:
        advice = _renamed(override)
        if advice:
            _exit_with(prog, advice)
    try:
        compose_config(config_name, overrides)
    except (HydraException, OmegaConfBaseException) as err:
        _exit_with(prog, f"the command line does not compose: {str(err).split('Config search path')[0]}")


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
