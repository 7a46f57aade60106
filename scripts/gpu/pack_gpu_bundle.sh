#!/usr/bin/env bash
# Packs what scripts/gpu/gpu_recipe_check.sh needs on a bare, offline CUDA machine into one folder, $DEST (default .gpu,
# ignored by git): the device tool's H200 image has CPython 3.12, torch 2.11 + CUDA 13, Lightning, transformers,
# pytest (with pytest-timeout and hypothesis), but none of genrec's other imports, and nothing can be fetched there.
#   site.tar.xz   the missing packages for CPython $PYVER, installed with pip --target and xz-compressed (what travels
#                 with the tree is limited to 64 MiB): hydra-core, omegaconf, antlr4 runtime, torchrec with
#                 fbgemm-gpu-cpu (the CPU build: the CUDA one is gigabytes; an unsharded model calls no fbgemm
#                 operator, and the HSTU kernel test then runs its fbgemm reference on the CPU), tensordict, pyvers,
#                 polars with its runtime;
#   data/         the Beauty files ($GENREC_DATA_DIR/amazon-beauty-2014: sequences and titles);
#   sid/, teacher/  copies of $SID_TABLE and $TEACHER (config, metrics, best checkpoint) with the teacher's data paths
#                 pointed at data/ (relative to the checkout, where the GPU machine runs).
# Usage (SID table and teacher from `DATASET=beauty scripts/recipes/reproduce_post_training.sh`: $RUNS/sid,
# $RUNS/teacher):
#   SID_TABLE=runs/bpost/sid TEACHER=runs/bpost/teacher bash scripts/gpu/pack_gpu_bundle.sh
# then on the GPU machine, from the checkout with $DEST beside it:
#   python3 -c "import tarfile; tarfile.open('.gpu/site.tar.xz').extractall('/tmp/site')"
#   export PYTHONPATH=/tmp/site:$PWD:$PWD/kernels GENREC_COMMIT=<sha> GENREC_DATA_DIR=$PWD/.gpu/data
#   SID_TABLE=.gpu/sid TEACHER=.gpu/teacher TRAIN_MINUTES=5 bash scripts/gpu/gpu_recipe_check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${SID_TABLE:?SID_TABLE must name a semantic-ID table folder}" "${TEACHER:?TEACHER must name the SASRec run folder}"
DEST=${DEST:-.gpu}
PYVER=${PYVER:-3.12}
DATA=${GENREC_DATA_DIR:-../shared/data}/amazon-beauty-2014
PACKAGES=(hydra-core==1.3.8 omegaconf==2.3.1 torchrec==1.6.1 fbgemm-gpu-cpu==1.6.0 tensordict==0.15.3 pyvers==0.2.3
          polars==2.1.0 polars-runtime-32==2.1.0)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
for path in "$SID_TABLE/sid_table.parquet" "$TEACHER/config.yaml" "$TEACHER/checkpoints/best.ckpt" \
            "$DATA/user_sequence.txt.gz"; do
  [ -e "$path" ] || { echo "pack_gpu_bundle.sh: $path is missing" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  "${PLATFORMS[@]}" -d "$work/wheels" "${PACKAGES[@]}"
python3 -m pip wheel -q --no-deps -w "$work/wheels" antlr4-python3-runtime==4.9.3  # an sdist only: built here
python3 -m pip install -q --no-deps --no-compile --target "$work/site" --python-version "$PYVER" \
  --implementation cp --only-binary=:all: "${PLATFORMS[@]}" --platform any "$work"/wheels/*.whl
rm -rf "$DEST" && mkdir -p "$DEST/data/amazon-beauty-2014" "$DEST/teacher/checkpoints"
tar -C "$work/site" -cJf "$DEST/site.tar.xz" .
cp "$DATA/user_sequence.txt.gz" "$DATA/item_titles.tsv" "$DEST/data/amazon-beauty-2014/"
cp -r "$SID_TABLE" "$DEST/sid" && rm -f "$DEST"/sid/*.png
cp "$TEACHER/config.yaml" "$TEACHER/metrics.json" "$DEST/teacher/"
cp "$TEACHER/checkpoints/best.ckpt" "$DEST/teacher/checkpoints/"
# the teacher's data paths, as it resolved them, pointed at the copies
sed -i "s#[^ ]*/amazon-beauty-2014/#$DEST/data/amazon-beauty-2014/#" "$DEST/teacher/config.yaml"
du -sh "$DEST"/* && du -sh "$DEST"
