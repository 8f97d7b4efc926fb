#!/usr/bin/env bash
# tandem against PyTorch (issue "Huge tables for real", target: tandem >= 1.5x): training
# samples/s of a whole `tandem local` job, 2 PS x 2 workers (k = 0, RocksDB shards, batch 1024
# per worker = 2048 global), against a single-process PyTorch DLRM (bench/torch_dlrm_bench.py on
# Debian's python3-torch, torch.set_num_threads = the machine's cores, passive OpenMP waits,
# batch 2048) on the same cores in the same run. Both train the PyTorch DLRM shape: embedding
# dim 16, bottom MLP 64-16, dot interaction, top MLP 128-64-1, sparse Adagrad (lr 0.3,
# accumulator 0.1, init uniform 0.01: configs/local.yaml's tables), dense Adam (lr 0.01), BCE.
#
# Usage: bench/dlrm_vs_torch.sh [--vocab V] [--steps S] [--warmup W] [--reps N] [--out DIR]
#                               [--eval-rows E] [--tables separate|fused] [--keep]
#   (or scripts/bench.sh torch -- ARGS). Defaults: vocab 100000 ids per field (Zipf 1.1),
#   300 steps, warm-up 50 steps, 3 reps, out/dlrm_vs_torch, 20000 eval rows, separate tables
#   (one EmbeddingBag per field, as the reference DLRM; fused = one table for all fields).
#   TANDEM=path/to/tandem overrides the binary (default ${BUILD_DIR:-build}/cli/tandem),
#   PYTHON the interpreter (default /usr/bin/python3, Debian's, which has python3-torch).
#   About 50 s per rep at the defaults on 2 cores.
#
# Data: one `tandem datagen --format binary` file of exactly S x 2048 records, so each side
# trains one epoch over the same records (each in its own random order), plus an eval file;
# both are kept under DIR/data for later invocations.
# Runs: rep 1 tandem, rep 1 torch, rep 2 tandem, ... (interleaved, so a noisy neighbour hits
# both sides; it hurts torch's 2 OpenMP threads, which wait for each other at every op, far more
# than tandem's single-threaded processes, so the JSON says for each run how many cores the
# rest of the machine kept busy meanwhile (others_cores: all busy CPU time in /proc/stat minus
# the run's own user + sys, over its wall time): trust a ratio from runs where it is near 0).
# Each run's figure, on both sides the same way: samples/s of each window of 10 steps (tandem:
# metrics.jsonl's step lines, train.log_every_steps 10; torch: perf_counter around its step
# loop), the windows of the first W steps left out (warm-up: first pulls,
# RocksDB and allocator growth, torch's first sparse-state allocation), the median of the rest;
# mean_samples_per_sec is the steady steps' samples over their wall time. Eval (one pass over
# the eval file, a sanity check that both models learn alike) runs after the last step on both
# sides, outside the windows; checkpoints are off.
# Prints each run's figures to stderr and one JSON line: tandem's median samples/s over the
# reps as value, the torch median as baseline_value, their ratio, the target 1.5.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
from_caller() { if [[ $1 == /* ]]; then echo "$1"; else echo "$caller/$1"; fi; }

vocab=100000 steps=300 warmup=50 reps=3 out=out/dlrm_vs_torch eval_rows=20000 tables=separate
keep=0
usage() { sed -n '10,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while (($# > 0)); do
  case $1 in
    --vocab) vocab=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --out) out=$(from_caller "$2"); shift 2 ;;
    --eval-rows) eval_rows=$2; shift 2 ;;
    --tables) tables=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) usage 0 ;;
    *) echo "dlrm_vs_torch: unknown argument '$1'" >&2; usage ;;
  esac
done
for n in "$vocab" "$steps" "$warmup" "$reps" "$eval_rows"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "dlrm_vs_torch: '$n' is not a number" >&2; exit 2; }
done
[[ $tables == separate || $tables == fused ]] ||
  { echo "dlrm_vs_torch: --tables is separate or fused" >&2; exit 2; }

readonly PS=2 WORKERS=2 BATCH=1024 ZIPF=1.1 LOG_EVERY=10
readonly GLOBAL_BATCH=$((WORKERS * BATCH)) THREADS=$(nproc)
((reps >= 1 && vocab >= 1)) || { echo "dlrm_vs_torch: need reps, vocab >= 1" >&2; exit 2; }
((warmup >= LOG_EVERY && warmup % LOG_EVERY == 0 && steps >= warmup + 2 * LOG_EVERY)) || {
  echo "dlrm_vs_torch: --warmup must be a positive multiple of $LOG_EVERY and --steps >= warmup + $((2 * LOG_EVERY))" >&2
  exit 2
}
rows=$((steps * GLOBAL_BATCH))

if [[ -n ${TANDEM:-} ]]; then TANDEM=$(from_caller "$TANDEM"); else TANDEM=${BUILD_DIR:-build}/cli/tandem; fi
[[ -x $TANDEM ]] || { echo "dlrm_vs_torch: no tandem binary at $TANDEM (build first)" >&2; exit 2; }
TANDEM=$(realpath "$TANDEM")
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c 'import torch, numpy' 2>/dev/null || {
  echo "dlrm_vs_torch: $PYTHON cannot import torch and numpy (scripts/setup.sh bench installs python3-torch)" >&2
  exit 2
}
# The same OpenBLAS kernels on both sides (scripts/bench.sh sets this too; torch links OpenBLAS).
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
unset TF_CONFIG
mkdir -p "$out"
out=$(realpath "$out")
log() { echo "dlrm_vs_torch: $*" >&2; }

# --- data ---------------------------------------------------------------------------------
source bench/bench_data.sh

# --- helpers ------------------------------------------------------------------------------
now() { date +%s.%N; }
busy_s() { awk -v hz="$(getconf CLK_TCK)" '/^cpu / {printf "%.2f\n", ($2 + $3 + $4 + $7 + $8 + $9) / hz}' /proc/stat; }
# Runs CMD with stdout to OUT and stderr to ERR ("&1": to OUT too); sets RC, JOB_S (wall time),
# CPU_S (user + sys of CMD and its children) and OTHERS (see the top of the file).
measured() {  # OUT ERR CMD...
  local o=$1 e=$2 t0 b0 cpu TIMEFORMAT='%U %S'
  shift 2
  t0=$(now)
  b0=$(busy_s)
  RC=0
  if [[ $e == "&1" ]]; then cpu=$( { time "$@" >"$o" 2>&1; } 2>&1) || RC=$?
  else cpu=$( { time "$@" >"$o" 2>"$e"; } 2>&1) || RC=$?; fi
  local t1 b1
  t1=$(now)
  b1=$(busy_s)
  read -r JOB_S CPU_S OTHERS < <(awk -v t0="$t0" -v t1="$t1" -v b0="$b0" -v b1="$b1" -v c="$cpu" \
    'BEGIN {split(c, u, " "); w = t1 - t0; own = u[1] + u[2]; o = (b1 - b0 - own) / w
            printf "%.2f %.2f %.2f\n", w, own, (o > 0 ? o : 0)}')
}
median() {
  sort -g | awk 'NF {v[++n] = $1}
    END {if (n == 0) print "null"; else if (n % 2) print v[(n + 1) / 2]; else print (v[n / 2] + v[n / 2 + 1]) / 2}'
}
json_num() { sed -n "s/.*\"$1\": *\(-\{0,1\}[0-9][0-9.eE+-]*\).*/\1/p" <<<"$2"; }
json_str() { sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" <<<"$2"; }
# Step lines of metrics.jsonl that cover only steady steps (the window of the line for step s
# is steps s-9..s), in order.
steady_lines() {
  { grep samples_per_sec "$1" 2>/dev/null || true; } | { grep -v '"replay"' || true; } |
    awk -v first=$((warmup + LOG_EVERY - 1)) '{if (match($0, /"step":[0-9]+/)) {
      s = substr($0, RSTART + 7, RLENGTH - 7) + 0; if (s >= first) print}}'
}

# One tandem job; writes DIR/result (KEY=VALUE lines).
run_tandem() {  # DIR
  local dir=$1
  rm -rf "$dir"
  mkdir -p "$dir"
  local argv=("$TANDEM" local --config configs/local.yaml --ps $PS --workers $WORKERS)
  local sets=(
    model.embedding_dim=16 "model.bottom_mlp=[64,16]" "model.top_mlp=[128,64,1]"
    model.interaction=dot tables.default.optimizer=adagrad
    data.format=binary "data.train=$train_file" "data.eval=$eval_file"
    train.steps=$steps train.batch_size=$BATCH train.embedding_staleness=0
    train.dense_optimizer=adam train.eval_every_steps=0 train.log_every_steps=$LOG_EVERY
    train.threads=1 ps.storage=rocksdb "ps.data_dir=$dir/ps"
    "checkpoint.dir=$dir/ckpt" checkpoint.every_steps=0 checkpoint.every_seconds=0
    checkpoint.resume=never "output.dir=$dir/out"
  )
  for s in "${sets[@]}"; do argv+=(--set "$s"); done
  printf '%q ' "${argv[@]}" >"$dir/command"
  measured "$dir/local.log" "&1" "${argv[@]}"
  local metrics="$dir/out/metrics.jsonl" final="" lines
  [[ -f $metrics ]] && final=$(grep '"final":true' "$metrics" | tail -1 || true)
  lines=$(steady_lines "$metrics")
  local sps mean_sps windows
  windows=$(grep -c . <<<"$lines" || true)
  sps=$(sed 's/.*"samples_per_sec":\([^,}]*\).*/\1/' <<<"$lines" | median |
    awk '{if ($1 == "null") print; else printf "%.1f\n", $1}')
  # Steady wall time: from the line of step W-1 (the end of the warm-up) to the last line.
  local w0
  w0=$( (grep "\"step\":$((warmup - 1))," "$metrics" 2>/dev/null || true) | grep samples_per_sec | tail -1)
  mean_sps=$(awk -v a="$(json_num wall_time "$(tail -1 <<<"$lines")")" \
    -v b="$(json_num wall_time "$w0")" -v n=$(((steps - warmup) * GLOBAL_BATCH)) \
    'BEGIN {if (a > b && b > 0) printf "%.1f", n / (a - b); else print 0}')
  {
    echo "rc=$RC"
    echo "job_s=$JOB_S"
    echo "cpu_s=$CPU_S"
    echo "others_cores=$OTHERS"
    echo "samples_per_sec=${sps:-0}"
    echo "mean_samples_per_sec=$mean_sps"
    echo "windows=$windows"
    local k
    for k in data_s pull_s compute_s allreduce_s push_s wait_s; do
      echo "$k=$(sed -n "s/.*\"$k\":\([^,}]*\).*/\1/p" <<<"$lines" | median)"
    done
    echo "auc=$(json_num auc "$final")"
    echo "last_loss=$(json_num loss "$(tail -1 <<<"$lines")")"
  } >"$dir/result"
  if ((RC != 0)) || [[ -z $final ]]; then
    log "$(basename "$dir"): tandem local exited $RC$([[ -z $final ]] && echo ", no final metrics line"); last lines of $dir/local.log:"
    tail -n 15 "$dir/local.log" >&2 || true
  fi
  ((keep)) || rm -rf "$dir/ps" "$dir/ckpt"
}

# One PyTorch run; writes DIR/result.
run_torch() {  # DIR
  local dir=$1
  rm -rf "$dir"
  mkdir -p "$dir"
  local argv=("$PYTHON" bench/torch_dlrm_bench.py --data "$train_file" --steps "$steps"
    --batch $GLOBAL_BATCH --warmup "$warmup" --log-every $LOG_EVERY --threads "$THREADS"
    --tables "$tables" --sparse-lr 0.3 --sparse-init-acc 0.1 --init-scale 0.01 --dense-lr 0.01)
  [[ -z $eval_file ]] || argv+=(--eval "$eval_file")
  printf '%q ' "${argv[@]}" >"$dir/command"
  local line
  measured "$dir/figure.json" "$dir/torch.log" "${argv[@]}"
  line=$(tail -1 "$dir/figure.json" 2>/dev/null || true)
  {
    echo "rc=$RC"
    echo "job_s=$JOB_S"
    echo "cpu_s=$CPU_S"
    echo "others_cores=$OTHERS"
    echo "samples_per_sec=$(json_num value "$line")"
    echo "mean_samples_per_sec=$(json_num mean_samples_per_sec "$line")"
    echo "windows=$(json_num windows "$line")"
    local k
    for k in forward_s backward_s dense_opt_s sparse_opt_s; do echo "$k=$(json_num $k "$line")"; done
    echo "auc=$(json_num auc "$line")"
    echo "last_loss=$(json_num last_loss "$line")"
    echo "omp_wait_policy=$(json_str omp_wait_policy "$line")"
  } >"$dir/result"
  if ((RC != 0)) || [[ -z $line ]]; then
    log "$(basename "$dir"): torch_dlrm_bench exited $RC; last lines of $dir/torch.log:"
    tail -n 15 "$dir/torch.log" >&2 || true
  fi
}

get() { sed -n "s/^$2=//p" "$1/result"; }
med() {  # SIDE KEY: the median over reps
  local r
  for ((r = 1; r <= reps; r++)); do get "$out/runs/$1-rep$r" "$2"; done |
    { grep -v -e '^null$' -e '^$' || true; } | median
}
runs() {  # SIDE [KEY]: the per-rep values (default samples/s) as a JSON list
  local r list=""
  for ((r = 1; r <= reps; r++)); do list+="$(or_null "$(get "$out/runs/$1-rep$r" "${2:-samples_per_sec}")"),"; done
  echo "[${list%,}]"
}
or_null() { if [[ -z $1 ]]; then echo null; else echo "$1"; fi; }

# --- runs ---------------------------------------------------------------------------------
log "vocab $vocab (zipf $ZIPF), $rows rows, $steps steps x $GLOBAL_BATCH (tandem: $PS PS x $WORKERS workers x $BATCH), warm-up $warmup steps, $reps rep(s), torch $THREADS threads, $tables tables, in $out"
failed=0
for ((rep = 1; rep <= reps; rep++)); do
  for side in tandem torch; do
    dir="$out/runs/$side-rep$rep"
    "run_$side" "$dir"
    [[ $(get "$dir" rc) == 0 ]] || failed=1
    log "rep $rep $side: $(get "$dir" samples_per_sec) samples/s (median of $(get "$dir" windows) windows; mean $(get "$dir" mean_samples_per_sec)), whole run $(get "$dir" job_s) s using $(get "$dir" cpu_s) s of CPU, others kept $(get "$dir" others_cores) cores busy, auc $(get "$dir" auc)"
  done
done

# --- report -------------------------------------------------------------------------------
t_sps=$(med tandem samples_per_sec)
p_sps=$(med torch samples_per_sec)
ratio=$(awk -v a="$t_sps" -v b="$p_sps" 'BEGIN {printf "%.4f", (b > 0 ? a / b : 0)}')
meets=$(awk -v r="$ratio" 'BEGIN {print (r >= 1.5 ? "true" : "false")}')
rcs=""
for ((rep = 1; rep <= reps; rep++)); do
  rcs+="$(get "$out/runs/tandem-rep$rep" rc)/$(get "$out/runs/torch-rep$rep" rc),"
done
t_times="" p_times=""
for k in data_s pull_s compute_s allreduce_s push_s wait_s; do
  t_times+="\"$k\": $(or_null "$(med tandem $k)"), "
done
for k in forward_s backward_s dense_opt_s sparse_opt_s; do
  p_times+="\"$k\": $(or_null "$(med torch $k)"), "
done
printf '{"bench": "dlrm_tandem_local_2x2_samples_per_sec", "value": %s, "unit": "samples/s", "better": "higher", "baseline": "torch_dlrm_single_process_%s_threads", "baseline_value": %s, "ratio": %s, "target_ratio": 1.5, "meets_target": %s, "tandem_runs": %s, "torch_runs": %s, "others_cores_tandem": %s, "others_cores_torch": %s, "tandem_mean_samples_per_sec": %s, "torch_mean_samples_per_sec": %s, "tandem_step_times": {%s}, "torch_step_times": {%s}, "tandem_auc": %s, "torch_auc": %s, "tandem_job_s": %s, "torch_job_s": %s, "vocab": %s, "zipf": %s, "rows": %s, "steps": %s, "warmup_steps": %s, "global_batch": %s, "ps": %s, "workers": %s, "torch_tables": "%s", "torch_omp_wait_policy": "%s", "reps": %s, "exit_codes": "%s"}\n' \
  "$t_sps" "$THREADS" "$p_sps" "$ratio" "$meets" "$(runs tandem)" "$(runs torch)" "$(runs tandem others_cores)" "$(runs torch others_cores)" \
  "$(med tandem mean_samples_per_sec)" "$(med torch mean_samples_per_sec)" \
  "${t_times%, }" "${p_times%, }" "$(or_null "$(med tandem auc)")" "$(or_null "$(med torch auc)")" \
  "$(med tandem job_s)" "$(med torch job_s)" "$vocab" "$ZIPF" "$rows" "$steps" "$warmup" \
  $GLOBAL_BATCH $PS $WORKERS "$tables" "$(get "$out/runs/torch-rep1" omp_wait_policy)" "$reps" "${rcs%,}"
exit $failed
