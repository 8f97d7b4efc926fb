// DLRM pairwise-dot interaction of the CUDA backend. One thread block per sample; every output
// element is one thread's sequential sum in the order backend.h documents, so the results are the
// CPU backend's sums (same order, no contraction) and need no cross-thread reduction at all.
// cuDNN has no op for this strict-upper-triangle layout; a batched GEMM (x x^T) would compute the
// n^2 products twice and then need a gather, for vectors as short as DLRM's.
#include "worker/device/cuda/cuda_kernels.h"
#include "worker/device/cuda/kernel_util.cuh"

namespace tandem::device::cuda {
namespace {

constexpr int kInteractionThreads = 128;
// A sample's vectors are staged in shared memory when they fit in the default 48 KiB.
constexpr int64_t kMaxStagedBytes = 48 * 1024;

__device__ inline int64_t PairIndex(int64_t n, int64_t i, int64_t j) {
  return i * n - i * (i + 1) / 2 + (j - i - 1);
}

// (i, j), i < j, of the p-th pair of the row-major strict upper triangle.
__device__ inline void PairAt(int64_t n, int64_t p, int64_t* i, int64_t* j) {
  int64_t row = 0;
  while (p >= n - 1 - row) {
    p -= n - 1 - row;
    ++row;
  }
  *i = row;
  *j = row + 1 + p;
}

// When staged, rows are padded to d + 1 floats: threads of a warp read vectors j, j + 1, ... at
// the same column, which would otherwise hit one shared-memory bank when d is a multiple of 32.
__global__ void DotsForward(int64_t batch, int64_t n, int64_t d, const float* x, float* out,
                            int64_t out_ld, bool staged) {
  extern __shared__ float sh[];
  const int64_t pairs = n * (n - 1) / 2;
  const int64_t stride = staged ? d + 1 : d;
  for (int64_t s = blockIdx.x; s < batch; s += gridDim.x) {
    const float* base = x + s * n * d;
    if (staged) {
      for (int64_t e = threadIdx.x; e < n * d; e += blockDim.x) {
        sh[(e / d) * stride + e % d] = base[e];
      }
      __syncthreads();
      base = sh;
    }
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
      int64_t i, j;
      PairAt(n, p, &i, &j);
      const float* a = base + i * stride;
      const float* b = base + j * stride;
      float acc = 0.0f;
      for (int64_t c = 0; c < d; ++c) acc = __fadd_rn(acc, __fmul_rn(a[c], b[c]));
      out[s * out_ld + p] = acc;
    }
    if (staged) __syncthreads();  // before the next sample overwrites sh
  }
}

// dx[s][i][c] = sum over j != i, increasing j, of dz[s][pair(i, j)] * x[s][j][c]. A sample's
// vectors and pair gradients are staged in shared memory when they fit (every output reads n of
// each); threads of a warp take consecutive c, so the staging reads coalesce.
__global__ void DotsBackward(int64_t batch, int64_t n, int64_t d, const float* x, const float* dz,
                             int64_t dz_ld, float* dx, bool staged) {
  extern __shared__ float sh[];
  const int64_t pairs = n * (n - 1) / 2;
  for (int64_t s = blockIdx.x; s < batch; s += gridDim.x) {
    const float* xs = x + s * n * d;
    const float* g = dz + s * dz_ld;
    if (staged) {
      for (int64_t e = threadIdx.x; e < n * d; e += blockDim.x) sh[e] = xs[e];
      for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) sh[n * d + p] = g[p];
      __syncthreads();
      xs = sh;
      g = sh + n * d;
    }
    for (int64_t e = threadIdx.x; e < n * d; e += blockDim.x) {
      const int64_t i = e / d;
      const int64_t c = e % d;
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        if (j == i) continue;
        const int64_t p = i < j ? PairIndex(n, i, j) : PairIndex(n, j, i);
        acc = __fadd_rn(acc, __fmul_rn(g[p], xs[j * d + c]));
      }
      dx[s * n * d + e] = acc;
    }
    if (staged) __syncthreads();  // before the next sample overwrites sh
  }
}

unsigned SampleBlocks(int64_t batch) { return static_cast<unsigned>(Min64(batch, kMaxBlocks)); }

}  // namespace

cudaError_t LaunchPairwiseDotsForward(cudaStream_t stream, int64_t batch, int64_t n, int64_t d,
                                      const float* x, float* out, int64_t out_ld) {
  if (batch <= 0 || n < 2) return cudaSuccess;
  const int64_t staged_bytes = n * (d + 1) * static_cast<int64_t>(sizeof(float));
  const bool staged = staged_bytes <= kMaxStagedBytes;
  DotsForward<<<SampleBlocks(batch), kInteractionThreads, staged ? staged_bytes : 0, stream>>>(
      batch, n, d, x, out, out_ld, staged);
  return cudaGetLastError();
}

cudaError_t LaunchPairwiseDotsBackward(cudaStream_t stream, int64_t batch, int64_t n, int64_t d,
                                       const float* x, const float* dz, int64_t dz_ld, float* dx) {
  if (batch <= 0 || n <= 0 || d <= 0) return cudaSuccess;
  const int64_t staged_bytes = (n * d + n * (n - 1) / 2) * static_cast<int64_t>(sizeof(float));
  const bool staged = staged_bytes <= kMaxStagedBytes;
  DotsBackward<<<SampleBlocks(batch), kInteractionThreads, staged ? staged_bytes : 0, stream>>>(
      batch, n, d, x, dz, dz_ld, dx, staged);
  return cudaGetLastError();
}

}  // namespace tandem::device::cuda
