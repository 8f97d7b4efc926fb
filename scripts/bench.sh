#!/usr/bin/env bash
# Builds and runs benchmarks; each prints one JSON line per figure (DESIGN §12).
# Usage: scripts/bench.sh [NAME...] [-- ARGS...]   (names: rpc ps data dense train checkpoint
# ps_replay recovery; default: all). ARGS go to every named benchmark, e.g. `scripts/bench.sh checkpoint -- --rows
# 1000000 --reps 3` for a quick checkpoint run (the full one takes about 6 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "${BUILD_DIR:-build}" >/dev/null
ALL=(rpc ps data dense train checkpoint ps_replay recovery)
names=()
while (($# > 0)) && [[ $1 != -- ]]; do names+=("$1"); shift; done
if (($# > 0)); then shift; fi  # the --
bench_args=("$@")
if ((${#names[@]} == 0)); then names=("${ALL[@]}"); fi
# OpenBLAS 0.3.21 does not recognise some AVX-512 CPUs and falls back to SSE3 kernels; pin the
# kernel set by what the CPU supports (PROTOCOLS §5 pins it anyway for determinism).
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
for n in "${names[@]}"; do
  bin="${BUILD_DIR:-build}/bench/${n}_bench"
  if [[ ! -x "$bin" ]]; then
    echo "bench.sh: unknown benchmark '$n' (known: ${ALL[*]})" >&2
    exit 2
  fi
  "$bin" ${bench_args[@]+"${bench_args[@]}"}
done
