"""``genrec-report <run> [<run> ...] [--out FILE]``: write one self-contained HTML report of the runs.

One run: ``<run>/report.html`` by default; several: ``report.html`` in the working directory by default, the runs
side by side with the config keys that differ. Every run folder is read and checked before anything is written,
so a wrong folder creates nothing (one-line error, exit status 2: see :mod:`genrec.cli`).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from genrec.cli import run_cli
from genrec.errors import UserError
from genrec.report.collect import read_run
from genrec.report.html import render

PROG = "genrec-report"
REPORT_FILE = "report.html"


def write_report(run_paths: list[str], out: str | None = None) -> Path:
    """Read every run, then write the report; returns its path."""
    if len(set(map(os.path.realpath, run_paths))) < len(run_paths):
        raise UserError(f"runs: a run folder is named twice ({', '.join(run_paths)})")
    runs = [read_run(path) for path in run_paths]
    target = Path(out) if out else (runs[0].path / REPORT_FILE if len(runs) == 1 else Path(REPORT_FILE))
    if target.is_dir():
        raise UserError(f"--out {target}: is a folder; expected the path of the HTML file to write")
    page = render(runs)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(page)
    os.replace(partial, target)
    return target


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description="Write a self-contained HTML report of genrec-train "
                                     "runs: curves, throughput and memory, evaluation breakdowns, tokenizer "
                                     "health, config diff.")
    parser.add_argument("runs", nargs="+", metavar="run", help="a run folder written by genrec-train")
    parser.add_argument("-o", "--out", help=f"the HTML file to write (default: <run>/{REPORT_FILE} for one run, "
                                            f"./{REPORT_FILE} for several)")
    return parser.parse_args(argv)


def _main(argv: list[str]) -> None:
    args = parse_args(argv)
    print(f"report: {write_report(args.runs, args.out)}")


def main() -> None:
    run_cli(PROG, _main, sys.argv[1:])


if __name__ == "__main__":
    main()
