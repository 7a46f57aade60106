"""Figures in the hand-written docs come from results files, through markers this tool fills and checks.

A figure is written ``<!-- fig results/<file>.json <path> <format> -->VALUE<!-- /fig -->``: ``<path>`` walks the
file's JSON with ``/`` between keys (``prefetch/ratio_vs_all_in_memory/tier0_10pct``; list items by index), and
``<format>`` is a Python format spec (``.4f``, ``.2f``, ``.1%``) with an optional suffix after ``|`` (``.2f|x``
writes ``1.48x``). ``python -m scripts.docs.figures`` rewrites every marker's VALUE from its file; ``--check``
only reports the markers whose VALUE differs (what tests/test_docs.py asserts). A figure typed outside a marker is
found by :func:`naked_figures`.

    python -m scripts.docs.figures            # fill README.md and docs/**/*.md (docs/results.md is generated apart)
    python -m scripts.docs.figures --check    # exit 1 listing every stale figure
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- fig (?P<file>\S+) (?P<path>\S+) (?P<format>\S+) -->(?P<value>.*?)<!-- /fig -->")
#: a figure typed by hand: a decimal with 3+ places (0.0569), a ratio (1.48x, 15.6x) or a signed percentage (+13.8%)
NAKED = re.compile(r"(?<![\w.])(?:\d+\.\d{3,}|\d+(?:\.\d+)?x|[+-]\d+(?:\.\d+)?%)(?![\w.])")


def hand_written_docs() -> list[Path]:
    """The docs written by hand: README.md and docs/**/*.md but the generated results pages."""
    return [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md")
                                         if p.name != "results.md" and "results" not in p.parts)


def lookup(file: str, path: str) -> Any:
    """The value at ``path`` (``/`` between keys) in the JSON file ``file`` (relative to the repository)."""
    value = json.loads((ROOT / file).read_text())
    for key in path.split("/"):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def render(value: Any, spec: str) -> str:
    """``value`` formatted by ``spec`` (``<format>[|<suffix>]``)."""
    fmt, _, suffix = spec.partition("|")
    return f"{value:{fmt}}{suffix}"


def fill(text: str) -> str:
    """``text`` with every marker's value rewritten from its results file."""
    return MARKER.sub(lambda m: m.group(0).replace(f"-->{m.group('value')}<!--",
                                                   f"-->{render(lookup(m['file'], m['path']), m['format'])}<!--"),
                      text)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def stale(path: Path) -> list[str]:
    """``file:line: expected X, found Y`` for every marker in ``path`` whose value is not its file's."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for m in MARKER.finditer(line):
            try:
                expected = render(lookup(m["file"], m["path"]), m["format"])
            except (OSError, KeyError, IndexError, ValueError) as err:
                out.append(f"{_shown(path)}:{number}: {m['file']} {m['path']}: {type(err).__name__} {err}")
                continue
            if m["value"] != expected:
                out.append(f"{_shown(path)}:{number}: {m['file']} {m['path']} is {expected}, the doc says "
                           f"{m['value']}")
    return out


def naked_figures(path: Path) -> list[str]:
    """``file:line: figure`` for every figure typed outside a marker and outside code blocks."""
    out, code = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            code = not code
            continue
        if code:
            continue
        prose = MARKER.sub("", re.sub(r"`[^`]*`", "", line))  # code spans and markers are not prose figures
        out += [f"{_shown(path)}:{number}: {figure}" for figure in NAKED.findall(prose)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list the stale figures (exit 1 if any)")
    args = parser.parse_args(argv)
    if args.check:
        problems = [p for path in hand_written_docs() for p in stale(path)]
        print("\n".join(problems) or "every figure matches its results file")
        return 1 if problems else 0
    for path in hand_written_docs():
        text = path.read_text()
        if MARKER.search(text):
            path.write_text(fill(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
