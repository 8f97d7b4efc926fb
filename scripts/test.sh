#!/usr/bin/env bash
# The README's test command: installs what is missing, builds with every core, runs all tests.
# The exit status is ctest's. Extra arguments go to ctest (e.g. -L unit, -R Rpc).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
scripts/build.sh "${BUILD_DIR:-build}"
cd "${BUILD_DIR:-build}"
exec ctest --output-on-failure -j "$(nproc)" "$@"
