#!/usr/bin/env bash
# HSTU vs SASRec under one protocol (leave-one-out, full-corpus ranking, history removed) and the same budget rules
# (at most 100 epochs, early stopping after 10 without a better validation NDCG@10), 3 seeds each:
#   ml100k_hstu, ml100k_hstu_large, ml100k_sasrec (genrec's preset), ml100k_sasrec_cosine (SASRec with HSTU's
#   cosine / 0.05 loss), beauty_hstu (SASRec on Beauty: scripts/recipes/reproduce_beauty_sasrec.sh); and, not run by
#   default, ml100k_sasrec_features / ml100k_hstu_features / ml100k_hstu_large_features: the same presets with every
#   ML-100K side feature on (each input event's rating as an action, the item's genres, the user's age bucket, gender
#   and occupation: model.features, genrec/data/features.py); scientific_sasrec / scientific_hstu (Amazon Scientific
#   2018, the Amazon presets, at most 100 epochs) and scientific_sasrec_features / scientific_hstu_features with
#   its item features (brand and category path; the data has no ratings, user attributes or times);
#   beauty_sasrec_features / beauty_hstu_features with the words of the item titles as an item feature
#   (title_terms; the Beauty 2014 copy has no other side features) and the 40-epoch cap of the recorded Beauty runs;
#   ml100k_sasrec_features_drop4 / ml100k_hstu_features_drop4: the features parts with dropout 0.4 instead of the
#   presets' 0.2, the same change for both models (docs/results.md picks each model's dropout by validation).
# Writes results/<part>_seed<S>.json and regenerates docs/results.md.
# Usage: bash scripts/recipes/reproduce_hstu.sh [part ...]   (default: every part; SEEDS="0 1 2" by default;
#        OVERRIDES="..." adds Hydra overrides to every run, e.g. OVERRIDES="trainer.max_epochs=40" as the recorded
#        Beauty runs)
# One torch thread per run (THREADS=1 by default: parts run side by side; two threads per process on a shared
# 2-core machine spin-wait for each other). On a shared 2-core machine each run takes 0.5-3 h (see the train times in
# docs/results.md): run parts in parallel. A part whose run folder exists is resumed (exactly: genrec-train
# resume_from=<folder>), so an interrupted call continues where it stopped; results/ files are replaced.
set -euo pipefail
cd "$(dirname "$0")/../.."
SEEDS=${SEEDS:-"0 1 2"}
PY=${PYTHON:-.venv/bin/python}
FEATURES="model.features.actions=true model.features.item=[genres] model.features.user=[age,gender,occupation]"
AMAZON_FEATURES="model.features.item=[brand,categories]"
BEAUTY_FEATURES="model.features.item=[title_terms]"
declare -A ARGS=(
  [ml100k_hstu]="experiment=ml100k_hstu"
  [ml100k_hstu_large]="experiment=ml100k_hstu model=hstu_large"
  [ml100k_sasrec]="experiment=ml100k_sasrec"
  [ml100k_sasrec_cosine]="experiment=ml100k_sasrec model.name=sasrec_cosine model.similarity=cosine model.loss.temperature=0.05"
  [beauty_hstu]="experiment=beauty_hstu"
  [ml100k_sasrec_features]="experiment=ml100k_sasrec $FEATURES"
  [ml100k_hstu_features]="experiment=ml100k_hstu $FEATURES"
  [ml100k_hstu_large_features]="experiment=ml100k_hstu model=hstu_large $FEATURES"
  [beauty_sasrec_features]="experiment=beauty_sasrec trainer.max_epochs=40 $BEAUTY_FEATURES"
  [beauty_hstu_features]="experiment=beauty_hstu trainer.max_epochs=40 $BEAUTY_FEATURES"
  [ml100k_sasrec_features_drop4]="experiment=ml100k_sasrec $FEATURES model.encoder.dropout=0.4"
  [ml100k_hstu_features_drop4]="experiment=ml100k_hstu $FEATURES model.encoder.dropout=0.4"
  [scientific_sasrec]="experiment=scientific_sasrec trainer.max_epochs=100"
  [scientific_hstu]="experiment=scientific_hstu"
  [scientific_sasrec_features]="experiment=scientific_sasrec trainer.max_epochs=100 $AMAZON_FEATURES"
  [scientific_hstu_features]="experiment=scientific_hstu $AMAZON_FEATURES"
)
PARTS=("$@")
[ ${#PARTS[@]} -eq 0 ] && PARTS=(ml100k_hstu ml100k_hstu_large ml100k_sasrec ml100k_sasrec_cosine beauty_hstu)
for part in "${PARTS[@]}"; do
  [ -n "${ARGS[$part]:-}" ] || { echo "unknown part $part; known: ${!ARGS[*]}" >&2; exit 2; }
  for seed in $SEEDS; do
    run="runs/${part}_seed${seed}"
    report=(results_name="${part}_seed${seed}" overwrite_results=true trainer.enable_progress_bar=false
            threads="${THREADS:-1}")
    if [ -f "$run/config.yaml" ]; then
      # shellcheck disable=SC2086
      "$PY" -m genrec.train resume_from="$run" ${OVERRIDES:-} "${report[@]}"
    else
      # shellcheck disable=SC2086
      "$PY" -m genrec.train ${ARGS[$part]} ${OVERRIDES:-} seed="$seed" "${report[@]}" hydra.run.dir="$run"
    fi
  done
done
"$PY" -m scripts.docs.make_results_doc
