#!/usr/bin/env bash
# Post-training of the decoder-only SID generator, each stage against its control (issue 16), on a reduced synthetic
# log (DATA below) so that the whole grid fits a shared 2-core machine:
# 1. a SASRec run (the distillation teacher; its item table also makes the collaborative semantic IDs),
#    -> results/post_sasrec_seed0.json;
# 2. collaborative SIDs: residual k-means on the teacher's item table (genrec-tokenize encoder=collaborative);
# 3. per seed: next-token training (SFT) -> results/post_sft_seed<S>.json; then, each from the SFT run's best
#    checkpoint (init_from) for the same number of extra epochs and the same optimizer settings:
#    continued SFT (the control) -> post_sft_more_seed<S>; DPO (1 popularity negative) -> post_dpo_seed<S>;
#    S-DPO (8 popularity negatives) -> post_sdpo_seed<S>; distillation from the teacher -> post_distill_seed<S>;
#    ARMS (default "sft_more sft_more_nodrop dpo sdpo distill") picks among these and: sft_more_nodrop, the control
#    with dropout off, as the alignment stages train (their matched control); sdpo_sft: S-DPO plus the chosen item's
#    next-token loss (stage.sft_weight=1) -> post_sdpo_sft_seed<S>; sdpo_sft_beam: the same with the SFT model's
#    own beam as negatives (hard negatives) -> post_sdpo_sft_beam_seed<S>; sdpo_seq: S-DPO plus the control's own
#    loss (next token at every position, stage.sft_target=sequence) -> post_sdpo_seq_seed<S>; sdpo_seq_dropout: the
#    same with the backbone's dropout kept on, as in the control; sdpo_seq_beta1: sdpo_seq at beta 1; sdpo_beam and
#    sdpo_seq_beam: S-DPO and sdpo_seq with the SFT model's own beam as negatives; sdpo_all and sdpo_seq_all: S-DPO and
#    sdpo_seq with a preference example at every position of every training sequence (stage.positions=all);
#    sdpo_sampled and sdpo_seq_sampled: S-DPO and sdpo_seq with negatives sampled from the SFT model (constrained to
#    valid semantic IDs); sdpo_seq_rank: sdpo_seq with rewards on the scores the model ranks by (stage.score=ranking:
#    for an item-head generator, code_weight x code plus item-head log-probability); sdpo_seq_rank_beam: the same with
#    the model's own top recommended wrong items as negatives; sdpo_seq_rank_beam_skip10: the same with the wrong
#    items ranked 11-18 instead (stage.beam_skip=10: the top ones are often the user's next items);
#    STAGE_OVERRIDES (e.g. the SFT variant's model settings) are added to every stage;
# 4. (LLM=1, the default) the generator on a small transformers LM, full fine-tuning vs LoRA -> post_llm_*_seed0;
# then docs/results.md. Every results file carries the most-popular and transition baselines of the same protocol.
# The arms that lost to their matched control were moved to results/archive/ (its README.md says why, per arm).
# SEEDS="0 1 2" (default), SFT_EPOCHS, STAGE_EPOCHS, STAGE_LR, THREADS; RUNS (default runs/post) holds the folders.
# SFT_OVERRIDES (e.g. "optim.schedule=cosine") with SFT_TAG (e.g. _cosine): an SFT variant -> <prefix>sft<tag>_seed<S>,
# and the stages start from it (<prefix><arm><tag>_seed<S>); ARMS="" runs no stage. The recorded variants:
# SFT_TAG=_cosine SFT_OVERRIDES="optim.schedule=cosine" and SFT_TAG=_cosine_items SFT_OVERRIDES="optim.schedule=cosine
# model.generator.item_inputs=true" (each history item's own embedding beside its codes) on Beauty; SFT_TAG=_items
# SFT_OVERRIDES="model.generator.item_head=true model.decoding.rank=hybrid" (an item head re-ranking the beam) and
# SFT_TAG=_items_distill (the same plus the distillation overrides below) ARMS="" on Scientific and Beauty; SFT_TAG=_conv
# SFT_EPOCHS=100 (SFT to early stopping; an SFT_TAG alone names a variant of the epochs) on the synthetic log. STAGE_TAG
# (e.g. _lr5e-5, with STAGE_LR=5e-5) names a stage variant -> <prefix><arm><sft tag><stage tag>_seed<S>, so that
# stages at another learning rate do not overwrite the recorded ones.
# DATASET=beauty: the same stages on Amazon Beauty 2014 with its presets (teacher experiment=beauty_sasrec, SIDs from
# RQ-VAE 3 x 256 + a collision level on its item table as in scripts/recipes/reproduce_beauty_sid_sources.sh, generator
# experiment=beauty_sid_gpt), results/beauty_post_<arm>_seed<S>.json; LLM arms off. DATASET=scientific: the same on
# Amazon Industrial & Scientific 2018 (scientific_sasrec, scientific_sid_gpt) -> results/scientific_post_<arm>_seed<S>.
# The recorded results (docs/results.md) were cut to the time left on a shared 2-core machine: SFT_EPOCHS=8
# STAGE_EPOCHS=3 STAGE_LR=5e-4, the three seeds' SFT and then their twelve stages run side by side (the same
# overrides as below, one process each); LLM arms with SFT_EPOCHS=5 (LoRA stopped after epoch 1 and resumed with
# resume_from in a later session). Scientific: SFT_EPOCHS=25 (early stopping ended plain SFT first) STAGE_EPOCHS=5
# STAGE_LR=5e-4 ARMS="sft_more_nodrop sdpo_seq sdpo distill dpo", two processes side by side; and, at seed 0,
# STAGE_TAG=_ep12 STAGE_EPOCHS=12 ARMS="sft_more_nodrop distill"; and, at seeds 0-2, SFT with distillation from
# the first step, SFT_TAG=_distill SFT_OVERRIDES="stage=distill stage.teacher=$RUNS/teacher" (its path written
# out) ARMS="sft_more_nodrop sdpo_seq distill", four processes side by side; the _items and _items_distill variants
# at seeds 0-2 with SFT_EPOCHS=25, up to six processes side by side. Beauty's _items and _items_distill: SEEDS=0
# SFT_EPOCHS=10 (the epochs of its plain SFT runs), _items_distill alone and again (the same metrics) beside _items;
# and SFT_TAG=_items_tied SFT_OVERRIDES="model.generator.item_head=true model.decoding.rank=hybrid
# model.generator.item_inputs=true model.generator.tie_item_tables=true" (the item head scores with the item-input
# table) beside _items_tied_distill (the same plus the distillation overrides), SEEDS=0 SFT_EPOCHS=10; then
# SFT_TAG=_items_tied_hdistill (the same plus stage.item_head_weight=1: the teacher's top items taught to the item
# head too) beside _items_tied_hdistill_cosine (the same plus optim.schedule=cosine), SEEDS=0 SFT_EPOCHS=10; and
# _items_tied_hdistill again at SEEDS=1 and SEEDS=2, side by side. Their rankings (compare_rankings.py, rank=guided
# with code_weight 0 / 0.25 / 0.5 / 1): the command in README.md. From those three checkpoints, S-DPO on the ranking
# scores against its control: SFT_TAG=_items_tied_hdistill STAGE_TAG=_guided05 STAGE_EPOCHS=2 STAGE_LR=5e-4
# ARMS=sdpo_seq_rank (and ARMS=sft_more_nodrop, one process each) STAGE_OVERRIDES="model.generator.item_head=true
# model.generator.item_inputs=true model.generator.tie_item_tables=true model.decoding.rank=guided
# model.decoding.code_weight=0.5", then compare_rankings.py --variant rank=guided,code_weight=0 on the six runs; and at
# SEEDS=0 the same with STAGE_TAG=_guided0_lr5e-5 STAGE_LR=5e-5 and model.decoding.code_weight=0; and
# ARMS=sdpo_seq_rank_beam, then ARMS=sdpo_seq_rank_beam_skip10, with the _guided05 settings (seeds 0-2, three
# processes side by side), each sdpo_seq_rank_beam run then ranked with compare_rankings.py --variant
# rank=guided,code_weight=0.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
RUNS=${RUNS:-runs/post}
COMMON=(seed=0 threads="${THREADS:-1}" trainer.enable_progress_bar=false overwrite_results=true)
if [ "${DATASET:-synthetic}" = beauty ] || [ "${DATASET:-synthetic}" = scientific ]; then
  PREFIX=${DATASET}_post_ LLM=0 DATA=()
  TEACHER=(experiment="${DATASET}_sasrec")
  TOKENIZER=(data="$DATASET" tokenizer=rqvae collisions=extra_level)
  GENERATOR=(experiment="${DATASET}_sid_gpt" sid_table="$RUNS/sid") GPT=()
