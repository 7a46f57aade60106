"""Wrap results files written before the envelope (genrec/utils/results.py) in it, in place; files already in it are
left alone, so the script can run again whenever older files arrive.

    python -m scripts.docs.envelope              # every results/**/*.json
    python -m scripts.docs.envelope --check      # list the files not in the envelope (exit 1 if any)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from genrec.utils.results import SCHEMA_VERSION, envelope, validate

ROOT = Path(__file__).resolve().parents[2]


def legacy_kind(record: dict[str, Any], path: Path) -> str:
    """The kind of a record written before the envelope: its own ``kind`` or ``benchmark`` name, a training or
    tokenizer run by its keys, else the file's name."""
    if record.get("kind"):
        return str(record["kind"])
    if record.get("benchmark"):
        return str(record["benchmark"])
    if "metrics" in record and "config" in record:
        return "train_run"
    return path.stem


def migrate(path: Path) -> bool:
    """Wrap ``path`` in the envelope unless it is; whether it changed."""
    record = json.loads(path.read_text())
    if record.get("schema_version") == SCHEMA_VERSION:
        return False
    doc = validate(envelope(legacy_kind(record, path), record), path)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    files = sorted((ROOT / "results").rglob("*.json"))
    if args.check:
        legacy = [p for p in files if json.loads(p.read_text()).get("schema_version") != SCHEMA_VERSION]
        print("\n".join(str(p.relative_to(ROOT)) for p in legacy) or "every results file is in the envelope")
        return 1 if legacy else 0
    changed = [p for p in files if migrate(p)]
    print(f"{len(changed)} of {len(files)} results files wrapped in the envelope")
    return 0


if __name__ == "__main__":
    sys.exit(main())
