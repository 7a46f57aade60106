"""Run a genrec CLI's entry point inside the test process, as ``python -m <module> <args>`` would from ``cwd``: the same
``main()`` (Hydra, the one-line error policy, the exit status), without paying a fresh interpreter's imports (torch,
Lightning, TorchRec: about 6 s a call on 2 cores). Tests that need a process of their own (kills, resource limits,
several ranks) start one with ``subprocess`` instead."""
from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

#: the module a ``python -m`` call names -> where its ``main`` lives
ENTRY_POINTS = {"genrec.train": "genrec.train", "genrec.evaluate": "genrec.evaluate",
                "genrec.export": "genrec.export.cli", "genrec.tokenize": "genrec.tokenize.cli",
                "genrec.stream": "genrec.stream.cli", "genrec.report": "genrec.report.cli"}


def run_entry(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` from ``cwd``, in this process -> its exit status, stdout and stderr."""
    main = importlib.import_module(ENTRY_POINTS[module]).main
    out, err = io.StringIO(), io.StringIO()
    argv, here, root_handlers = sys.argv, os.getcwd(), list(logging.getLogger().handlers)
    code = 0
    try:
        os.chdir(cwd)
        sys.argv = [module, *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as stopped:
                code = stopped.code if isinstance(stopped.code, int) else (0 if stopped.code is None else 1)
            except Exception:  # a traceback, as the interpreter would print it
                import traceback

                traceback.print_exc()
                code = 1
    finally:
        sys.argv = argv
        os.chdir(here)
        root = logging.getLogger()
        for handler in list(root.handlers):  # Hydra configures logging for its job: put the test's back
            if handler not in root_handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in root_handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
    return subprocess.CompletedProcess([module, *args], code, out.getvalue(), err.getvalue())
