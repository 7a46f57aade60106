"""The compiled kernels of the dynamic table (``native.c``), built with the system C compiler at first use and
called through ctypes, which releases the interpreter lock during each call.

Why: a :class:`~genrec.embedding.dynamic.prefetch.Prefetcher` maps the next batch in a background thread while
the current one trains; in numpy, the mapping is hundreds of small calls and per-ID loops that hold the lock, so
the training thread's Python waits for it. These kernels run the loops (slot-map probes and inserts, Bloom
filter, count-min sketch, row init) without the lock; they compute the same values as the numpy code bit for bit
(``tests/embedding/test_dynamic_native.py``), which stays as the reference and the fallback.

The library is built once per source version by :mod:`genrec.storage.compiled`. Without a compiler (or with
``GENREC_DYNAMIC_NATIVE=0``) the tables use numpy and the reason is logged once.
"""
from __future__ import annotations

import ctypes
import logging
import os
import subprocess
from pathlib import Path

from genrec.storage.compiled import compile_library, ptr  # noqa: F401  (ptr: the kernels' callers use native.ptr)

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native.c")
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
