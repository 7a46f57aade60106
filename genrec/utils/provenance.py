"""Where a number came from: the commit, the time and the machine, written next to every result."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

#: the source checkout genrec was imported from (for an installed wheel: site-packages, not a checkout)
REPO_ROOT = Path(__file__).resolve().parents[2]


def git_commit(root: Path = REPO_ROOT) -> str:
    """HEAD's SHA with ``+dirty`` if tracked files other than results/ and docs/results.md (what runs write)
    differ from it; for an installed package (no checkout at ``root``), ``genrec <version>``; ``unknown`` when
    git fails. A copy of a checkout (e.g. the working tree sent to a lent GPU machine, whose ``.git`` may be missing
    or stale) names its commit in ``GENREC_COMMIT``, recorded as ``<sha> (named by GENREC_COMMIT)``."""
    if os.environ.get("GENREC_COMMIT"):
        return f"{os.environ['GENREC_COMMIT']} (named by GENREC_COMMIT)"
    if not (root / ".git").exists():
        from genrec import __version__

        return f"genrec {__version__} (installed, not a git checkout)"
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        # results/ and docs/results.md are what the runs write: they do not make the code differ from the commit
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!results",
                                ":!docs/results.md"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def provenance() -> dict[str, Any]:
    return {"commit": git_commit(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "environment": environment()}


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
    return path
