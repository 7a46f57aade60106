#!/usr/bin/env bash
# Issue 16's GPU recipe, run once on a lent GPU (one H200 here), as one script that checks and times everything:
# 1. the machine: nvidia-smi, the versions of torch, triton and lightning;
# 2. correctness on the GPU, against the PyTorch reference: the Triton/CUDA kernels (tests/kernels, bf16 too) and
#    compiled vs eager steps of the generators and of HSTU (tests/generative/test_gpu_recipe.py, CUDA cases); pytest's
#    JUnit XML becomes results/gpu_tests.json (scripts/gpu/record_gpu_tests.py);
# 3. recipe=gpu (bf16-mixed, batches of 1,024 bucketed by length, warm-up) on Amazon Beauty, seed 0,
#    three trainings side by side on the one GPU, beside the tests (each slowed by the others: their times are
#    upper bounds):
#    - the best generator measured on CPU: the decoder-only SID generator with the item head tied to the item
#      inputs, distilled from the SASRec teacher into codes and head, ranked by rank=guided at code weight 0,
#      with compile=false (the recipe's default) -> results/beauty_sid_gpt_items_tied_hdistill_gpu_eager_seed0.json;
#    - the same with compile=true -> ..._gpu_seed0.json;
#    - TIGER on the same semantic IDs, compile=false -> results/beauty_tiger_gpu_eager_seed0.json (its compile=true
#      run, results/beauty_tiger_gpu_seed0.json, was the first run's).
# Needs: SID_TABLE (the collaborative SID table, scripts/recipes/reproduce_post_training.sh DATASET=beauty: $RUNS/sid),
# TEACHER (the SASRec run it was made from: $RUNS/teacher), the dataset in $GENREC_DATA_DIR. TRAIN_MINUTES (default
# 10, the recipe's cap) bounds each training; VAL_EVERY (default 4) validates every that many epochs (a guided beam
# over every validation user costs more than an epoch of 1,024-sequence batches); MAX_EPOCHS (default 500) lets the
# time cap or early stopping end the runs. Logs and results also go to $OUT when it is set. A copy of the checkout
# (the device tool's) sets GENREC_COMMIT to its commit: its .git can be stale. GPU=0 runs the same code path on the
# CPU with tiny limits (a dry run of this script), its results files in $RUNS/results, not results/.
# How it runs on the device tool's H200 (its image has torch 2.11 + CUDA 13, Lightning, transformers, pytest; the
# rest of genrec's imports, the data, the SID table and the teacher travel as one folder built by
# scripts/gpu/pack_gpu_bundle.sh, whose header gives the commands run there), in short:
#   GENREC_COMMIT=<sha> SID_TABLE=.gpu/sid TEACHER=.gpu/teacher TRAIN_MINUTES=5 bash scripts/gpu/gpu_recipe_check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUT=${OUT:-runs/gpu_recipe}
RUNS=${RUNS:-runs/gpu_recipe}
mkdir -p "$OUT" "$RUNS"
: "${SID_TABLE:?SID_TABLE must name a semantic-ID table folder}" "${TEACHER:?TEACHER must name the SASRec run folder}"
MINUTES=${TRAIN_MINUTES:-10}
COMMON=(seed=0 recipe=gpu sid_table="$SID_TABLE" trainer.enable_progress_bar=false overwrite_results=true
        "trainer.max_time=00:00:$(printf %02d "$MINUTES"):00")
RESULTS=results
if [ "${GPU:-1}" = 0 ]; then  # the dry run: CPU, a few batches, one epoch validated
  RESULTS=$RUNS/results  # its figures must not replace the recorded ones
  COMMON+=(results_dir="$RESULTS" trainer.accelerator=cpu data.num_workers=0 trainer.max_epochs=1
           +trainer.limit_train_batches=2 +trainer.limit_val_batches=1 +trainer.limit_test_batches=1
           trainer.check_val_every_n_epoch=1)
else  # the time cap (or early stopping) ends the run, not the presets' epoch counts (30, 50)
  COMMON+=(trainer.max_epochs="${MAX_EPOCHS:-500}" trainer.check_val_every_n_epoch="${VAL_EVERY:-4}")
fi
GENERATOR=(experiment=beauty_sid_gpt model.generator.item_head=true model.generator.item_inputs=true
           model.generator.tie_item_tables=true model.decoding.rank=guided model.decoding.code_weight=0
           stage=distill stage.teacher="$TEACHER" stage.item_head_weight=1)

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
"$PY" -c "import torch, triton, lightning; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'triton', triton.__version__, 'lightning', lightning.__version__, 'device', \
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')"

train() {  # name, overrides...: one training, its log kept beside the results
  local name=$1; shift
  local start=$SECONDS
  # its own data cache: the three start together and would write the same cache entry at once
  "$PY" -m genrec.train "${COMMON[@]}" "$@" results_name="$name" hydra.run.dir="$RUNS/$name" \
    data.cache_dir="$RUNS/cache-$name" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - start)) s"
  [ -f "$RESULTS/$name.json" ] && cp "$RESULTS/$name.json" "$OUT/"
  tail -n 12 "$OUT/$name.log"
}

echo "== recipe=gpu trainings (side by side, ${MINUTES} min cap each)"
train beauty_sid_gpt_items_tied_hdistill_gpu_eager_seed0 "${GENERATOR[@]}" compile=false &
train beauty_sid_gpt_items_tied_hdistill_gpu_seed0 "${GENERATOR[@]}" compile=true &
train beauty_tiger_gpu_eager_seed0 experiment=beauty_tiger compile=false &

echo "== correctness on the device (beside the trainings)"
if [ "${GPU:-1}" = 1 ]; then
  # unbuffered, with a per-test limit (the first CUDA jagged test builds the CUDA extension, about a minute): an
  # earlier run killed by its overall timeout had printed nothing at all
  PYTHONUNBUFFERED=1 timeout 420 "$PY" -m pytest -v -rA -p no:cacheprovider --timeout=240 \
    --junitxml="$RUNS/gpu_tests.xml" tests/kernels/test_kernels.py \
    "tests/generative/test_gpu_recipe.py::test_compiled_stacks_train_like_the_eager_model[sid_gpt-cuda]" \
    "tests/generative/test_gpu_recipe.py::test_compiled_stacks_train_like_the_eager_model[tiger-cuda]" \
    "tests/generative/test_gpu_recipe.py::test_compiled_hstu_runs_like_the_eager_encoder_in_two_graphs[paper-cuda]" \
    "tests/generative/test_gpu_recipe.py::test_compiled_hstu_runs_like_the_eager_encoder_in_two_graphs[production-cuda]" \
    > "$OUT/gpu_tests.log" 2>&1
  echo "pytest: exit $?"
  tail -n 25 "$OUT/gpu_tests.log"
  "$PY" -m scripts.gpu.record_gpu_tests "$RUNS/gpu_tests.xml" --out "$RESULTS/gpu_tests.json" && \
    cp "$RESULTS/gpu_tests.json" "$OUT/"
fi
wait
echo "== done"
