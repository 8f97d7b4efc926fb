#!/usr/bin/env bash
# Builds and runs benchmarks; each prints one JSON line per figure (DESIGN §12).
# Usage: scripts/bench.sh [NAME...]   (names: rpc ps data dense train; default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "${BUILD_DIR:-build}" >/dev/null
ALL=(rpc ps data dense train)
names=("$@")
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
  "$bin"
done
