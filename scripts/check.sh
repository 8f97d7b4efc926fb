#!/usr/bin/env bash
# Checks worth running before a large change (STYLE §12), each in its own build folder:
#   scripts/check.sh tsa     clang with -Wthread-safety -Werror (lock annotations), builds only
#   scripts/check.sh asan    gcc Debug with ASan + UBSan, runs every test
#   scripts/check.sh tsan    gcc with ThreadSanitizer, runs the unit tests
# Default: tsa and asan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
checks=("$@")
if ((${#checks[@]} == 0)); then checks=(tsa asan); fi
for c in "${checks[@]}"; do
  case "$c" in
    tsa)
      CXX=clang++ cmake -S . -B build-tsa -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTANDEM_CUDA=OFF \
        -DCMAKE_CXX_FLAGS="-Wthread-safety" >/dev/null
      cmake --build build-tsa -j "$(nproc)"
      ;;
    asan)
      SANITIZE=1 BUILD_TYPE=Debug scripts/build.sh build-asan -DTANDEM_CUDA=OFF
      (cd build-asan && ctest --output-on-failure -j "$(nproc)")
      ;;
    tsan)
      cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_CUDA=OFF \
        -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
      cmake --build build-tsan -j "$(nproc)"
      (cd build-tsan && ctest --output-on-failure -L unit -j "$(nproc)")
      ;;
    *)
      echo "check.sh: unknown check '$c' (tsa, asan, tsan)" >&2
      exit 2
      ;;
  esac
done
