// The CPU backend's ops for the standard CTR models (issue 19): element-wise product, the
// factorisation machine, softmax and the mixture of experts. Plain loops in the orders
// backend.h documents; they are a small share of a step next to the GEMMs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "worker/device/cpu/cpu_backend.h"

namespace tandem::device {

void CpuBackend::Mul(int64_t n, const float* a, const float* b, float* y, bool accumulate) {
  if (accumulate) {
    for (int64_t i = 0; i < n; ++i) y[i] += a[i] * b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
  }
}

void CpuBackend::FmForward(int64_t batch, int64_t n, int64_t d, const float* x, float* out,
                           int64_t out_ld) {
  for (int64_t s = 0; s < batch; ++s) {
    const float* xs = x + s * n * d;
    float total = 0;
    for (int64_t c = 0; c < d; ++c) {
      float sum = 0, squares = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float v = xs[i * d + c];
        sum += v;
        squares += v * v;
      }
      total += sum * sum - squares;
    }
    out[s * out_ld] = 0.5f * total;
  }
}

void CpuBackend::FmBackward(int64_t batch, int64_t n, int64_t d, const float* x, const float* dz,
                            int64_t dz_ld, float* dx) {
  for (int64_t s = 0; s < batch; ++s) {
    const float* xs = x + s * n * d;
    float* dxs = dx + s * n * d;
    const float g = dz[s * dz_ld];
    for (int64_t c = 0; c < d; ++c) {
      float sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += xs[i * d + c];
      for (int64_t i = 0; i < n; ++i) dxs[i * d + c] = g * (sum - xs[i * d + c]);
    }
  }
}

void CpuBackend::SoftmaxForward(int64_t rows, int64_t cols, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float max = xr[0];
    for (int64_t c = 1; c < cols; ++c) max = std::max(max, xr[c]);
    float sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      yr[c] = std::exp(xr[c] - max);
      sum += yr[c];
    }
    const float inv = 1.0f / sum;
    for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
  }
}

void CpuBackend::SoftmaxBackward(int64_t rows, int64_t cols, const float* y, const float* dy,
                                 float* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += yr[c] * dyr[c];
    for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = yr[c] * (dyr[c] - dot);
  }
}

void CpuBackend::MixtureForward(int64_t batch, int64_t e, int64_t h, const float* gate,
                                const float* x, float* out) {
  for (int64_t s = 0; s < batch; ++s) {
    float* o = out + s * h;
    const float* g = gate + s * e;
    const float* xs = x + s * e * h;
    std::fill_n(o, h, 0.0f);
    for (int64_t k = 0; k < e; ++k) {
      for (int64_t c = 0; c < h; ++c) o[c] += g[k] * xs[k * h + c];
    }
  }
}

void CpuBackend::MixtureBackward(int64_t batch, int64_t e, int64_t h, const float* gate,
                                 const float* x, const float* dy, float* d_gate, float* dx,
                                 bool accumulate) {
  for (int64_t s = 0; s < batch; ++s) {
    const float* g = gate + s * e;
    const float* xs = x + s * e * h;
    const float* dys = dy + s * h;
    float* dxs = dx + s * e * h;
    for (int64_t k = 0; k < e; ++k) {
      float dot = 0;
      for (int64_t c = 0; c < h; ++c) dot += dys[c] * xs[k * h + c];
      d_gate[s * e + k] = dot;
      for (int64_t c = 0; c < h; ++c) {
        const float v = g[k] * dys[c];
        dxs[k * h + c] = accumulate ? dxs[k * h + c] + v : v;
      }
    }
  }
}

}  // namespace tandem::device
