#!/usr/bin/env bash
# End-to-end `tandem local` throughput of a multi-hot job against a single-hot job with the same
# mean number of ids per sample (issue 18), interleaved in one run so both see the same machine.
# Multi-hot: FEATURES bags of its own table each, bag lengths uniform in [0, MAX_LEN] (mean
# MAX_LEN/2); single-hot: FEATURES * MAX_LEN / 2 single-id features (Criteo's layout). Both are
# synthetic, 1 PS and 1 worker, the same dense model, no eval, no checkpoints. samples/s is the
# median of metrics.jsonl's step lines with the first 20% left out as warm-up; the figure is the
# median over reps. Prints one JSON line (bench/bench_json.h's keys, plus the per-rep figures).
# Usage: bench/multi_hot_local_bench.sh [--steps N] [--reps N] [--features N] [--max-len N]
#        [--out DIR] [--keep]   (TANDEM=path/to/tandem; default build/cli/tandem)
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
from_caller() { if [[ $1 == /* ]]; then echo "$1"; else echo "$caller/$1"; fi; }

steps=400 reps=3 features=4 max_len=16 out=out/multi_hot_bench keep=0
usage() { sed -n '9,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while (($# > 0)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --features) features=$2; shift 2 ;;
    --max-len) max_len=$2; shift 2 ;;
    --out) out=$(from_caller "$2"); shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) usage 0 ;;
    *) echo "multi_hot_local_bench: unknown argument '$1'" >&2; usage ;;
  esac
done
for n in "$steps" "$reps" "$features" "$max_len"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "multi_hot_local_bench: '$n' is not a number" >&2; exit 2; }
done
((steps >= 10 && reps >= 1 && features >= 1 && max_len >= 2 && max_len % 2 == 0)) || {
  echo "multi_hot_local_bench: need steps >= 10, reps >= 1, features >= 1, even max-len >= 2" >&2
  exit 2
}
if [[ -n ${TANDEM:-} ]]; then TANDEM=$(from_caller "$TANDEM"); else TANDEM=${BUILD_DIR:-build}/cli/tandem; fi
[[ -x $TANDEM ]] || { echo "multi_hot_local_bench: no tandem binary at $TANDEM" >&2; exit 2; }
TANDEM=$(realpath "$TANDEM")
unset TF_CONFIG
mkdir -p "$out"
out=$(realpath "$out")
readonly ids=$((features * max_len / 2)) log_every=10

median() {
  sort -g | awk 'NF {v[++n] = $1}
    END {if (n == 0) print "null"; else if (n % 2) print v[(n + 1) / 2]; else print (v[n / 2] + v[n / 2 + 1]) / 2}'
}

# Runs one job and prints its samples/s (or "null" when it failed).
run_job() {  # DIR single|multi
  local dir=$1 kind=$2
  rm -rf "$dir"
  mkdir -p "$dir"
  local sets=(
    model.embedding_dim=16 "model.bottom_mlp=[64,16]" "model.top_mlp=[64,32,1]"
    model.interaction=dot data.format=synthetic data.synthetic.vocab=100000
    data.synthetic.eval_rows=0 train.steps=$steps train.batch_size=256
    train.eval_every_steps=0 train.log_every_steps=$log_every ps.storage=memory
    "ps.data_dir=$dir/ps" "checkpoint.dir=$dir/ckpt" checkpoint.every_steps=0
    checkpoint.every_seconds=0 checkpoint.resume=never "output.dir=$dir/out"
  )
  if [[ $kind == single ]]; then
    sets+=(data.num_categorical=$ids)
  else
    sets+=(data.num_categorical=$features)
    local f
    for ((f = 1; f <= features; f++)); do sets+=("features.m$f.max_len=$max_len"); done
  fi
  local argv=("$TANDEM" local --config configs/local.yaml --ps 1 --workers 1)
  for s in "${sets[@]}"; do argv+=(--set "$s"); done
  printf '%q ' "${argv[@]}" >"$dir/command"
  if ! "${argv[@]}" >"$dir/local.log" 2>&1; then
    echo "multi_hot_local_bench: $kind job failed, see $dir/local.log" >&2
    echo null
    return
  fi
  local first=$((steps / 5))
  { grep samples_per_sec "$dir/out/metrics.jsonl" || true; } |
    awk -v first="$first" '{if (match($0, /"step":[0-9]+/)) {
      s = substr($0, RSTART + 7, RLENGTH - 7) + 0; if (s >= first) print}}' |
    sed 's/.*"samples_per_sec":\([^,}]*\).*/\1/' | median
}

single=() multi=()
for ((r = 1; r <= reps; r++)); do
  s=$(run_job "$out/single-$r" single)
  m=$(run_job "$out/multi-$r" multi)
  echo "multi_hot_local_bench: rep $r: single-hot $s, multi-hot $m samples/s" >&2
  single+=("$s") multi+=("$m")
done
ms=$(printf '%s\n' "${multi[@]}" | grep -v null | median)
ss=$(printf '%s\n' "${single[@]}" | grep -v null | median)
join() { local IFS=,; echo "$*"; }
printf '{"bench": "local_multi_hot_samples_per_sec", "value": %s, "unit": "samples/s", "better": "higher", "baseline": "local_single_hot_same_ids_per_sample", "baseline_value": %s, "ratio": %s, "ids_per_sample": %s, "features": %s, "max_len": %s, "steps": %s, "reps": %s, "multi_hot_reps": [%s], "single_hot_reps": [%s]}\n' \
  "$ms" "$ss" "$(awk -v a="$ms" -v b="$ss" 'BEGIN {printf "%.4f", (b > 0 ? a / b : 0)}')" \
  "$ids" "$features" "$max_len" "$steps" "$reps" "$(join "${multi[@]}")" "$(join "${single[@]}")"
((keep)) || rm -rf "$out"
