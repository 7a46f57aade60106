"""C sources built with the system compiler at first use and loaded through ctypes (whose calls release the
interpreter lock): the dynamic table's kernels (:mod:`genrec.embedding.dynamic.native`) and the slab store's
(:mod:`genrec.storage.slab`).

A library is built once per source version into ``$GENREC_NATIVE_DIR`` (default ``~/.cache/genrec/native``):
``cc -O3 -shared -fPIC -ffp-contract=off``, written under a temporary name and renamed, so concurrent processes
never load a partial file.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

FLAGS = ["-O3", "-shared", "-fPIC", "-ffp-contract=off", "-std=c99"]


def cache_dir() -> Path:
    return Path(os.environ.get("GENREC_NATIVE_DIR") or Path.home() / ".cache" / "genrec" / "native")


def library_path(source: Path) -> Path:
    """Where the library of the current ``source`` and flags lives."""
    digest = hashlib.sha256(source.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:16]
    return cache_dir() / f"genrec_{source.stem}_{digest}.so"


def build(source: Path) -> Path:
    """Compile ``source`` (if this version is not built yet); returns the library's path. Raises OSError or
    CalledProcessError (with the compiler's message) when it cannot."""
    path = library_path(source)
    if path.exists():
        return path
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise OSError("no C compiler found (cc, gcc, or $CC)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=path.parent, suffix=".so.tmp")
    os.close(fd)
    try:
        subprocess.run([compiler, *FLAGS, str(source), "-o", partial], check=True, capture_output=True, text=True)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return path


def compile_library(source: Path, signatures: dict[str, tuple[list, object]]) -> ctypes.CDLL:
    """Build (once) and load ``source``, declaring ``{function: (argument types, result type)}``. Raises OSError
    or CalledProcessError when it cannot."""
    library = ctypes.CDLL(str(build(source)))
    for name, (args, result) in signatures.items():
        function = getattr(library, name)
        function.argtypes, function.restype = args, result
    return library


def ptr(array: np.ndarray) -> int:
    """The address of a C-contiguous array's data (for a ctypes call)."""
    assert array.flags.c_contiguous, "native kernels take C-contiguous arrays"
    return array.ctypes.data
