#!/usr/bin/env bash
# Semantic IDs for Amazon Beauty 2014 (titles) and Amazon Scientific 2018 (title, brand, categories, description):
# all-MiniLM-L6-v2 embeddings (384-d, cached), then RQ-VAE (TIGER's setup, 4th level breaks collisions) and residual
# k-means (collisions moved to the nearest free code). Writes results/tokenize_<dataset>_<method>.json and
# regenerates docs/results.md. Needs the datasets in $GENREC_DATA_DIR (default ../shared/data).
# About 15 min on 2 busy CPU cores with THREADS=1 (text encoding takes most of it the first time).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
for data in ${DATASETS:-beauty scientific}; do
  # Beauty: 7 items have an empty title; their ASINs stand in as text
  "$PY" -m genrec.tokenize data="$data" tokenizer=rqvae collisions=extra_level encoder.on_empty=raw_id \
    threads="${THREADS:-1}" results_name="tokenize_${data}_rqvae"
  "$PY" -m genrec.tokenize data="$data" tokenizer=rkmeans collisions=nearest_free encoder.on_empty=raw_id \
    threads="${THREADS:-1}" results_name="tokenize_${data}_rkmeans"
done
"$PY" scripts/make_results_doc.py
