// Elementwise kernels of the CUDA backend. Each output element depends on its own inputs only,
// so the thread layout never changes a result; the arithmetic is the CPU backend's, operation by
// operation (see cuda_kernels.h), except for expf / log1pf, whose CUDA versions are within 2 ulp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "worker/device/cuda/cuda_kernels.h"
#include "worker/device/cuda/kernel_util.cuh"

namespace tandem::device::cuda {
namespace {

// out[i] = f(i) over a grid-stride loop. The ops are functors rather than lambdas: __device__
// lambdas passed from host code need nvcc's --extended-lambda.
template <typename F>
__global__ void Map(int64_t n, float* out, F f) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) out[i] = f(i);
}

template <typename F>
cudaError_t LaunchMap(cudaStream_t stream, int64_t n, float* out, F f) {
  if (n <= 0) return cudaSuccess;
  Map<<<BlocksFor(n), kThreads, 0, stream>>>(n, out, f);
  return cudaGetLastError();
}

struct ScaleOp {
  float alpha;
  const float* x;
  __device__ float operator()(int64_t i) const { return __fmul_rn(x[i], alpha); }
};
struct FillOp {
  float value;
  __device__ float operator()(int64_t) const { return value; }
};
struct AxpyOp {
  float alpha;
  const float* x;
  const float* y;
  __device__ float operator()(int64_t i) const { return __fadd_rn(y[i], __fmul_rn(alpha, x[i])); }
};
struct ReluOp {
  const float* x;
  __device__ float operator()(int64_t i) const { return x[i] > 0.0f ? x[i] : 0.0f; }
};
struct ReluBackwardOp {
  const float* y;
  const float* dy;
  __device__ float operator()(int64_t i) const { return y[i] > 0.0f ? dy[i] : 0.0f; }
};
// The CPU backend's StableSigmoid: exp of a non-positive argument only, so it never overflows.
struct SigmoidOp {
  const float* x;
  __device__ float operator()(int64_t i) const {
    const float v = x[i];
    if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
    const float e = expf(v);
    return e / (1.0f + e);
  }
};
struct SigmoidBackwardOp {
  const float* y;
  const float* dy;
  __device__ float operator()(int64_t i) const {
    return __fmul_rn(dy[i], __fmul_rn(y[i], 1.0f - y[i]));
  }
};

// Row r of a rows x cols block per blockIdx.y (grid-stride), columns across x.
// One thread per element of the rows x cols block (grid-stride): DLRM's blocks are narrow
// (cols = embedding dim, 16) and tall (the batch), so a block per row would leave most threads
// idle.
__global__ void CopyStridedKernel(int64_t rows, int64_t cols, const float* src, int64_t src_ld,
                                  float* dst, int64_t dst_ld, bool accumulate) {
  const int64_t n = rows * cols;
  for (int64_t e = GlobalThread(); e < n; e += GridThreads()) {
    const int64_t r = e / cols, c = e % cols;
    float* t = dst + r * dst_ld + c;
    const float v = src[r * src_ld + c];
    *t = accumulate ? __fadd_rn(*t, v) : v;
  }
}

__global__ void AddBiasKernel(int64_t rows, int64_t cols, const float* bias, float* y) {
  const int64_t n = rows * cols;
  for (int64_t e = GlobalThread(); e < n; e += GridThreads())
    y[e] = __fadd_rn(y[e], bias[e % cols]);
}

__device__ inline void StoreRounded(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ inline void StoreRounded(__half* p, float v) { *p = __float2half_rn(v); }

template <typename Half>
__global__ void RoundKernel(int64_t n, const float* x, Half* out) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) StoreRounded(out + i, x[i]);
}

__global__ void RoundInFloatKernel(bool bf16, int64_t n, const float* x, float* out) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    out[i] =
        bf16 ? __bfloat162float(__float2bfloat16_rn(x[i])) : __half2float(__float2half_rn(x[i]));
  }
}

}  // namespace

cudaError_t LaunchScale(cudaStream_t stream, int64_t n, float alpha, float* x) {
  return LaunchMap(stream, n, x, ScaleOp{alpha, x});
}

cudaError_t LaunchFill(cudaStream_t stream, int64_t n, float value, float* y) {
  return LaunchMap(stream, n, y, FillOp{value});
}

cudaError_t LaunchAxpy(cudaStream_t stream, int64_t n, float alpha, const float* x, float* y) {
  return LaunchMap(stream, n, y, AxpyOp{alpha, x, y});
}

cudaError_t LaunchAddBias(cudaStream_t stream, int64_t rows, int64_t cols, const float* bias,
                          float* y) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  AddBiasKernel<<<BlocksFor(rows * cols), kThreads, 0, stream>>>(rows, cols, bias, y);
  return cudaGetLastError();
}

cudaError_t LaunchReluForward(cudaStream_t stream, int64_t n, const float* x, float* y) {
  return LaunchMap(stream, n, y, ReluOp{x});
}

cudaError_t LaunchReluBackward(cudaStream_t stream, int64_t n, const float* y, const float* dy,
                               float* dx) {
  return LaunchMap(stream, n, dx, ReluBackwardOp{y, dy});
}

cudaError_t LaunchSigmoid(cudaStream_t stream, int64_t n, const float* x, float* y) {
  return LaunchMap(stream, n, y, SigmoidOp{x});
}

cudaError_t LaunchSigmoidBackward(cudaStream_t stream, int64_t n, const float* y, const float* dy,
                                  float* dx) {
  return LaunchMap(stream, n, dx, SigmoidBackwardOp{y, dy});
}

cudaError_t LaunchCopyStrided(cudaStream_t stream, int64_t rows, int64_t cols, const float* src,
                              int64_t src_ld, float* dst, int64_t dst_ld, bool accumulate) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  CopyStridedKernel<<<BlocksFor(rows * cols), kThreads, 0, stream>>>(rows, cols, src, src_ld, dst,
                                                                     dst_ld, accumulate);
  return cudaGetLastError();
}

cudaError_t LaunchRoundToHalf(cudaStream_t stream, bool bf16, int64_t n, const float* x,
                              void* out) {
  if (n <= 0) return cudaSuccess;
  if (bf16) {
    RoundKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, x, static_cast<__nv_bfloat16*>(out));
  } else {
    RoundKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, x, static_cast<__half*>(out));
  }
  return cudaGetLastError();
}

cudaError_t LaunchRoundInFloat(cudaStream_t stream, bool bf16, int64_t n, const float* x,
                               float* out) {
  if (n <= 0) return cudaSuccess;
  RoundInFloatKernel<<<BlocksFor(n), kThreads, 0, stream>>>(bf16, n, x, out);
  return cudaGetLastError();
}

}  // namespace tandem::device::cuda
