#!/usr/bin/env bash
# Configures (once) and builds tandem. Usage: scripts/build.sh [BUILD_DIR] [extra cmake -D...]
# BUILD_TYPE=Debug|Release (default Release); SANITIZE=1 for ASan+UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
shift || true
BUILD_TYPE=${BUILD_TYPE:-Release}
args=(-G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE")
if [[ ${SANITIZE:-0} == 1 ]]; then args+=(-DTANDEM_SANITIZE=ON); fi
if [[ ! -f "$BUILD_DIR/build.ninja" ]] || [[ $# -gt 0 ]]; then
  cmake -S . -B "$BUILD_DIR" "${args[@]}" "$@" >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
