"""The compiled kernels of the dynamic table (``native.c``), built with the system C compiler at first use and
called through ctypes, which releases the interpreter lock during each call.

Why: a :class:`~genrec.embedding.dynamic.prefetch.Prefetcher` maps the next batch in a background thread while
the current one trains; in numpy, the mapping is hundreds of small calls and per-ID loops that hold the lock, so
the training thread's Python waits for it. These kernels run the loops (slot-map probes and inserts, Bloom
filter, count-min sketch, row init) without the lock; they compute the same values as the numpy code bit for bit
(``tests/embedding/test_dynamic_native.py``), which stays as the reference and the fallback.

The library is built once per source version into ``$GENREC_NATIVE_DIR`` (default ``~/.cache/genrec/native``):
``cc -O3 -shared -fPIC -ffp-contract=off``, written under a temporary name and renamed, so concurrent processes
never load a partial file. Without a compiler (or with ``GENREC_DYNAMIC_NATIVE=0``) the tables use numpy and the
reason is logged once. :func:`compile_library` builds and loads another source the same way (the slab store's,
:mod:`genrec.storage.slab`).
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native.c")
FLAGS = ["-O3", "-shared", "-fPIC", "-ffp-contract=off", "-std=c99"]
_I64, _U64, _PTR, _F64 = ctypes.c_int64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_double
_SIGNATURES = {
    "genrec_mix64": ([_PTR, _I64, _U64, _PTR], None),
    "genrec_slot_find": ([_PTR, _U64, _U64, _PTR, _I64, _PTR, _PTR], None),
    "genrec_slot_insert": ([_PTR, _U64, _U64, _PTR, _PTR, _I64], _I64),
    "genrec_bloom_add": ([_PTR, _U64, _I64, _U64, _PTR, _I64], None),
    "genrec_bloom_maybe": ([_PTR, _U64, _I64, _U64, _PTR, _I64, _PTR], None),
    "genrec_sketch_add": ([_PTR, _I64, _I64, _U64, _PTR, _PTR, _I64, _PTR], None),
    "genrec_init_rows": ([_PTR, _I64, _I64, _U64, _F64, _PTR], None),
}
_loaded: list = []  # [library or None] once load() ran


def cache_dir() -> Path:
    return Path(os.environ.get("GENREC_NATIVE_DIR") or Path.home() / ".cache" / "genrec" / "native")


def library_path(source: Path = SOURCE) -> Path:
    """Where the library of the current ``source`` (``native.c`` by default) and flags lives."""
    digest = hashlib.sha256(source.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:16]
    return cache_dir() / f"genrec_{source.stem}_{digest}.so"


def build(source: Path = SOURCE) -> Path:
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


def load() -> ctypes.CDLL | None:
    """The compiled kernels, or None (numpy is used; the reason is logged once)."""
    if not _loaded:
        _loaded.append(_load())
    return _loaded[0]


def _load() -> ctypes.CDLL | None:
    if os.environ.get("GENREC_DYNAMIC_NATIVE", "1") == "0":
        log.info("dynamic tables: compiled kernels disabled by GENREC_DYNAMIC_NATIVE=0; using numpy")
        return None
    try:
        return compile_library(SOURCE, _SIGNATURES)
    except subprocess.CalledProcessError as err:
        log.warning("dynamic tables: compiling %s failed (%s); using numpy, whose mapping holds the interpreter "
                    "lock (prefetching gains less)", SOURCE.name, (err.stderr or "").strip()[:500])
        return None
    except OSError as err:
        log.warning("dynamic tables: cannot build or load %s (%s); using numpy, whose mapping holds the "
                    "interpreter lock (prefetching gains less)", SOURCE.name, err)
        return None


def ptr(array: np.ndarray) -> int:
    """The address of a C-contiguous array's data (for a ctypes call)."""
    assert array.flags.c_contiguous, "native kernels take C-contiguous arrays"
    return array.ctypes.data
