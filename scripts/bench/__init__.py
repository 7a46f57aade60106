"""Benchmarks: run from the repo root as ``python -m scripts.bench.<name>``; each writes results/<name>.json."""
