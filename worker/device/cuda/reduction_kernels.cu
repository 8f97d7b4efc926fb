// Reductions of the CUDA backend: BiasGrad, BceWithLogits' loss sum and AllFinite. No
// floating-point atomics: every sum has a partition fixed by the shape alone (constants in
// cuda_kernels.h, never the GPU's size or timing) and a fixed combination order.
#include "worker/device/cuda/cuda_kernels.h"
#include "worker/device/cuda/kernel_util.cuh"

namespace tandem::device::cuda {
namespace {

__host__ __device__ int64_t BiasGradChunks(int64_t rows) {
  return (rows + kBiasGradChunkRows - 1) / kBiasGradChunkRows;
}

// out[chunk * cols + c] = dy[r][c] summed over the chunk's rows in increasing r, from 0.
__global__ void ColumnChunkSums(int64_t rows, int64_t cols, const float* dy, float* out) {
  const int64_t chunks = BiasGradChunks(rows);
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t r0 = chunk * kBiasGradChunkRows;
    const int64_t r1 = Min64(rows, r0 + kBiasGradChunkRows);
    for (int64_t c = GlobalThread(); c < cols; c += GridThreads()) {
      float acc = 0.0f;
      for (int64_t r = r0; r < r1; ++r) acc = __fadd_rn(acc, dy[r * cols + c]);
      out[chunk * cols + c] = acc;
    }
  }
}

// db[c] = partial[chunk][c] summed in increasing chunk, from 0.
__global__ void SumChunks(int64_t chunks, int64_t cols, const float* partial, float* db) {
  for (int64_t c = GlobalThread(); c < cols; c += GridThreads()) {
    float acc = 0.0f;
    for (int64_t chunk = 0; chunk < chunks; ++chunk)
      acc = __fadd_rn(acc, partial[chunk * cols + c]);
    db[c] = acc;
  }
}

// The CPU backend's per-sample loss and gradient, operation by operation.
__device__ double BceSample(int64_t i, const float* logits, const float* labels,
                            const float* weights, float normaliser, float* d_logits) {
  const float z = logits[i];
  const float y = labels[i];
  const float w = weights != nullptr ? weights[i] : 1.0f;
  const float relu_z = z < 0.0f ? 0.0f : z;  // std::max(z, 0.0f), NaN included
  const float loss = __fadd_rn(__fsub_rn(relu_z, __fmul_rn(z, y)), log1pf(expf(-fabsf(z))));
  if (d_logits != nullptr) {
    float sigmoid;
    if (z >= 0.0f) {
      sigmoid = 1.0f / (1.0f + expf(-z));
    } else {
      const float e = expf(z);
      sigmoid = e / (1.0f + e);
    }
    d_logits[i] = __fmul_rn(w, sigmoid - y) / normaliser;
  }
  return __dmul_rn(static_cast<double>(w), static_cast<double>(loss));
}

// sh[0] = the fixed binary tree sum of sh[0 .. kBceThreads). All threads of the block call it.
__device__ void TreeSum(double* sh) {
  for (int stride = kBceThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride)
      sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + stride]);
    __syncthreads();
  }
}

__global__ void BceBlocks(int64_t n, const float* logits, const float* labels, const float* weights,
                          float normaliser, float* d_logits, double* block_sums) {
  __shared__ double sh[kBceThreads];
  const int64_t blocks = (n + kBceChunk - 1) / kBceChunk;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    double acc = 0.0;
    for (int64_t i = b * kBceChunk + threadIdx.x; i < Min64(n, (b + 1) * kBceChunk);
         i += kBceThreads) {
      acc = __dadd_rn(acc, BceSample(i, logits, labels, weights, normaliser, d_logits));
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    TreeSum(sh);
    if (threadIdx.x == 0) block_sums[b] = sh[0];
    __syncthreads();  // sh is reused by this thread block's next b
  }
}

// One block: *sum = the block sums reduced with BceBlocks' scheme.
__global__ void SumBlockSums(int64_t count, const double* block_sums, double* sum) {
  __shared__ double sh[kBceThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kBceThreads) acc = __dadd_rn(acc, block_sums[i]);
  sh[threadIdx.x] = acc;
  __syncthreads();
  TreeSum(sh);
  if (threadIdx.x == 0) *sum = sh[0];
}

__global__ void NonFinite(int64_t n, const float* x, int* flag) {
  bool found = false;
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) found |= !isfinite(x[i]);
  if (found) atomicOr(flag, 1);
}

}  // namespace

int64_t BiasGradScratchFloats(int64_t rows, int64_t cols) {
  const int64_t chunks = BiasGradChunks(rows);
  return chunks > 1 ? chunks * cols : 0;
}

cudaError_t LaunchBiasGrad(cudaStream_t stream, int64_t rows, int64_t cols, const float* dy,
                           float* scratch, float* db) {
  if (cols <= 0) return cudaSuccess;
  if (rows <= 0) return cudaMemsetAsync(db, 0, cols * sizeof(float), stream);
  const int64_t chunks = BiasGradChunks(rows);
  const dim3 grid(BlocksFor(cols), static_cast<unsigned>(Min64(chunks, 65535)));
  // One chunk: the chunk sum is the result, in the CPU's order.
  ColumnChunkSums<<<grid, kThreads, 0, stream>>>(rows, cols, dy, chunks > 1 ? scratch : db);
  if (chunks > 1) SumChunks<<<BlocksFor(cols), kThreads, 0, stream>>>(chunks, cols, scratch, db);
  return cudaGetLastError();
}

int64_t BceScratchDoubles(int64_t n) { return (n + kBceChunk - 1) / kBceChunk; }

cudaError_t LaunchBceWithLogits(cudaStream_t stream, int64_t n, const float* logits,
                                const float* labels, const float* weights, float normaliser,
                                float* d_logits, double* scratch, double* sum) {
  const int64_t blocks = BceScratchDoubles(n);
  BceBlocks<<<static_cast<unsigned>(Min64(blocks, kMaxBlocks)), kBceThreads, 0, stream>>>(
      n, logits, labels, weights, normaliser, d_logits, scratch);
  SumBlockSums<<<1, kBceThreads, 0, stream>>>(blocks, scratch, sum);
  return cudaGetLastError();
}

cudaError_t LaunchAllFinite(cudaStream_t stream, int64_t n, const float* x, int* flag) {
  cudaError_t e = cudaMemsetAsync(flag, 0, sizeof(int), stream);
  if (e != cudaSuccess || n <= 0) return e;
  NonFinite<<<BlocksFor(n), kThreads, 0, stream>>>(n, x, flag);
  return cudaGetLastError();
}

}  // namespace tandem::device::cuda
