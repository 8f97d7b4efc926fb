#!/usr/bin/env bash
# Everything of the GPU issue that needs a GPU, in one run (about 8 minutes on an H200): the
# device report, the `gpu` tests (each CUDA op against the CPU backend, NCCL all-reduce, deadline
# and abort with one rank, the trainer's device path), short training runs with train.device cuda
# at k = 0 (fp32 and bf16) and k = 2 (1 PS, 1 worker) beside the same job on the CPU, and the GPU
# dense benchmark; first of all, issue 21's scale runs (one CUDA worker at batch 8192 with the PS
# shards on the host's cores, target 1 M samples/s). Prints every figure; exits non-zero if
# anything failed. GPU_CHECK_PARTS and SCALE_RUNS select parts and scale runs (a rerun in a lease).
# Usage: scripts/gpu_check.sh                  builds Release with CUDA (BUILD_DIR, default build-gpu)
#        scripts/gpu_check.sh --prebuilt DIR   runs what scripts/gpu_stage.sh staged in DIR
# Results also go to GPU_CHECK_OUT (default out/gpu_check): gpu_check.log, bench.jsonl, runs/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${GPU_CHECK_OUT:-out/gpu_check}
mkdir -p "$OUTDIR"
LOG="$OUTDIR/gpu_check.log"
: >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }
failures=()

if [[ ${1:-} == --prebuilt ]]; then
  STAGE=$(cd "${2:?--prebuilt needs a directory}" && pwd)
  BIN="$STAGE/bin"
  # The staged Debian libraries, then wherever this host keeps its CUDA 13 libraries.
  cuda_dirs=$(find / -xdev \( -name 'libcublasLt.so.13' -o -name 'libnccl.so.2' -o \
    -name 'libcudnn.so.9' -o -name 'libcudart.so.13' \) -printf '%h\n' 2>/dev/null | sort -u |
    paste -sd:)
  export LD_LIBRARY_PATH="$STAGE/lib:$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  BUILD=${BUILD_DIR:-build-gpu}
  scripts/setup.sh
  scripts/build.sh "$BUILD" >/dev/null || { echo "gpu_check.sh: build failed" >&2; exit 1; }
  BIN="$OUTDIR/bin"
  mkdir -p "$BIN"
  for b in tandem device_tests cuda_backend_tests nccl_collective_tests worker_tests \
    trainer_gpu_tests gpu_dense_bench dense_bench; do
    f=$(find "$BUILD" -name "$b" -type f -perm -u+x | head -1)
    [[ -n $f ]] && ln -sf "$(pwd)/$f" "$BIN/$b"
  done
fi
for b in tandem cuda_backend_tests nccl_collective_tests gpu_dense_bench; do
  [[ -x $BIN/$b ]] || { echo "gpu_check.sh: $BIN/$b missing (was the CUDA part built?)" >&2; exit 1; }
done

# The CPU baseline runs (cpu training, dense_bench) on OpenBLAS kernels that match the CPU: on
# VMs with a generic CPU model OpenBLAS falls back to SSE3 ("Prescott"), several times slower.
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi

# GPU_CHECK_PARTS="scale tests" runs only those parts (of scale, tests, training, benchmarks).
part() { [[ -z ${GPU_CHECK_PARTS:-} || " $GPU_CHECK_PARTS " == *" $1 "* ]]; }

say "== device"
nvidia-smi -L 2>&1 | tee -a "$LOG" || true
"$BIN/tandem" --version 2>&1 | tee -a "$LOG"

# Issue 21's GPU target first (it is the figure still open): one CUDA worker, the PS shards on
# this host's cores, the Criteo-Kaggle DLRM shape (26 fields, dim 16, bottom 512-256-64-16, top
# 512-256-1), batch 8192, k = 0, ids Zipf 1.05 over 10^6 per field, every row in the PS cache.
# Target: >= 1 M samples/s. SCALE_STEPS=0 skips the section;
# SCALE_DEVICE=cpu tries it on a host without a GPU.
# One `tandem local` job with 1 worker at the Criteo-Kaggle dense shape, in $OUTDIR/runs/NAME:
# failure label, name, time limit (s), PS shards, then --set flags (later ones win). Sets JOB_DIR
# and JOB_S (its wall seconds); on failure records it, shows the log's tail and returns 1.
local_job() {
  local label=$1 name=$2 limit=$3 ps=$4; shift 4
  JOB_DIR="$OUTDIR/runs/$name"
  rm -rf "$JOB_DIR"; mkdir -p "$JOB_DIR"
  local t0=$SECONDS
  if timeout "$limit" "$BIN/tandem" local --config configs/local.yaml --ps "$ps" --workers 1 \
    --set output.dir="$JOB_DIR" --set ps.data_dir="$JOB_DIR/ps" \
    --set checkpoint.dir="$JOB_DIR/ckpt" \
    --set model.bottom_mlp=[512,256,64,16] --set model.top_mlp=[512,256,1] \
    "$@" >"$JOB_DIR/run.log" 2>&1; then
    JOB_S=$((SECONDS - t0))
  else
    local rc=$?
    failures+=("$label:$name"); say "$name: FAILED (exit $rc)"
    tail -20 "$JOB_DIR/run.log" | tee -a "$LOG"
    return 1
  fi
}

