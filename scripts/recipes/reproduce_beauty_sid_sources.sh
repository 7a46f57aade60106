#!/usr/bin/env bash
# Which semantic IDs suit generative retrieval on Amazon Beauty 2014 (issue 16, item 1): the decoder-only generator
# (experiment=beauty_sid_gpt) trained with the same budget on three SID tables that differ only in the item
# embedding they quantise (RQ-VAE 3 x 256 + a collision level, seed 0, as results/tokenize_beauty_rqvae.json):
#   text: MiniLM embeddings of the item text (genrec's default encoder);
#   collaborative: the item table of a SASRec trained on Beauty (experiment=beauty_sasrec, seed 0; no results file);
#   fused: both, each L2-normalised, side by side (encoder=fused).
# -> results/beauty_sidsrc_<source>_seed<S>.json and docs/results.md ("Semantic-ID source"). DATASET=scientific: the
# same on Amazon Industrial & Scientific 2018 (scientific_sasrec, scientific_sid_gpt) -> results/scientific_sidsrc_*.
# BUDGET (default "trainer.max_epochs=10") is the same for every arm; SOURCES and SEEDS pick arms and seeds (run
# SOURCES one per process to use several cores once the teacher and tables exist). LAYOUT picks the code layout of
# every table: rqvae (default: RQ-VAE 3 x 256 + a collision level), rqvae4 (RQ-VAE 4 x 256, collisions moved to the
# nearest free last-level code), rkmeans_balanced (balanced residual k-means 3 x 256 + a collision level); a layout
# other than the default tags its tables and results (<source>_<layout>).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
DATASET=${DATASET:-beauty}
[[ "$DATASET" =~ ^(beauty|scientific)$ ]] || { echo "DATASET must be beauty or scientific, not $DATASET" >&2; exit 2; }
RUNS=${RUNS:-runs/sidsrc}
THREADS=${THREADS:-1}
SOURCES=${SOURCES:-text collaborative fused}
LAYOUT=${LAYOUT:-rqvae}
declare -A LAYOUTS=(
  [rqvae]="tokenizer=rqvae collisions=extra_level"
  [rqvae4]="tokenizer=rqvae tokenizer.num_levels=4 collisions=nearest_free"
  [rkmeans_balanced]="tokenizer=rkmeans_balanced collisions=extra_level"
)
[ -n "${LAYOUTS[$LAYOUT]:-}" ] || { echo "unknown layout $LAYOUT; known: ${!LAYOUTS[*]}" >&2; exit 2; }
TAG=$([ "$LAYOUT" = rqvae ] || echo "_$LAYOUT")
if [[ " $SOURCES " =~ " "(collaborative|fused)" " ]] && [ ! -f "$RUNS/teacher/metrics.json" ]; then  # text needs none
  "$PY" -m genrec.train experiment="${DATASET}_sasrec" seed=0 threads="$THREADS" trainer.enable_progress_bar=false \
    hydra.run.dir="$RUNS/teacher"
fi
declare -A ENCODER=(
  [text]="encoder.on_empty=raw_id"
  [collaborative]="encoder=collaborative encoder.run_dir=$RUNS/teacher"
  [fused]="encoder=fused encoder.parts.collaborative.run_dir=$RUNS/teacher encoder.parts.text.on_empty=raw_id"
)
for source in $SOURCES; do
  [ -n "${ENCODER[$source]:-}" ] || { echo "unknown source $source; known: ${!ENCODER[*]}" >&2; exit 2; }
  if [ ! -f "$RUNS/sid-$source$TAG/sid_table.parquet" ]; then
    # shellcheck disable=SC2086  # the layout's and the source's overrides
    "$PY" -m genrec.tokenize data="$DATASET" ${LAYOUTS[$LAYOUT]} ${ENCODER[$source]} seed=0 \
      threads="$THREADS" hydra.run.dir="$RUNS/sid-$source$TAG"
  fi
done
for seed in ${SEEDS:-0}; do
  for source in $SOURCES; do
    # shellcheck disable=SC2086  # BUDGET: a list of overrides
    "$PY" -m genrec.train experiment="${DATASET}_sid_gpt" sid_table="$RUNS/sid-$source$TAG" seed="$seed" \
      threads="$THREADS" trainer.enable_progress_bar=false ${BUDGET:-trainer.max_epochs=10} overwrite_results=true \
      results_name="${DATASET}_sidsrc_${source}${TAG}_seed$seed" hydra.run.dir="$RUNS/gpt-$source$TAG-$seed"
  done
done
"$PY" -m scripts.docs.make_results_doc
