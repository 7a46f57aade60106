#!/usr/bin/env bash
# Create the virtualenv $1 (default .venv) with the torch / fbgemm / torchrec set that works on this machine,
# then install genrec editable with its dev, export, kernels, trackers and llm extras. Used by `make setup`; see
# docs/INSTALL.md.
#
# The trap: `pip install torchrec` pulls the 2.7 GB CUDA fbgemm-gpu, which breaks `import torchrec` on a CPU
# machine. So torchrec goes in with --no-deps after the matching fbgemm build, and its small needs are listed in
# pyproject.toml. Pairs: torch 2.13 <-> fbgemm 1.8 <-> torchrec 1.8 (fbgemm-gpu-cpu 1.9 does not load on 2.13).
set -euo pipefail
VENV=${1:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
FBGEMM_VERSION=1.8.0
TORCHREC_VERSION=1.8.0

"$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip "$@"; }
pip install --quiet --upgrade pip setuptools wheel

if [ "${GENREC_DEVICE:-auto}" = cuda ] || { [ "${GENREC_DEVICE:-auto}" = auto ] && command -v nvidia-smi >/dev/null \
    && nvidia-smi -L >/dev/null 2>&1; }; then
  echo "install.sh: CUDA machine: torch $TORCH_VERSION + fbgemm-gpu $FBGEMM_VERSION + torchrec $TORCHREC_VERSION"
  pip install --quiet "torch==$TORCH_VERSION" "fbgemm-gpu==$FBGEMM_VERSION"
  pip install --quiet --no-deps "torchrec==$TORCHREC_VERSION"
  pip install --quiet -e ".[gpu,dev,export,kernels,trackers,llm]"
  # flash-attn builds against the installed torch; optional (genrec falls back to SDPA without it)
  pip install --quiet --no-build-isolation -e ".[flash]" || echo "install.sh: flash-attn not installed (SDPA is used)"
else
  echo "install.sh: CPU machine: torch $TORCH_VERSION (CPU) + fbgemm-gpu-cpu $FBGEMM_VERSION + torchrec $TORCHREC_VERSION"
  pip install --quiet "torch==$TORCH_VERSION" "fbgemm-gpu-cpu==$FBGEMM_VERSION"
  pip install --quiet --no-deps "torchrec==$TORCHREC_VERSION"
  pip install --quiet -e ".[cpu,dev,export,kernels,trackers,llm]"
fi
# genrec-stream's Redis source: the client is a dependency (pyproject.toml); the server is an OS package
command -v redis-server >/dev/null || echo "install.sh: redis-server not found (apt-get install redis-server): the" \
  "Redis Streams tests will skip"
"$VENV/bin/python" -c "import torch, torchrec, fbgemm_gpu, lightning, hydra, faiss, redis; \
print('install.sh: ok: torch', torch.__version__, '| torchrec', torchrec.__version__, '| lightning', \
lightning.__version__, '| faiss', faiss.__version__)"