elif [ "${DATASET:-synthetic}" = synthetic ]; then
  PREFIX=post_
  DATA=(data.reader.num_users=2000 data.reader.num_items=1000 data.reader.num_clusters=20 data.max_len=50)
  TEACHER=(model=sasrec trainer.max_epochs="${TEACHER_EPOCHS:-30}")
  TOKENIZER=(tokenizer=rkmeans tokenizer.codebook_size=32)
  GENERATOR=(model=sid_gpt model.dim=64 sid_table="$RUNS/sid")
  GPT=(model.backbone.num_layers=2 model.backbone.num_heads=2 model.backbone.ffn_dim=256)
else
  echo "DATASET must be synthetic, beauty or scientific, not ${DATASET}" >&2; exit 2
fi

if [ ! -f "$RUNS/teacher/metrics.json" ]; then
  "$PY" -m genrec.train "${DATA[@]}" "${COMMON[@]}" "${TEACHER[@]}" results_name="${PREFIX}sasrec_seed0" \
    hydra.run.dir="$RUNS/teacher"
fi
if [ ! -f "$RUNS/sid/sid_table.parquet" ]; then
  "$PY" -m genrec.tokenize "${DATA[@]}" "${TOKENIZER[@]}" seed=0 threads="${THREADS:-1}" encoder=collaborative \
    encoder.run_dir="$RUNS/teacher" hydra.run.dir="$RUNS/sid"
