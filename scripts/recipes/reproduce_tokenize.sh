#!/usr/bin/env bash
# Semantic IDs for Amazon Beauty 2014 (titles) and Amazon Scientific 2018 (title, brand, categories, description):
# all-MiniLM-L6-v2 embeddings (384-d, cached), then RQ-VAE (TIGER's setup; a 4th level breaks collisions) and
# residual k-means, plain and balanced (collisions moved to the nearest free last-level code). Writes
# results/tokenize_<dataset>_<method>.json and regenerates docs/results.md. Needs the datasets in $GENREC_DATA_DIR
# (default ../shared/data). About 10 min on 2 busy CPU cores with THREADS=1 once the text embeddings are cached;
# encoding the texts the first time takes about 10 min per dataset more.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
for data in ${DATASETS:-beauty scientific}; do
  for method in ${METHODS:-rqvae rkmeans rkmeans_balanced}; do
    collisions=nearest_free
    [ "$method" = rqvae ] && collisions=extra_level
    # Beauty: 7 items have an empty title; their ASINs stand in as text
    "$PY" -m genrec.tokenize data="$data" tokenizer="$method" collisions="$collisions" encoder.on_empty=raw_id \
      threads="${THREADS:-1}" results_name="tokenize_${data}_${method}" overwrite_results=true
  done
done
"$PY" -m scripts.docs.make_results_doc
