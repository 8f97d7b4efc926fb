#!/usr/bin/env bash
# Stages what scripts/gpu_check.sh runs into DIR (default .gpu-stage), for a GPU host that lacks
# the project's build dependencies (e.g. a lent machine with CUDA but without RocksDB, ZeroMQ,
# Cap'n Proto, Gloo or OpenBLAS, and no network): DIR/bin holds the stripped binaries, built
# here in build-gpu (Release, CUDA part on), DIR/lib the Debian shared libraries they load,
# except glibc's and CUDA's own (the GPU host's CUDA 13 libraries are used). Then, there:
#   scripts/gpu_check.sh --prebuilt DIR        (or unpack DIR.tar.xz there first)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu-stage}
BUILD=${BUILD_DIR:-build-gpu}
scripts/setup.sh
[[ -f $BUILD/build.ninja ]] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
BINS=(tandem device_tests cuda_backend_tests nccl_collective_tests worker_tests trainer_gpu_tests
      gpu_dense_bench dense_bench)
ninja -C "$BUILD" -j "$(nproc)" "${BINS[@]}" tandem_cuda_plugin >/dev/null
rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/lib/tandem"
for b in "${BINS[@]}"; do
  f=$(find "$BUILD" -name "$b" -type f -perm -u+x | head -1)
  [[ -n $f ]] || { echo "gpu_stage.sh: $b was not built" >&2; exit 1; }
  strip -o "$DIR/bin/$b" "$f"
done
# The GPU part is a plugin the binary opens from <bin>/../lib/tandem/ (cuda_plugin_loader.h).
strip -o "$DIR/lib/tandem/tandem-cuda.so" "$BUILD/worker/device/tandem-cuda.so"
for b in "$DIR"/bin/* "$DIR/lib/tandem/tandem-cuda.so"; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libstdc++.so* | \
      libgcc_s.so*) ;;                                      # glibc and the C++ runtime: newer there
    libcuda*.so* | libcublas*.so* | libcudnn*.so* | libnccl*.so* | libnvrtc*.so*) ;;  # the host's CUDA
    *) cp -L "$lib" "$DIR/lib/" ;;
  esac
done
# One compressed file too, for hosts reached through a size-limited copy (OpenBLAS alone is 35 MB).
tar -C "$(dirname "$DIR")" -cJf "$DIR.tar.xz" "$(basename "$DIR")"
du -sh "$DIR" "$DIR.tar.xz"