fi
SFT_TAG=${SFT_TAG-} STAGE_TAG=${STAGE_TAG-}
if [ -n "${SFT_OVERRIDES:-}" ] && [ -z "$SFT_TAG" ]; then
  echo "SFT_OVERRIDES needs an SFT_TAG to name its runs" >&2; exit 2
fi
for seed in ${SEEDS:-0 1 2}; do
  SEEDED=("${COMMON[@]}" seed="$seed")
  if [ ! -f "$RUNS/sft$SFT_TAG-$seed/metrics.json" ]; then  # an SFT run done earlier is reused (e.g. for other ARMS)
    # shellcheck disable=SC2086  # the variant's overrides
    "$PY" -m genrec.train "${DATA[@]}" "${SEEDED[@]}" "${GENERATOR[@]}" "${GPT[@]}" ${SFT_OVERRIDES:-} \
      trainer.max_epochs="${SFT_EPOCHS:-40}" results_name="${PREFIX}sft${SFT_TAG}_seed$seed" \
      hydra.run.dir="$RUNS/sft$SFT_TAG-$seed"
  fi
  # shellcheck disable=SC2206  # the stages' extra overrides, split on spaces
  STAGE=(init_from="$RUNS/sft$SFT_TAG-$seed" trainer.max_epochs="${STAGE_EPOCHS:-10}" optim.lr="${STAGE_LR:-1e-4}"
         ${STAGE_OVERRIDES:-})
  declare -A ARM=([sft_more]="" [dpo]="stage=dpo" [sdpo]="stage=sdpo" [sdpo_sft]="stage=sdpo stage.sft_weight=1.0"
                  [sdpo_sft_beam]="stage=sdpo stage.sft_weight=1.0 stage.negatives=beam"
                  [sdpo_seq]="stage=sdpo stage.sft_weight=1.0 stage.sft_target=sequence"
                  [sdpo_beam]="stage=sdpo stage.negatives=beam"
                  [sdpo_seq_beam]="stage=sdpo stage.sft_weight=1.0 stage.sft_target=sequence stage.negatives=beam"
                  [sdpo_seq_dropout]="stage=sdpo stage.sft_weight=1.0 stage.sft_target=sequence
                                      stage.disable_dropout=false"
                  [sdpo_seq_beta1]="stage=sdpo stage.sft_weight=1.0 stage.sft_target=sequence stage.beta=1.0"
                  [sdpo_all]="stage=sdpo stage.positions=all"
                  [sdpo_seq_all]="stage=sdpo stage.sft_weight=1.0 stage.sft_target=sequence stage.positions=all"
                  [sdpo_sampled]="stage=sdpo stage.negatives=sampled"
                  [sdpo_seq_sampled]="stage=sdpo stage.sft_weight=1.0 stage.sft_target=sequence stage.negatives=sampled"
                  [sdpo_seq_rank]="stage=sdpo stage.sft_weight=1.0 stage.sft_target=sequence stage.score=ranking"
                  [sdpo_seq_rank_beam]="stage=sdpo stage.sft_weight=1.0 stage.sft_target=sequence stage.score=ranking
                                        stage.negatives=beam"
                  [sdpo_seq_rank_beam_skip10]="stage=sdpo stage.sft_weight=1.0 stage.sft_target=sequence
                                               stage.score=ranking stage.negatives=beam stage.beam_skip=10"
                  [sft_more_nodrop]="model.backbone.dropout=0.0"
                  [distill]="stage=distill stage.teacher=$RUNS/teacher")
  for name in ${ARMS-sft_more sft_more_nodrop dpo sdpo distill}; do
    [ -n "${ARM[$name]+set}" ] || { echo "unknown arm $name; known: ${!ARM[*]}" >&2; exit 2; }
    run="$name$SFT_TAG$STAGE_TAG"
    # shellcheck disable=SC2086  # the arm's overrides
    "$PY" -m genrec.train "${DATA[@]}" "${SEEDED[@]}" "${GENERATOR[@]}" "${GPT[@]}" "${STAGE[@]}" ${ARM[$name]} \
      results_name="${PREFIX}${run}_seed$seed" hydra.run.dir="$RUNS/$run-$seed"
  done
done
# 4. the generator on a transformers causal LM whose vocabulary gains the SID tokens (a small random-initialised
#    llama: no weights can be downloaded here), full fine-tuning vs LoRA, same data, SIDs and epochs (LLM=0: skip)
if [ "${LLM:-1}" = 1 ]; then
  LLAMA=(model.backbone.config.num_hidden_layers=2 model.backbone.config.intermediate_size=256
         model.backbone.config.num_attention_heads=2 model.backbone.config.num_key_value_heads=2)
  for arm in "llm_full hf_vocab" "llm_lora hf_vocab_lora"; do
    read -r name backbone <<< "$arm"
    "$PY" -m genrec.train "${DATA[@]}" "${COMMON[@]}" "${GENERATOR[@]}" backbone@model.backbone="$backbone" \
      "${LLAMA[@]}" trainer.max_epochs="${SFT_EPOCHS:-40}" results_name="post_${name}_seed0" \
      hydra.run.dir="$RUNS/$name-0"
  done
fi
"$PY" -m scripts.docs.make_results_doc
