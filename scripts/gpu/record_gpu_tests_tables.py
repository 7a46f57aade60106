"""The docs table of scripts/gpu/record_gpu_tests.py: each GPU correctness test's outcome and seconds."""
from __future__ import annotations

from scripts.docs.tables.common import _commits


def tables(files: list[dict]) -> list[str]:
    """The correctness tests run on the GPU (scripts/gpu/record_gpu_tests.py): each test's outcome and seconds."""
    out = []
    for r in (f for f in files if f.get("kind") == "gpu_tests"):
        v = r["versions"]
        out += [f"### Correctness on the GPU (`results/{r['name']}.json`)", "",
                f"tests/kernels (Triton and CUDA kernels against their PyTorch references, outputs and gradients) and "
                f"compiled vs eager training steps on CUDA, run by scripts/gpu/gpu_recipe_check.sh on one "
                f"{r['environment']['cuda']}: torch {v['torch']} (CUDA {v['cuda']}), triton {v['triton']}, commit "
                f"{_commits([r])}. " + ", ".join(f"{n} {k}" for k, n in r["summary"].items() if n) + ".", "",
                "| test | outcome | seconds |", "|---|---|---|"]
        out += [f"| `{t['test'].split('::')[-1]}` | {t['outcome']}"
                + (f": {t['message'].replace('|', '/')}" if t["message"] else "") + f" | {t['seconds']:.1f} |"
                for t in r["tests"]]
        out.append("")
    return out
