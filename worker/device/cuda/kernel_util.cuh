// Internal to the CUDA backend's .cu files: launch geometry shared by the kernels.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace tandem::device::cuda {

constexpr int kThreads = 256;
// Grid-stride loops cover any n with at most this many blocks (plenty to fill a GPU); the
// partition of the work among threads never changes a result, only elementwise work uses it.
constexpr int64_t kMaxBlocks = 65536;

__host__ __device__ inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

inline unsigned BlocksFor(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// The first index and the stride of a 1-D grid-stride loop.
__device__ inline int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t GridThreads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace tandem::device::cuda
