#!/usr/bin/env bash
# The README's demo: installs what is missing, builds, generates synthetic data, and runs the
# main job on a local cluster (chief, PS shards and workers on 127.0.0.1). Until distributed
# training lands it starts the cluster, shows that every process answers, prints
# `tandem status`, and stops it cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build >/dev/null
TANDEM=build/cli/tandem
OUT=${OUT:-out/demo}
rm -rf "$OUT"
echo "== $($TANDEM --version)"
echo "== tandem datagen (synthetic CTR data with a known best AUC)"
$TANDEM datagen --format criteo --rows 20000 --seed 1 --out "$OUT/data/train.tsv"
$TANDEM convert --in "$OUT/data/train.tsv" --out "$OUT/data/train.bin"
echo "== tandem local --config configs/local.yaml --ps 2 --workers 2"
$TANDEM local --config configs/local.yaml --ps 2 --workers 2 --hold \
  --set output.dir="$OUT" --set checkpoint.dir="$OUT/checkpoints" --set ps.data_dir="$OUT/ps" &
LOCAL_PID=$!
trap 'kill -TERM $LOCAL_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  [[ -s "$OUT/cluster.json" ]] && break
  if ! kill -0 $LOCAL_PID 2>/dev/null; then wait $LOCAL_PID; exit $?; fi
  sleep 0.1
done
echo "== tandem status --dir $OUT"
$TANDEM status --dir "$OUT"
echo "== stopping the cluster (SIGTERM to tandem local)"
kill -TERM $LOCAL_PID
wait $LOCAL_PID
trap - EXIT
echo "== done: logs in $OUT/logs"
