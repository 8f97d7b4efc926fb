#!/usr/bin/env bash
# Builds the Debian package tandem_<version>_<arch>.deb (cmake/TandemPackage.cmake) in
# BUILD_DIR/packages and prints its path. Installs what is missing (scripts/setup.sh), configures
# BUILD_DIR the way scripts/build.sh does when it is not configured yet, and builds the one
# target the package holds (`tandem`) first. Usage: scripts/package.sh [BUILD_DIR] (default
# build). Then `sudo apt install ./tandem_<version>_<arch>.deb` (README "Two hosts").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
scripts/setup.sh
if [[ ! -f $BUILD_DIR/build.ninja ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" >/dev/null
fi
if grep -q '^TANDEM_SANITIZE:BOOL=ON$' "$BUILD_DIR/CMakeCache.txt"; then
  echo "package: $BUILD_DIR is a sanitizer build; package a Release one" >&2
  exit 2
fi
cmake --build "$BUILD_DIR" --target tandem -j "$(nproc)" >&2
out=$PWD/$BUILD_DIR/packages
[[ $BUILD_DIR == /* ]] && out=$BUILD_DIR/packages
rm -rf "$out/_CPack_Packages"
mkdir -p "$out"
(cd "$BUILD_DIR" && cpack -G DEB -B "$out") >"$out/cpack.log" 2>&1 || {
  cat "$out/cpack.log" >&2
  echo "package: cpack failed" >&2
  exit 1
}
rm -rf "$out/_CPack_Packages"
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$BUILD_DIR/CPackConfig.cmake")
deb=$out/tandem_${version}_$(dpkg --print-architecture).deb
[[ -f $deb ]] || { cat "$out/cpack.log" >&2; echo "package: no $deb" >&2; exit 1; }
echo "$deb"
