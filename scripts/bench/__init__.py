"""Benchmarks: run from the repo root as ``python -m scripts.bench.<name>``; each writes results/<name>.json.
``bench_<name>_tables.py`` beside a benchmark renders its file for docs/results (scripts/docs/make_results_doc.py)."""
