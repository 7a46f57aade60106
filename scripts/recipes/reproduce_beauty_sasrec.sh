#!/usr/bin/env bash
# SASRec on Amazon Beauty 2014 5-core with the TIGER paper's protocol (leave-one-out, full-corpus ranking,
# history removed), three seeds. Writes results/beauty_sasrec_seed<S>.json and regenerates docs/results.md.
# Needs the dataset in $GENREC_DATA_DIR (default ../shared/data). About 1 min per epoch on one CPU thread.
# OVERRIDES="..." adds Hydra overrides, e.g. OVERRIDES="trainer.max_epochs=40" as the recorded runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
for seed in ${SEEDS:-0 1 2}; do
  # shellcheck disable=SC2086
  "$PY" -m genrec.train experiment=beauty_sasrec ${OVERRIDES:-} seed="$seed" trainer.enable_progress_bar=false \
    results_name="beauty_sasrec_seed$seed" overwrite_results=true
done
"$PY" -m scripts.docs.make_results_doc
