#!/usr/bin/env bash
# Generative retrieval on Amazon Beauty 2014 5-core (leave-one-out, full catalogue, history removed):
# 1. semantic IDs: MiniLM text embeddings + RQ-VAE 3 x 256 + a collision level (the table of
#    results/tokenize_beauty_rqvae.json: same content hash), into runs/tokenize/beauty-rqvae-seed0;
# 2. TIGER (experiment=beauty_tiger) and the decoder-only generator (experiment=beauty_sid_gpt) on that table,
#    -> results/beauty_tiger_seed<S>.json, results/beauty_sid_gpt_seed<S>.json;
# 3. the beam-search benchmark -> results/bench_beam.json; then docs/results.md.
# Needs the dataset in $GENREC_DATA_DIR (default ../shared/data). The presets train up to 30 / 50 epochs with early
# stopping: hours on 2 CPU cores. The numbers in results/ were cut to fit a shared 2-core machine:
#   TIGER_ARGS="trainer.max_epochs=2 +trainer.max_time=00:00:24:00"
#   SID_GPT_ARGS="trainer.max_epochs=40 +trainer.max_time=00:00:47:00" (trained in three resumed segments)
# GPU=1: both models with recipe=gpu (conf/recipe/gpu.yaml: bf16, batches of 1,024, 10 minutes each) and their
#   results as results/beauty_{tiger,sid_gpt}_text_gpu_seed<S>.json; not run on a GPU (scripts/gpu/gpu_recipe_check.sh
#   is the recipe's recorded GPU run, on the collaborative SIDs).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
SID_TABLE=${SID_TABLE:-runs/tokenize/beauty-rqvae-seed0}
if [ ! -f "$SID_TABLE/sid_table.parquet" ]; then
  "$PY" -m genrec.tokenize data=beauty tokenizer=rqvae collisions=extra_level encoder.on_empty=raw_id seed=0 \
    threads="${THREADS:-1}" hydra.run.dir="$SID_TABLE"
fi
RECIPE=() SUFFIX=""
[ "${GPU:-0}" = 1 ] && RECIPE=(recipe=gpu) SUFFIX=_text_gpu
for seed in ${SEEDS:-0}; do
  # shellcheck disable=SC2086  # the *_ARGS are lists of overrides
  "$PY" -m genrec.train experiment=beauty_tiger sid_table="$SID_TABLE" seed="$seed" threads="${THREADS:-1}" \
    trainer.enable_progress_bar=false results_name="beauty_tiger${SUFFIX}_seed$seed" overwrite_results=true \
    "${RECIPE[@]}" ${TIGER_ARGS:-}
  # shellcheck disable=SC2086
  "$PY" -m genrec.train experiment=beauty_sid_gpt sid_table="$SID_TABLE" seed="$seed" threads="${THREADS:-1}" \
    trainer.enable_progress_bar=false results_name="beauty_sid_gpt${SUFFIX}_seed$seed" overwrite_results=true \
    "${RECIPE[@]}" ${SID_GPT_ARGS:-}
done
"$PY" -m scripts.bench.bench_beam --sid-table "$SID_TABLE" --threads "${THREADS:-1}"
"$PY" -m scripts.docs.make_results_doc
