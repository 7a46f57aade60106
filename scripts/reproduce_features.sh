#!/usr/bin/env bash
# SASRec and HSTU with side features and actions on MovieLens-100K, under the protocol and budget rules of
# scripts/reproduce_hstu.sh (leave-one-out, full-corpus ranking, history removed; at most 100 epochs, early stopping
# after 10 without a better validation NDCG@10). "features" = every ML-100K feature on: each input event's rating
# as an action, the item's genres, the user's age bucket, gender and occupation (model.features, see
# genrec/data/features.py). The same models without features are scripts/reproduce_hstu.sh's ml100k_sasrec and
# ml100k_hstu parts (also runnable here).
# Writes results/<part>_seed<S>.json and regenerates docs/results.md.
# Usage: bash scripts/reproduce_features.sh [part ...]   (default: the two feature parts; SEEDS="0 1 2" by default)
# Each run takes 0.3-1 h on a shared 2-core machine. A part whose run folder exists is resumed.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-"0 1 2"}
PY=${PYTHON:-.venv/bin/python}
FEATURES="model.features.actions=true model.features.item=[genres] model.features.user=[age,gender,occupation]"
declare -A ARGS=(
  [ml100k_sasrec]="experiment=ml100k_sasrec"
  [ml100k_hstu]="experiment=ml100k_hstu"
  [ml100k_sasrec_features]="experiment=ml100k_sasrec $FEATURES"
  [ml100k_hstu_features]="experiment=ml100k_hstu $FEATURES"
)
PARTS=("$@")
[ ${#PARTS[@]} -eq 0 ] && PARTS=(ml100k_sasrec_features ml100k_hstu_features)
for part in "${PARTS[@]}"; do
  [ -n "${ARGS[$part]:-}" ] || { echo "unknown part $part; known: ${!ARGS[*]}" >&2; exit 2; }
  for seed in $SEEDS; do
    run="runs/${part}_seed${seed}"
    report=(results_name="${part}_seed${seed}" overwrite_results=true trainer.enable_progress_bar=false)
    if [ -f "$run/config.yaml" ]; then
      "$PY" -m genrec.train resume_from="$run" "${report[@]}"
    else
      # shellcheck disable=SC2086
      "$PY" -m genrec.train ${ARGS[$part]} seed="$seed" "${report[@]}" hydra.run.dir="$run"
    fi
  done
done
"$PY" scripts/make_results_doc.py
