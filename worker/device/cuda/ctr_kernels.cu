// The CUDA backend's ops for the standard CTR models (issue 19): element-wise product, the
// factorisation machine, softmax and the mixture of experts. Each sum is one sequential chain in
// the order backend.h documents, so no result depends on the launch geometry. Where a sum runs
// across a row whose elements are read along it (FM's columns, softmax's columns, the mixture's
// gate gradient), a warp takes the row: its lanes read consecutive elements (coalesced) and their
// terms are added into the chain in lane order through shuffles, instead of one thread per row
// striding through memory that its neighbours do not share.
#include "worker/device/cuda/cuda_kernels.h"
#include "worker/device/cuda/kernel_util.cuh"

namespace tandem::device::cuda {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
static_assert(kThreads % kWarp == 0, "the row kernels need whole warps");

// Warp-per-row loops: the row index and its stride. Warp-uniform, so every lane reaches the same
// shuffles.
__device__ inline int64_t GlobalWarp() { return GlobalThread() / kWarp; }
__device__ inline int64_t GridWarps() { return GridThreads() / kWarp; }
__device__ inline int Lane() { return static_cast<int>(threadIdx.x % kWarp); }

unsigned WarpBlocksFor(int64_t rows) {
  constexpr int64_t kWarpsPerBlock = kThreads / kWarp;
  return static_cast<unsigned>(Min64((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxBlocks));
}

// acc plus the values v of lanes 0 .. count - 1, added in lane order; every lane gets the result.
// All lanes of the warp must call it.
__device__ inline float AddLanesInOrder(float acc, float v, int64_t count) {
  for (int j = 0; j < count; ++j) acc = __fadd_rn(acc, __shfl_sync(kFullMask, v, j));
  return acc;
}

// The number of lanes holding a column of the chunk that starts at `base`.
__device__ inline int64_t ChunkLanes(int64_t cols, int64_t base) {
  return Min64(kWarp, cols - base);
}

__global__ void MulKernel(int64_t n, const float* a, const float* b, float* y, bool accumulate) {
  for (int64_t i = GlobalThread(); i < n; i += GridThreads()) {
    const float p = __fmul_rn(a[i], b[i]);
    y[i] = accumulate ? __fadd_rn(y[i], p) : p;
  }
}

// A warp per sample; lane l takes columns l, l + 32, ...: each column's two sums over i are the
// lane's own chains, and the per-column terms join the sample's total in column order.
__global__ void FmForwardKernel(int64_t batch, int64_t n, int64_t d, const float* x, float* out,
                                int64_t out_ld) {
  const int lane = Lane();
  for (int64_t s = GlobalWarp(); s < batch; s += GridWarps()) {
    const float* xs = x + s * n * d;
    float total = 0.0f;
    for (int64_t base = 0; base < d; base += kWarp) {
      const int64_t c = base + lane;
      float term = 0.0f;
      if (c < d) {
        float sum = 0.0f, squares = 0.0f;
        for (int64_t i = 0; i < n; ++i) {
          const float v = xs[i * d + c];
          sum = __fadd_rn(sum, v);
          squares = __fadd_rn(squares, __fmul_rn(v, v));
        }
        term = __fsub_rn(__fmul_rn(sum, sum), squares);
      }
      total = AddLanesInOrder(total, term, ChunkLanes(d, base));
    }
    if (lane == 0) out[s * out_ld] = __fmul_rn(0.5f, total);
  }
}

// A thread per (sample, column): the column sum once, then the column's n gradients.
__global__ void FmBackwardKernel(int64_t batch, int64_t n, int64_t d, const float* x,
                                 const float* dz, int64_t dz_ld, float* dx) {
  const int64_t total = batch * d;
  for (int64_t e = GlobalThread(); e < total; e += GridThreads()) {
    const int64_t s = e / d, c = e % d;
    const float* xs = x + s * n * d + c;
    float* dxs = dx + s * n * d + c;
    const float g = dz[s * dz_ld];
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum = __fadd_rn(sum, xs[j * d]);
    for (int64_t i = 0; i < n; ++i) dxs[i * d] = __fmul_rn(g, __fsub_rn(sum, xs[i * d]));
  }
}

// A warp per row. The max is exact in any order (a NaN makes the whole row NaN either way); each
// lane rescales the exponentials it wrote itself, so y may be x.
__global__ void SoftmaxForwardKernel(int64_t rows, int64_t cols, const float* x, float* y) {
  const int lane = Lane();
  for (int64_t r = GlobalWarp(); r < rows; r += GridWarps()) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float max = -INFINITY;
    for (int64_t c = lane; c < cols; c += kWarp) max = fmaxf(max, xr[c]);
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      max = fmaxf(max, __shfl_xor_sync(kFullMask, max, offset));
    }
    float sum = 0.0f;
    for (int64_t base = 0; base < cols; base += kWarp) {
      const int64_t c = base + lane;
      float e = 0.0f;
      if (c < cols) {
        e = expf(__fsub_rn(xr[c], max));
        yr[c] = e;
      }
      sum = AddLanesInOrder(sum, e, ChunkLanes(cols, base));
    }
    const float inv = __fdiv_rn(1.0f, sum);
    for (int64_t c = lane; c < cols; c += kWarp) yr[c] = __fmul_rn(yr[c], inv);
  }
}

