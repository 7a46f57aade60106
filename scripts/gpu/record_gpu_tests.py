"""The GPU correctness tests' outcome as a results file: pytest's JUnit XML (written by scripts/gpu/gpu_recipe_check.sh
on a lent GPU) -> ``results/gpu_tests.json`` with each test's outcome, seconds and message, the GPU, the versions and
the commit. docs/results/generative.md shows it in the GPU recipe section (record_gpu_tests_tables.py).

Usage::

    python -m scripts.gpu.record_gpu_tests runs/gpu_recipe/gpu_tests.xml [--out results/gpu_tests.json]
"""
from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from genrec.utils.provenance import provenance, write_json  # noqa: E402

#: JUnit child elements that mark a test case as not passed, in the order they are looked for
NOT_PASSED = ("failure", "error", "skipped")


def read_junit(path: Path) -> list[dict]:
    """One ``{"test", "outcome", "seconds", "message"}`` per test case of a pytest JUnit XML file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as err:
        raise SystemExit(f"{path}: not a readable JUnit XML file ({err})") from None
    tests = []
    for case in root.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        outcome, message = "passed", ""
        for tag in NOT_PASSED:
            element = case.find(tag)
            if element is not None:
                outcome, message = tag.replace("failure", "failed"), (element.get("message") or "")[:300]
                break
        tests.append({"test": f"{module}.py::{case.get('name')}", "outcome": outcome,
                      "seconds": round(float(case.get("time", 0.0)), 2), "message": message})
    if not tests:
        raise SystemExit(f"{path}: no <testcase> elements: did pytest collect anything?")
    return tests


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path, help="pytest --junitxml output")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gpu_tests.json")
    args = parser.parse_args(argv)
    tests = read_junit(args.junit)
    import lightning
    import torch
    import triton

    outcomes = [t["outcome"] for t in tests]
    payload = {"name": args.out.stem, "kind": "gpu_tests",
               "summary": {k: outcomes.count(k) for k in ("passed", "failed", "error", "skipped")},
               "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
                            "lightning": lightning.__version__},
               "tests": tests, **provenance()}
    path = write_json(args.out, payload)
    print(f"{path}: " + ", ".join(f"{n} {k}" for k, n in payload["summary"].items()))
    return path


if __name__ == "__main__":
    main()
