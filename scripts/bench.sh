#!/usr/bin/env bash
# Builds and runs benchmarks; each prints one JSON line per figure (DESIGN §12).
# Usage: scripts/bench.sh [NAME...]   (names: rpc ps data; default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh "${BUILD_DIR:-build}" >/dev/null
ALL=(rpc ps data)
names=("$@")
if ((${#names[@]} == 0)); then names=("${ALL[@]}"); fi
for n in "${names[@]}"; do
  bin="${BUILD_DIR:-build}/bench/${n}_bench"
  if [[ ! -x "$bin" ]]; then
    echo "bench.sh: unknown benchmark '$n' (known: ${ALL[*]})" >&2
    exit 2
  fi
  "$bin"
done