say "== scale: 1 CUDA worker, P PS shards on this host, Criteo-Kaggle DLRM shape, batch 8192"
run_scale() {  # name, number of PS shards, then --set flags
  local name=$1 ps=$2; shift 2
  local_job scale "$name" 150 "$ps" \
    --set train.steps="${SCALE_STEPS:-300}" --set train.batch_size=8192 \
    --set train.eval_every_steps=0 --set train.log_every_steps=10 \
    --set train.device="${SCALE_DEVICE:-cuda}" \
    --set data.synthetic.vocab=1000000 --set data.synthetic.zipf=1.05 \
    --set data.synthetic.eval_rows=16384 --set ps.cache_bytes=4294967296 \
    --set checkpoint.every_steps=100000 "$@" || return 0
  python3 - "$JOB_DIR/metrics.jsonl" "$name" "$JOB_S" <<'PY' | tee -a "$LOG"
import json, statistics as st, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
last = max(l.get("step", 0) for l in lines)
steady = [l for l in lines if "samples_per_sec" in l and l.get("step", 0) >= last // 3]
med = lambda k: st.median(l[k] for l in steady)
final = [l for l in lines if l.get("final")][-1]
print(f'{sys.argv[2]}: median {med("samples_per_sec"):.0f} samples/s (last 2/3 of the steps); per step '
      f'data {med("data_s")*1e3:.2f} ms, pull {med("pull_s")*1e3:.2f} ms, compute '
      f'{med("compute_s")*1e3:.2f} ms, push {med("push_s")*1e3:.2f} ms; wall {sys.argv[3]} s, '
      f'auc {final["auc"]:.4f}, model_checksum {final["model_checksum"]}')
print(json.dumps({"bench": f"scale_gpu_samples_per_s_{sys.argv[2]}", "value": med("samples_per_sec"),
                  "unit": "samples/s", "better": "higher", "target": 1e6}))
PY
}
scale() {  # name, then run_scale's other arguments; SCALE_RUNS="a b" runs only those
  [[ -z ${SCALE_RUNS:-} || " $SCALE_RUNS " == *" $1 "* ]] && run_scale "$@"
}
if part scale && [[ ${SCALE_STEPS:-300} != 0 ]]; then
  scale scale_ps4 4
  scale scale_ps8 8
  scale scale_ps16 16
  scale scale_ps8_bf16 8 --set ps.wire_precision=bf16
  scale scale_ps8_h2 8 --set ps.handler_threads=2
  scale scale_ps8_memory 8 --set ps.storage=memory
  scale scale_ps8_k2 8 --set train.embedding_staleness=2
  # The same job with the dense part on 8 CPU cores, as the baseline of the same run.
  scale scale_ps4_cpu 4 --set train.device=cpu --set train.threads=8 --set train.steps=90
fi

if part tests; then
say "== gpu tests"
for t in device_tests cuda_backend_tests nccl_collective_tests trainer_gpu_tests; do
  if timeout 300 "$BIN/$t" --gtest_brief=1 >"$OUTDIR/$t.log" 2>&1; then
    say "$t: $(grep -E '^\[  PASSED  \]' "$OUTDIR/$t.log") $(grep -cE '^\[  SKIPPED \]' "$OUTDIR/$t.log") skipped"
  else
    failures+=("$t")
    say "$t: FAILED"; grep -E 'Failure|FAILED|error' "$OUTDIR/$t.log" | head -40 | tee -a "$LOG"
  fi
done
# The trainer on the CPU backend's mixed-precision emulation and the device-path plumbing.
if timeout 300 "$BIN/worker_tests" --gtest_brief=1 >"$OUTDIR/worker_tests.log" 2>&1; then
  say "worker_tests: $(grep -E '^\[  PASSED  \]' "$OUTDIR/worker_tests.log")"
else
  failures+=(worker_tests); say "worker_tests: FAILED"; tail -30 "$OUTDIR/worker_tests.log" | tee -a "$LOG"
fi

fi

if part training; then
say "== training (1 PS, 1 worker, Criteo-Kaggle dense shape, batch 4096, 400 steps)"
run_job() {  # name, then --set flags
  local name=$1; shift
  local_job train "$name" 240 1 \
    --set train.steps=400 --set train.batch_size=4096 --set train.eval_every_steps=200 \
    --set train.log_every_steps=20 "$@" || return 0
  python3 - "$JOB_DIR/metrics.jsonl" "$name" "$JOB_S" <<'PY' | tee -a "$LOG"
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
rates = [l["samples_per_sec"] for l in lines if "samples_per_sec" in l and l.get("step", 0) >= 100]
final = [l for l in lines if l.get("final")][-1]
print(f'{sys.argv[2]}: final auc {final["auc"]:.4f}, median {statistics.median(rates):.0f} samples/s '
      f'(steps >= 100), wall {sys.argv[3]} s, model_checksum {final["model_checksum"]}')
print(json.dumps({"bench": f"train_samples_per_s_{sys.argv[2]}", "value": statistics.median(rates),
                  "unit": "samples/s", "better": "higher", "auc": final["auc"]}))
PY
}
run_job cuda_fp32_k0 --set train.device=cuda
run_job cuda_bf16_k0 --set train.device=cuda --set train.precision=bf16
run_job cuda_fp32_k2 --set train.device=cuda --set train.embedding_staleness=2
run_job cpu_fp32_k0 --set train.device=cpu --set train.threads=8
# Issue 19's models on the device, each at the same shape (mmoe: one task here).
for type in dcn_v2 deepfm wide_deep mmoe; do
  run_job "cuda_${type}_k0" --set train.device=cuda --set model.type=$type
done

fi

if part benchmarks; then
say "== benchmarks"
"$BIN/gpu_dense_bench" 2>>"$LOG" | tee "$OUTDIR/bench.jsonl" | tee -a "$LOG" || failures+=(gpu_dense_bench)
"$BIN/dense_bench" 8 2>>"$LOG" | tee -a "$OUTDIR/bench.jsonl" | tee -a "$LOG" || failures+=(dense_bench)
fi

if ((${#failures[@]} > 0)); then
  say "gpu_check: FAILED: ${failures[*]}"
  exit 1
fi
say "gpu_check: all passed"
