#!/usr/bin/env bash
# Generative retrieval that earns its name (issue 45), on Amazon Beauty 2014 or Scientific 2018 (DATASET=beauty |
# scientific), one part at a time (PART):
#
# PART=ranking (the ranking table): a SASRec teacher (experiment=<dataset>_sasrec, seed 0 -> <dataset>_gr_teacher_seed0);
#   collaborative SIDs from its item table (RQ-VAE 3 x 256 + a collision level, as
#   scripts/recipes/reproduce_post_training.sh); per seed the SID generator with the item head tied to item-ID inputs,
#   distilled from the teacher into codes and head (the recipe of the Beauty post-training table's _items_tied_hdistill
#   rows), its checkpoint chosen by the head's validation NDCG@10 (ranking@model.decoding=head) ->
#   <dataset>_gr_generator_seed<S>; per seed a SASRec of the generator's size (its backbone: dim 128, 4 blocks of 4
#   heads, MLP 512, dropout 0.1; the same item table; batches of similar lengths as the generator's)
#   distilled from the same teacher the same way (stage.weight=1: the teacher's top 100 items at every position)
#   for the same epochs -> <dataset>_gr_sasrec_distill_seed<S>; then every seed's checkpoint ranked four ways
#   (scripts/analysis/compare_rankings.py --mode codes head liger guided) -> results/<dataset>_gr_rankings.json,
#   where the seeds ranked before (SEEDS="1 2" after SEEDS=0) keep their rows.
# PART=cold (item cold start, TIGER §4.3): text SIDs (MiniLM embeddings of the item text, RQ-VAE as above: content
#   only); a SASRec teacher of the split data.split.cold_items=$COLD (5% of the items held out of training, cold_seed
#   0) -> <dataset>_cold_teacher_seed0; per seed the same generator recipe on that split with the text SIDs ->
#   <dataset>_cold_generator_seed<S>; then scripts/analysis/cold_start.py -> results/<dataset>_cold_start.json.
#   UNSEEN_BEAM=N: the beam among the cold items N wide (default the model's; their number scores every one) ->
#   results/<dataset>_cold_start_beamN.json (finished runs are reused, so a second call only ranks).
# PART=codes (codes that rank on their own; after PART=ranking of the same DATASET: it reuses the teacher and its SIDs):
#   TRY names one change, trained at SEEDS (default 0) with its checkpoint chosen by the codes' validation NDCG@10
#   (ranking@model.decoding=codes) -> <dataset>_codes_<try>_seed<S>: control (the ranking part's generator, chosen by
#   its codes), first1024 (SIDs whose first codebook has 1,024 codes: on Beauty about 12 items share a first code
#   instead of 47), level_swap (the same RQ-VAE codes with the first two levels swapped, level_order=[1,0,2]: items of one
#   coarse cluster, which for a collaborative embedding are items that follow the same items, get different first
#   codes), gpu_recipe (the GPU recipe's batches of 1,024, lr 2e-3 after 200 warm-up steps, cosine decay, 40 epochs
#   validated every 4, on the CPU); then the validation curves of every try so far ->
#   results/curves_<dataset>_codes.json.
#
# SEEDS (default "0 1 2"), EPOCHS (the generators' and the distilled SASRec's epoch cap: Beauty 10, Scientific 25 by
# default, the budgets of the recorded post-training runs), THREADS (1), RUNS (runs/gr/<dataset>); DOC=0 skips
# regenerating docs/results.md at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
DATASET=${DATASET:-beauty}
[[ "$DATASET" =~ ^(beauty|scientific)$ ]] || { echo "DATASET must be beauty or scientific, not $DATASET" >&2; exit 2; }
PART=${PART:-ranking}
RUNS=${RUNS:-runs/gr/$DATASET}
THREADS=${THREADS:-1}
COLD=${COLD:-0.05}
declare -A DEFAULT_EPOCHS=([beauty]=10 [scientific]=25)
EPOCHS=${EPOCHS:-${DEFAULT_EPOCHS[$DATASET]}}
COMMON=(threads="$THREADS" trainer.enable_progress_bar=false overwrite_results=true)
SID=(data="$DATASET" tokenizer=rqvae collisions=extra_level seed=0 threads="$THREADS")
# the generator: item head tied to item-ID inputs, distilled from the teacher into its codes and its head
GENERATOR=(experiment="${DATASET}_sid_gpt" model.generator.item_head=true model.generator.item_inputs=true
           model.generator.tie_item_tables=true stage=distill stage.item_head_weight=1.0
           trainer.max_epochs="$EPOCHS")
# a SASRec of the generator's size: its backbone and item table
# (in batches of similar lengths, as the generator's: SASRec pads each batch to its longest sequence)
SASREC_OF_GENERATOR=(experiment="${DATASET}_sasrec" model.dim=128 model.encoder.num_layers=4 model.encoder.num_heads=4
                     +model.encoder.ffn_dim=512 model.encoder.dropout=0.1 +model.bucket_by_length=true
                     trainer.max_epochs="$EPOCHS")

