#!/usr/bin/env bash
# The dense step of every model type on one core (issue 19): tandem against the same step's
# GEMMs alone (target >= 0.7) and against PyTorch (target >= 1.5x), batch 2048, each model at
# its example config (configs/local.yaml for dlrm, dcn-v2.yaml, deepfm.yaml, wide-deep.yaml,
# mmoe.yaml). tandem: build/bench/models_bench (Model::ForwardBackward on the CPU backend, and
# the step's recorded GEMM shapes replayed with raw cblas_sgemm in the same run); PyTorch:
# bench/torch_models_bench.py (the twins of bench/torch_models.py, built from models_bench
# --describe, so from the same configs through tandem's loader; Debian's python3-torch).
# Both sides: forward from the pooled bags and dense values, the loss, backward to the
# parameters' and the bags' gradients; no optimizer step.
#
# Usage: bench/models_vs_torch.sh [--reps N] [--runs R] [--steps S] [--models a,b,...]
#                                 [--torch-malloc tuned|default] [--out DIR]
#   (or scripts/bench.sh models -- ARGS; `scripts/bench.sh dense` runs it at its defaults).
#   Defaults: 3 reps, 5 runs per side and rep, 10 steps of 2048 per run, every model,
#   out/models_vs_torch. About 3 minutes on 2 cores. MODELS_BENCH=path overrides
#   build/bench/models_bench, PYTHON the interpreter (default /usr/bin/python3).
#
# One thread on each side: OPENBLAS_NUM_THREADS=1 and OMP_NUM_THREADS=1 for both processes,
# models_bench --threads 1, torch.set_num_threads(1). Runs: rep 1 tandem (every model), rep 1
# torch, rep 2 tandem, ... (interleaved, so a noisy neighbour hits both sides). Prints per model
# two JSON lines, from the medians over all reps x runs:
#   <model>_dense_step_samples_per_s: tandem's samples/s against gemm_only_samples_per_s (one
#     step's GEMMs alone, timed in the same runs), target_ratio 0.7;
#   <model>_dense_step_vs_torch_samples_per_s: tandem's samples/s against PyTorch's, target 1.5.
# Without torch the second line has baseline "none" and torch_skipped says why (also on stderr).
#
# PyTorch's allocator: eager PyTorch allocates every activation and gradient anew each step, and
# glibc serves blocks of a few MB (a 2048 x 432 activation is 3.5 MB) with mmap and gives them
# back with munmap, so each one is page-faulted in again: on the 2-core dev box an element-wise
# multiply of two 2048 x 432 tensors took 1.2 ms instead of 0.36 ms, and DCN-v2's and MMoE's
# steps ran about 2x slower. --torch-malloc tuned (the default) runs the PyTorch side with
# MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ at 4 GiB, so freed blocks are reused; that
# makes the baseline faster, never slower, so the ratio errs against tandem. `default` keeps
# glibc's behaviour. tandem's side allocates its workspaces once and is unaffected either way.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
from_caller() { if [[ $1 == /* ]]; then echo "$1"; else echo "$caller/$1"; fi; }

reps=3 runs=5 steps=10 models=dlrm,dcn_v2,deepfm,wide_deep,mmoe out=out/models_vs_torch
torch_malloc=tuned
usage() { sed -n '12,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while (($# > 0)); do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --torch-malloc) torch_malloc=$2; shift 2 ;;
    --out) out=$(from_caller "$2"); shift 2 ;;
    -h | --help) usage 0 ;;
    *) echo "models_vs_torch: unknown argument '$1'" >&2; usage ;;
  esac
done
for n in "$reps" "$runs" "$steps"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "models_vs_torch: '$n' is not a positive number" >&2; exit 2; }
done
[[ $torch_malloc == tuned || $torch_malloc == default ]] ||
  { echo "models_vs_torch: --torch-malloc is tuned or default" >&2; exit 2; }
torch_env=()
if [[ $torch_malloc == tuned ]]; then
  torch_env=(MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296)
fi

if [[ -n ${MODELS_BENCH:-} ]]; then MODELS_BENCH=$(from_caller "$MODELS_BENCH"); else MODELS_BENCH=${BUILD_DIR:-build}/bench/models_bench; fi
[[ -x $MODELS_BENCH ]] || { echo "models_vs_torch: no binary at $MODELS_BENCH (build first)" >&2; exit 2; }
PYTHON=${PYTHON:-/usr/bin/python3}
log() { echo "models_vs_torch: $*" >&2; }
have_torch=1
"$PYTHON" -c 'import torch, numpy' 2>/dev/null || {
  log "$PYTHON cannot import torch and numpy (scripts/setup.sh bench installs python3-torch): the PyTorch figure is skipped"
  have_torch=0
}
# The same OpenBLAS kernels on both sides (scripts/bench.sh sets this too; Debian's torch links
# OpenBLAS through libblas.so.3).
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$out"
out=$(realpath "$out")
rm -f "$out"/tandem-rep*.json "$out"/torch-rep*.json

"$MODELS_BENCH" --describe --models "$models" >"$out/describe.jsonl"
for ((rep = 1; rep <= reps; rep++)); do
  "$MODELS_BENCH" --models "$models" --runs "$runs" --steps "$steps" --threads 1 \
    >"$out/tandem-rep$rep.json" 2>"$out/tandem.log"
  if ((have_torch)); then
    env ${torch_env[@]+"${torch_env[@]}"} "$PYTHON" bench/torch_models_bench.py --describe "$out/describe.jsonl" --models "$models" \
      --runs "$runs" --steps "$steps" --threads 1 >"$out/torch-rep$rep.json" 2>"$out/torch.log"
  fi
  log "rep $rep: $(sed -n 's/.*"bench": "\([^"]*\)", "value": \([^,]*\),.*/\1 \2/p' \
    "$out/tandem-rep$rep.json" "$out/torch-rep$rep.json" 2>/dev/null | tr '\n' ';' || true)"
done
cat "$out/tandem.log" >&2

"$PYTHON" - "$out" "$reps" "$have_torch" "$torch_malloc" <<'EOF'
import json, statistics, sys
out, reps, have_torch, torch_malloc = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
def lines(side):
    res = {}
    for rep in range(1, reps + 1):
        with open(f"{out}/{side}-rep{rep}.json") as f:
            for line in f:
                if line.strip():
                    j = json.loads(line)
                    res.setdefault(j["model"], []).append(j)
    return res
tandem = lines("tandem")
torch = lines("torch") if have_torch else {}
for model, ts in tandem.items():
    t_runs = [v for j in ts for v in j["runs"]]
    g_runs = [v for j in ts for v in j["gemm_only_runs"]]
    t, g = statistics.median(t_runs), statistics.median(g_runs)
    first = ts[0]
    common = {"model": model, "config": first["config"], "batch": first["batch"], "threads": 1,
              "steps_per_run": first["steps_per_run"], "runs_per_side": len(t_runs),
              "num_params": first["num_params"]}
    print(json.dumps({
        "bench": f"{model}_dense_step_samples_per_s", "value": round(t, 1), "unit": "samples/s",
        "better": "higher", "baseline": "gemm_only_samples_per_s", "baseline_value": round(g, 1),
        "ratio": round(t / g, 4), "target_ratio": 0.7, "meets_target": t / g >= 0.7, **common,
        "gemms_per_step": first["gemms_per_step"],
        "gemm_gflop_per_step": first["gemm_gflop_per_step"],
        "tandem_runs": t_runs, "gemm_only_runs": g_runs}))
    fig = {"bench": f"{model}_dense_step_vs_torch_samples_per_s", "value": round(t, 1),
           "unit": "samples/s", "better": "higher"}
    ps = torch.get(model)
    if ps:
        p_runs = [v for j in ps for v in j["runs"]]
        p = statistics.median(p_runs)
        fig.update({"baseline": "torch_1_thread", "baseline_value": round(p, 1),
                    "ratio": round(t / p, 4), "target_ratio": 1.5, "meets_target": t / p >= 1.5,
                    **common, "tandem_runs": t_runs, "torch_runs": p_runs,
                    "torch": ps[0]["torch"], "torch_malloc": torch_malloc})
    else:
        fig.update({"baseline": "none", "baseline_value": 0, "ratio": 0.0, **common,
                    "tandem_runs": t_runs, "torch_skipped": "python3-torch not importable"})
    print(json.dumps(fig))
EOF
