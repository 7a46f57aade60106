"""Where the real datasets are, for tests that read them (never copied into the repo: their licences)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

#: ../shared/data beside the checkout, or $GENREC_DATA_DIR (the same variable the data configs read).
SHARED = Path(os.environ.get("GENREC_DATA_DIR") or Path(__file__).resolve().parents[1].parent / "shared" / "data")

skip_without_shared = pytest.mark.skipif(
    not SHARED.exists(), reason=f"real datasets not found at {SHARED} (set GENREC_DATA_DIR to their folder)")