train() {  # train <run folder> <overrides...>: skipped when the folder holds a finished run
  local dir=$1; shift
  [ -f "$dir/metrics.json" ] || "$PY" -m genrec.train "${COMMON[@]}" "$@" hydra.run.dir="$dir"
}
tokenize() {  # tokenize <table folder> <overrides...>
  local dir=$1; shift
  [ -f "$dir/sid_table.parquet" ] || "$PY" -m genrec.tokenize "${SID[@]}" "$@" hydra.run.dir="$dir"
}

case "$PART" in
  ranking)
    train "$RUNS/teacher" experiment="${DATASET}_sasrec" seed=0 results_name="${DATASET}_gr_teacher_seed0"
    tokenize "$RUNS/sid" encoder=collaborative encoder.run_dir="$RUNS/teacher"
    gens=()
    for seed in ${SEEDS:-0 1 2}; do
      train "$RUNS/gen-$seed" "${GENERATOR[@]}" sid_table="$RUNS/sid" stage.teacher="$RUNS/teacher" seed="$seed" \
        ranking@model.decoding=head results_name="${DATASET}_gr_generator_seed$seed"
      train "$RUNS/sasrec-distill-$seed" "${SASREC_OF_GENERATOR[@]}" stage=distill stage.teacher="$RUNS/teacher" \
        seed="$seed" results_name="${DATASET}_gr_sasrec_distill_seed$seed"
      gens+=("$RUNS/gen-$seed")
    done
    out="results/${DATASET}_gr_rankings.json" keep=()  # the seeds ranked before join this run's
    [ ! -f "$out" ] || keep=(--keep "$out")
    "$PY" -m scripts.analysis.compare_rankings "${gens[@]}" "${keep[@]}" --mode codes --mode head --mode liger \
      --mode guided --threads "$THREADS" --out "$out"
    ;;
  cold)
    tokenize "$RUNS/sid-text" encoder.on_empty=raw_id
    SPLIT=(data.split.cold_items="$COLD" data.split.cold_seed=0)
    train "$RUNS/cold-teacher" experiment="${DATASET}_sasrec" "${SPLIT[@]}" seed=0 \
      results_name="${DATASET}_cold_teacher_seed0"
    gens=()
    for seed in ${SEEDS:-0 1 2}; do
      train "$RUNS/cold-gen-$seed" "${GENERATOR[@]}" "${SPLIT[@]}" sid_table="$RUNS/sid-text" \
        stage.teacher="$RUNS/cold-teacher" seed="$seed" ranking@model.decoding=head \
        results_name="${DATASET}_cold_generator_seed$seed"
      gens+=("$RUNS/cold-gen-$seed")
    done
    "$PY" -m scripts.analysis.cold_start "${gens[@]}" --teacher "$RUNS/cold-teacher" --threads "$THREADS" \
      ${UNSEEN_BEAM:+--unseen-beam "$UNSEEN_BEAM"} \
      --out "results/${DATASET}_cold_start${UNSEEN_BEAM:+_beam$UNSEEN_BEAM}.json"
    ;;
  codes)
    TRY=${TRY:-control}
    declare -A TRIES=(
      [control]="sid_table=$RUNS/sid"
      [first1024]="sid_table=$RUNS/sid-first1024"
      [level_swap]="sid_table=$RUNS/sid-level-swap"
      [gpu_recipe]="sid_table=$RUNS/sid data.batch_size=1024 optim.lr=2e-3 optim.warmup_steps=200
                    optim.schedule=cosine trainer.max_epochs=40 trainer.check_val_every_n_epoch=4"
    )
    [ -n "${TRIES[$TRY]:-}" ] || { echo "unknown TRY $TRY; known: ${!TRIES[*]}" >&2; exit 2; }
    COLLABORATIVE=(encoder=collaborative encoder.run_dir="$RUNS/teacher")
    [ "$TRY" != first1024 ] || tokenize "$RUNS/sid-first1024" "${COLLABORATIVE[@]}" tokenizer.first_codebook_size=1024
    [ "$TRY" != level_swap ] || tokenize "$RUNS/sid-level-swap" "${COLLABORATIVE[@]}" "level_order=[1,0,2]"
    for seed in ${SEEDS:-0}; do
      # shellcheck disable=SC2086  # the try's overrides
      train "$RUNS/codes-$TRY-$seed" "${GENERATOR[@]}" stage.teacher="$RUNS/teacher" seed="$seed" \
        ranking@model.decoding=codes ${TRIES[$TRY]} results_name="${DATASET}_codes_${TRY}_seed$seed"
    done
    finished=()  # the validation curves of every try trained so far
    for dir in "$RUNS"/codes-*; do [ -f "$dir/metrics.json" ] && finished+=("$dir"); done
    "$PY" -m scripts.analysis.record_curves --out "results/curves_${DATASET}_codes.json" "${finished[@]}"
    ;;
  *) echo "PART must be ranking, cold or codes, not $PART" >&2; exit 2 ;;
esac
[ "${DOC:-1}" = 0 ] || "$PY" -m scripts.docs.make_results_doc
