#!/usr/bin/env bash
# SASRec on Amazon Beauty 2014 5-core with the TIGER paper's protocol (leave-one-out, full-corpus ranking,
# history removed), three seeds. Writes results/beauty_sasrec_seed<S>.json and regenerates docs/results.md.
# Needs the dataset in $GENREC_DATA_DIR (default ../shared/data). About 30-60 min per seed on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
for seed in ${SEEDS:-0 1 2}; do
  "$PY" -m genrec.train experiment=beauty_sasrec seed="$seed" trainer.enable_progress_bar=false \
    results_name="beauty_sasrec_seed$seed"
done
"$PY" scripts/make_results_doc.py
