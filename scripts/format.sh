#!/usr/bin/env bash
# Formats tandem's C++ sources with the repo's .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files '*.h' '*.cc' '*.cu' | xargs clang-format -i
