#!/usr/bin/env bash
# The report page shown in the README (docs/report_screenshot.png): a short SASRec and a short HSTU run on the
# synthetic default (2 epochs each, telemetry every 5 steps), both evaluated by genrec-eval, compared by
# genrec-report, and the page photographed by headless Chromium (apt-get install -y chromium).
# Usage: bash scripts/docs/report_screenshot.sh [runs folder (default runs/report-example)]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/report-example}
PY=${PYTHON:-.venv/bin/python}
rm -rf "$OUT"
COMMON=(trainer.max_epochs=2 trainer.log_every_n_steps=5 trainer.enable_progress_bar=false threads=1)
"$PY" -m genrec.train model=sasrec "${COMMON[@]}" hydra.run.dir="$OUT/sasrec"
"$PY" -m genrec.train model=hstu "${COMMON[@]}" hydra.run.dir="$OUT/hstu"
"$PY" -m genrec.evaluate run_dir="$OUT/sasrec"
"$PY" -m genrec.evaluate run_dir="$OUT/hstu"
"$PY" -m genrec.report "$OUT/sasrec" "$OUT/hstu" -o "$OUT/report.html"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$(mktemp -d)" --hide-scrollbars \
  --window-size=1400,3600 --screenshot="$PWD/docs/report_screenshot.png" "file://$PWD/$OUT/report.html"
echo "written: docs/report_screenshot.png"