// A warp per row: the dot product y . dy in column order, then each lane's own columns.
__global__ void SoftmaxBackwardKernel(int64_t rows, int64_t cols, const float* y, const float* dy,
                                      float* dx) {
  const int lane = Lane();
  for (int64_t r = GlobalWarp(); r < rows; r += GridWarps()) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float dot = 0.0f;
    for (int64_t base = 0; base < cols; base += kWarp) {
      const int64_t c = base + lane;
      const float p = c < cols ? __fmul_rn(yr[c], dyr[c]) : 0.0f;
      dot = AddLanesInOrder(dot, p, ChunkLanes(cols, base));
    }
    for (int64_t c = lane; c < cols; c += kWarp) {
      dx[r * cols + c] = __fmul_rn(yr[c], __fsub_rn(dyr[c], dot));
    }
  }
}

// A thread per (sample, column), summing over the experts.
__global__ void MixtureForwardKernel(int64_t batch, int64_t e, int64_t h, const float* gate,
                                     const float* x, float* out) {
  const int64_t total = batch * h;
  for (int64_t i = GlobalThread(); i < total; i += GridThreads()) {
    const int64_t s = i / h, c = i % h;
    const float* g = gate + s * e;
    const float* xs = x + s * e * h + c;
    float acc = 0.0f;
    for (int64_t k = 0; k < e; ++k) acc = __fadd_rn(acc, __fmul_rn(g[k], xs[k * h]));
    out[i] = acc;
  }
}

// A warp per (sample, expert): d_gate[s][k], a dot product over the h columns in column order.
__global__ void MixtureGateGradKernel(int64_t batch, int64_t e, int64_t h, const float* x,
                                      const float* dy, float* d_gate) {
  const int lane = Lane();
  const int64_t pairs = batch * e;
  for (int64_t p = GlobalWarp(); p < pairs; p += GridWarps()) {
    const float* xk = x + p * h;  // x[s][k] with p = s * e + k
    const float* dys = dy + (p / e) * h;
    float dot = 0.0f;
    for (int64_t base = 0; base < h; base += kWarp) {
      const int64_t c = base + lane;
      const float v = c < h ? __fmul_rn(dys[c], xk[c]) : 0.0f;
      dot = AddLanesInOrder(dot, v, ChunkLanes(h, base));
    }
    if (lane == 0) d_gate[p] = dot;
  }
}

// A thread per element of dx (batch x e x h).
__global__ void MixtureInputGradKernel(int64_t batch, int64_t e, int64_t h, const float* gate,
                                       const float* dy, float* dx, bool accumulate) {
  const int64_t total = batch * e * h;
  for (int64_t i = GlobalThread(); i < total; i += GridThreads()) {
    const int64_t p = i / h;  // s * e + k
    const int64_t c = i % h;
    const float v = __fmul_rn(gate[p], dy[(p / e) * h + c]);
    dx[i] = accumulate ? __fadd_rn(dx[i], v) : v;
  }
}

}  // namespace

cudaError_t LaunchMul(cudaStream_t stream, int64_t n, const float* a, const float* b, float* y,
                      bool accumulate) {
  if (n <= 0) return cudaSuccess;
  MulKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, a, b, y, accumulate);
  return cudaGetLastError();
}

cudaError_t LaunchFmForward(cudaStream_t stream, int64_t batch, int64_t n, int64_t d,
                            const float* x, float* out, int64_t out_ld) {
  // With n or d 0 the output is still written (0), as on the CPU.
  if (batch <= 0) return cudaSuccess;
  FmForwardKernel<<<WarpBlocksFor(batch), kThreads, 0, stream>>>(batch, n, d, x, out, out_ld);
  return cudaGetLastError();
}

cudaError_t LaunchFmBackward(cudaStream_t stream, int64_t batch, int64_t n, int64_t d,
                             const float* x, const float* dz, int64_t dz_ld, float* dx) {
  if (batch <= 0 || n <= 0 || d <= 0) return cudaSuccess;
  FmBackwardKernel<<<BlocksFor(batch * d), kThreads, 0, stream>>>(batch, n, d, x, dz, dz_ld, dx);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxForward(cudaStream_t stream, int64_t rows, int64_t cols, const float* x,
                                 float* y) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  SoftmaxForwardKernel<<<WarpBlocksFor(rows), kThreads, 0, stream>>>(rows, cols, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxBackward(cudaStream_t stream, int64_t rows, int64_t cols, const float* y,
                                  const float* dy, float* dx) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  SoftmaxBackwardKernel<<<WarpBlocksFor(rows), kThreads, 0, stream>>>(rows, cols, y, dy, dx);
  return cudaGetLastError();
}

cudaError_t LaunchMixtureForward(cudaStream_t stream, int64_t batch, int64_t e, int64_t h,
                                 const float* gate, const float* x, float* out) {
  // With e 0 the output is still written (0), as on the CPU.
  if (batch <= 0 || h <= 0) return cudaSuccess;
  MixtureForwardKernel<<<BlocksFor(batch * h), kThreads, 0, stream>>>(batch, e, h, gate, x, out);
  return cudaGetLastError();
}

cudaError_t LaunchMixtureBackward(cudaStream_t stream, int64_t batch, int64_t e, int64_t h,
                                  const float* gate, const float* x, const float* dy, float* d_gate,
                                  float* dx, bool accumulate) {
  // With h 0, d_gate is still written (0), as on the CPU.
  if (batch <= 0 || e <= 0) return cudaSuccess;
  MixtureGateGradKernel<<<WarpBlocksFor(batch * e), kThreads, 0, stream>>>(batch, e, h, x, dy,
                                                                           d_gate);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || h <= 0) return err;
  MixtureInputGradKernel<<<BlocksFor(batch * e * h), kThreads, 0, stream>>>(batch, e, h, gate, dy,
                                                                            dx, accumulate);
  return cudaGetLastError();
}

}  // namespace tandem::device::cuda
