#!/usr/bin/env bash
# Builds and runs benchmarks; each prints one JSON line per figure (DESIGN §12).
# Usage: scripts/bench.sh [NAME...] [-- ARGS...]   (names: rpc ps data dense train checkpoint
# ps_replay recovery serve scale eoj torch bag multihot models shard_cold row_file; default: all but
# scale, eoj, torch, bag, multihot, models, shard_cold and row_file). ARGS go to every named
# benchmark, e.g. `scripts/bench.sh checkpoint -- --rows 1000000 --reps 3` for a quick checkpoint
# run (the full one takes about 6 minutes).
# `serve` (bench/serve_bench.cc: `tandem serve` over HTTP against in-process scoring, and a
# `tandem local` job's checkpoints applied as deltas while serving) takes about 1 to 1.5 minutes
# on 2 cores; `scripts/bench.sh serve -- --only steady` (or `--only delta`) runs one half.
# `scale` (bench/scale_bench.sh: three whole `tandem local` jobs, the table all in cache and
# with caches of 1/10 and 1/100 of it) is not in the default list because it is long: at its
# defaults (2e7 ids per field, 1200 steps of 2 x 1024) each job trains on 2.5M samples, mostly
# from RocksDB. A quick one (about 4 minutes on 2 cores):
# `scripts/bench.sh scale -- --vocab 200000 --rows 200000 --steps 200`.
# `eoj` (bench/end_of_job_bench.sh: the end of a job, last step to exit, with a ~10^6-row and a
# ~10^8-row table, the same steps and cache; about 30 minutes and 40 GB of disk at its defaults)
# is not in the default list either; a quick one: `scripts/bench.sh eoj -- --vocabs "4000
# 400000" --steps 200`.
# `torch` (bench/dlrm_vs_torch.sh: `tandem local` 2 PS x 2 workers against a single-process
# PyTorch DLRM on the same cores, interleaved; target ratio 1.5) is not in the default list
# either: it needs python3-torch, which only `scripts/setup.sh bench` installs (done here when
# `torch` is named). About 50 s per rep, 3 reps by default:
# `scripts/bench.sh torch -- --steps 300 --reps 3`.
# `bag` (bench/embedding_bag_vs_torch.sh: the CPU backend's embedding-bag forward + backward of
# multi-hot bags, batch 2048 x 8 features, mean bag length 20, dim 32, one core, against
# PyTorch's nn.EmbeddingBag on the same bags, sum and mean; target ratio 1.5) wants
# python3-torch too, and asks for it here; when it cannot be installed, it prints tandem's
# figures alone and says so. About 30 s: `scripts/bench.sh bag -- --reps 3 --runs 5`.
# `dense` is bench/dense_bench.cc (DLRM at the Criteo-Kaggle shape; ARGS go to it), then
# `models` at its defaults: bench/models_vs_torch.sh, the dense step (forward + backward, batch
# 2048, one core) of each model type (dlrm dcn_v2 deepfm wide_deep mmoe) at its example config,
# two lines per model: against the same step's GEMMs alone (raw cblas_sgemm, same run; target
# ratio 0.7) and against its PyTorch twin (bench/torch_models.py, interleaved reps; target 1.5).
# Both want python3-torch and ask for it here; without it they print tandem's figures alone and
# say the PyTorch figure was skipped. `models` alone takes ARGS, e.g. `scripts/bench.sh models --
# --reps 1 --runs 3 --models dcn_v2,mmoe`; at its defaults about 3 minutes on 2 cores.
# bench/models_auc_vs_torch.sh (not run from here) trains each model and its twin on the same
# data and steps and compares their eval AUCs (target: within 0.005).
# `data` includes the general text format (issue 18): ParseTextLine over a multi-hot file (13
# dense, 8 bags of mean length 20, 2 labels) against LineReader alone on the same file, target
# ratio 0.3; `scripts/bench.sh data -- --only text` runs that part alone (a few seconds).
# `shard_cold` (bench/shard_cold_bench.cc: one PS shard stepped in process, no workers, with the
# table 10x and 100x its cache against all in cache; the store's part of `scale` without a job's
# noise) is not in the default list; about 5 minutes at its defaults, a quick one:
# `scripts/bench.sh shard_cold -- --vocab 2000000 --steps 100 --reps 1`.
# `row_file` (bench/row_file_bench.cc: a probe for issue 21's storage decision, the RocksDB tier's
# cost a row of the cold path against rows in hash buckets of a mapped file, same ids; no tandem
# feature uses such a file) is not in the default list; about 2 minutes a rep at its defaults.
# `multihot` (bench/multi_hot_local_bench.sh: `tandem local` samples/s of a multi-hot job against
# a single-hot one with as many ids per sample, interleaved, 1 PS x 1 worker) is not in the
# default list; about 25 s per rep on 2 cores: `scripts/bench.sh multihot -- --steps 400 --reps 3`.
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=(rpc ps data dense train checkpoint ps_replay recovery serve)
names=()
while (($# > 0)) && [[ $1 != -- ]]; do names+=("$1"); shift; done
if (($# > 0)); then shift; fi  # the --
bench_args=("$@")
if ((${#names[@]} == 0)); then names=("${ALL[@]}"); fi
setup_groups=()
want_torch=0
for n in "${names[@]}"; do
  if [[ $n == torch ]]; then setup_groups=(bench); fi
  if [[ $n == bag || $n == dense || $n == models ]]; then want_torch=1; fi
done
scripts/setup.sh ${setup_groups[@]+"${setup_groups[@]}"}
# `bag`, `dense` and `models` run without torch (their PyTorch figures are then skipped), so a
# failed install is no error.
if ((want_torch)) && ((${#setup_groups[@]} == 0)); then
  scripts/setup.sh bench ||
    echo "bench.sh: could not install python3-torch; 'bag', 'dense' and 'models' will skip their PyTorch figures" >&2
fi
scripts/build.sh "${BUILD_DIR:-build}" >/dev/null
# OpenBLAS 0.3.21 does not recognise some AVX-512 CPUs and falls back to SSE3 kernels (tandem
# itself then pins a better set, worker/device/cpu/blas_kernels.h); the benchmarks pin one set by
# what the CPU supports, so that their figures compare across machines that OpenBLAS knows.
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
for n in "${names[@]}"; do
  if [[ $n == scale ]]; then
    TANDEM="${BUILD_DIR:-build}/cli/tandem" bench/scale_bench.sh ${bench_args[@]+"${bench_args[@]}"}
    continue
  fi
  if [[ $n == eoj ]]; then
    TANDEM="${BUILD_DIR:-build}/cli/tandem" bench/end_of_job_bench.sh ${bench_args[@]+"${bench_args[@]}"}
    continue
  fi
  if [[ $n == torch ]]; then
    TANDEM="${BUILD_DIR:-build}/cli/tandem" bench/dlrm_vs_torch.sh ${bench_args[@]+"${bench_args[@]}"}
    continue
  fi
  if [[ $n == multihot ]]; then
    TANDEM="${BUILD_DIR:-build}/cli/tandem" bench/multi_hot_local_bench.sh ${bench_args[@]+"${bench_args[@]}"}
    continue
  fi
  if [[ $n == bag ]]; then
    BAG_BENCH="${BUILD_DIR:-build}/bench/embedding_bag_bench" bench/embedding_bag_vs_torch.sh ${bench_args[@]+"${bench_args[@]}"}
    continue
  fi
  if [[ $n == models ]]; then
    MODELS_BENCH="${BUILD_DIR:-build}/bench/models_bench" bench/models_vs_torch.sh ${bench_args[@]+"${bench_args[@]}"}
    continue
  fi
  bin="${BUILD_DIR:-build}/bench/${n}_bench"
  if [[ ! -x "$bin" ]]; then
    echo "bench.sh: unknown benchmark '$n' (known: ${ALL[*]} scale eoj torch bag multihot models shard_cold row_file)" >&2
    exit 2
  fi
  "$bin" ${bench_args[@]+"${bench_args[@]}"}
  # The per-model figures of issue 19 belong to `dense` too; ARGS are dense_bench's, not theirs.
  if [[ $n == dense ]]; then MODELS_BENCH="${BUILD_DIR:-build}/bench/models_bench" bench/models_vs_torch.sh; fi
done
