#!/usr/bin/env bash
# The README's demo: installs what is missing, builds, generates synthetic CTR data (train and
# held-out, labels from a hidden teacher model whose AUC is the best achievable), and trains
# DLRM on a local cluster of a chief, 2 PS shards and 2 CPU workers on 127.0.0.1, with a live
# progress line. Ends with the model's held-out AUC beside the teacher's and a plot of loss and
# AUC over the steps (OUT/metrics.png).
#   STEPS=N  train N steps (default 8000: about two minutes on 2 cores)
#   ROWS=N   generated training records (default 2.5 million, 670 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The build's progress on one line ([n/N], as ninja counts); its whole output in build/demo.log,
# shown when it fails.
mkdir -p build
echo "== building tandem (the first build takes several minutes; output in build/demo.log)"
if ! scripts/build.sh build 2>&1 | tee build/demo.log |
  while IFS= read -r line; do
    if [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
      printf '\r== build [%s/%s]' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
    fi
  done; then
  echo
  tail -n 40 build/demo.log >&2
  echo "== the build failed: build/demo.log" >&2
  exit 1
fi
echo
TANDEM=build/cli/tandem
OUT=${OUT:-out/demo}
STEPS=${STEPS:-8000}
ROWS=${ROWS:-2500000}
rm -rf "$OUT"
mkdir -p "$OUT/data"
echo "== $($TANDEM --version | head -1)"
echo "== tandem datagen: synthetic CTR data (Zipf ids, labels from a seeded teacher model)"
$TANDEM datagen --format binary --rows "$ROWS" --seed 1 --vocab 1000 \
  --out "$OUT/data/train.bin"
teacher=$($TANDEM datagen --format binary --rows 20000 --seed 1 --vocab 1000 --stream eval \
  --out "$OUT/data/eval.bin")
echo "$teacher"
teacher_auc=$(sed -n 's/.*teacher AUC \([0-9.]*\).*/\1/p' <<<"$teacher")
echo "== tandem local --config configs/local.yaml --ps 2 --workers 2 ($STEPS steps)"
set +e
$TANDEM local --config configs/local.yaml --ps 2 --workers 2 \
  --set data.format=binary --set data.train="$OUT/data/train.bin" \
  --set data.eval="$OUT/data/eval.bin" --set train.steps="$STEPS" \
  --set output.dir="$OUT" --set checkpoint.dir="$OUT/checkpoints" --set ps.data_dir="$OUT/ps"
status=$?
set -e
if [[ $status -ne 0 ]]; then
  echo "== the job failed (exit $status): logs in $OUT/logs" >&2
  exit $status
fi
final=$(grep '"final":true' "$OUT/metrics.jsonl" || grep '"final": true' "$OUT/metrics.jsonl")
auc=$(sed -n 's/.*"auc":\([0-9.]*\).*/\1/p' <<<"$final")
echo "== held-out AUC $auc; the teacher's (best achievable) $teacher_auc"
if /usr/bin/python3 scripts/plot_metrics.py "$OUT/metrics.jsonl" -o "$OUT/metrics.png" \
  --title "tandem demo: DLRM, 2 PS x 2 workers, $STEPS steps"; then
  echo "== plot of loss and AUC over the steps: $OUT/metrics.png"
else
  echo "== no plot (scripts/plot_metrics.py failed, see above)" >&2
fi
echo "== metrics: $OUT/metrics.jsonl, TensorBoard: $OUT/tensorboard, logs: $OUT/logs"
