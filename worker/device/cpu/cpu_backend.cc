#include "worker/device/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "worker/device/cpu/row_stable_linear.h"
#include "worker/device/precision.h"

namespace tandem::device {
namespace {

// Index of pair (i, j), i < j, in the row-major strict upper triangle of an n x n matrix.
int64_t PairIndex(int64_t n, int64_t i, int64_t j) { return i * n - i * (i + 1) / 2 + (j - i - 1); }

float StableSigmoid(float x) {
  if (x >= 0) return 1.0f / (1.0f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.0f + e);
}

constexpr int64_t kBlock = 16;

// out[i] = f(i) for i in [0, n). Each full block is computed into a local array before it is
// stored, so the compiler needs no aliasing check (out may alias f's inputs) and vectorizes it
// even at -O2. Every lane does the scalar operations in the scalar order (no reassociation, no
// contraction), so the results are bit-identical to a plain loop.
template <typename F>
void Elementwise(int64_t n, float* out, F f) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float block[kBlock];
    for (int64_t j = 0; j < kBlock; ++j) block[j] = f(i + j);
    for (int64_t j = 0; j < kBlock; ++j) out[i + j] = block[j];
  }
  for (; i < n; ++i) out[i] = f(i);
}

// y += alpha * x over d elements, lane by lane.
void AxpyRow(int64_t d, float alpha, const float* x, float* y) {
  Elementwise(d, y, [=](int64_t c) { return y[c] + alpha * x[c]; });
}

}  // namespace

StatusOr<std::unique_ptr<CpuBackend>> CpuBackend::Create(int64_t threads) {
  if (threads < 1) return Status::InvalidArgument("cpu backend: threads must be >= 1");
  openblas_set_num_threads(static_cast<int>(threads));
  return std::unique_ptr<CpuBackend>(new CpuBackend(threads));
}

std::string CpuBackend::BlasCoreName() { return openblas_get_corename(); }

void* CpuBackend::Allocate(size_t bytes) {
  if (!status_.ok()) return nullptr;
  constexpr size_t kAlign = 64;  // a cache line: the same alignment for every buffer
  void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (p == nullptr) {
    status_ = Status::ResourceExhausted("cpu backend: cannot allocate " + std::to_string(bytes) +
                                        " bytes");
    return nullptr;
  }
  std::memset(p, 0, bytes);
  return p;
}

void CpuBackend::Deallocate(void* p) { std::free(p); }

void CpuBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void CpuBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void CpuBackend::GemmMixed(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, float alpha, const float* a, const float* b, float beta,
                           float* c) {
  if (precision == Precision::kFp32) return Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
  // Rounded inputs, then the fp32 GEMM: bf16/fp16 products are exact in fp32, so this is the
  // GPU's tensor-core result up to the order of the fp32 sums.
  auto rounded = [&](const float* x, int64_t count, std::vector<float>* out) {
    out->resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) (*out)[static_cast<size_t>(i)] = RoundTo(precision, x[i]);
    return out->data();
  };
  const float* ra = rounded(a, m * k, &round_a_);
  const float* rb = rounded(b, k * n, &round_b_);
  Gemm(trans_a, trans_b, m, n, k, alpha, ra, rb, beta, c);
}

void CpuBackend::LinearForward(Precision precision, int64_t batch, int64_t in, int64_t out,
                               const float* x, const float* w, const float* b, bool relu,
                               float* y) {
  if (!row_stable_) {
    GemmMixed(precision, false, true, batch, out, in, 1.0f, x, w, 0.0f, y);
  } else if (precision == Precision::kFp32) {
    RowStableLinear(batch, in, out, x, w, y, &transposed_w_);
  } else {
    // As GemmMixed: inputs rounded first, products and sums in fp32.
    round_x_.resize(static_cast<size_t>(batch * in));
    for (int64_t i = 0; i < batch * in; ++i)
      round_x_[static_cast<size_t>(i)] = RoundTo(precision, x[i]);
    round_b_.resize(static_cast<size_t>(out * in));
    for (int64_t i = 0; i < out * in; ++i)
      round_b_[static_cast<size_t>(i)] = RoundTo(precision, w[i]);
    RowStableLinear(batch, in, out, round_x_.data(), round_b_.data(), y, &transposed_w_);
  }
  AddBias(batch, out, b, y);
  if (relu) ReluForward(batch * out, y, y);
}

void CpuBackend::Scale(int64_t n, float alpha, float* x) {
  Elementwise(n, x, [=](int64_t i) { return x[i] * alpha; });
}

bool CpuBackend::AllFinite(int64_t n, const float* x) {
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) finite &= std::isfinite(x[i]);
  return finite;
}

void CpuBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS leaves C untouched when k = 0 only for beta = 1; spell out C = beta * C.
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  const int64_t lda = trans_a ? m : k;
  const int64_t ldb = trans_b ? k : n;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(n));
}

void CpuBackend::AddBias(int64_t rows, int64_t cols, const float* bias, float* y) {
  for (int64_t r = 0; r < rows; ++r) AxpyRow(cols, 1.0f, bias, y + r * cols);
}

void CpuBackend::BiasGrad(int64_t rows, int64_t cols, const float* dy, float* db) {
  std::fill_n(db, cols, 0.0f);
  // Rows outer: every db[c] is summed in sample order whatever the vector width.
  for (int64_t r = 0; r < rows; ++r) AxpyRow(cols, 1.0f, dy + r * cols, db);
}

void CpuBackend::ReluForward(int64_t n, const float* x, float* y) {
  Elementwise(n, y, [=](int64_t i) { return x[i] > 0.0f ? x[i] : 0.0f; });
}

void CpuBackend::ReluBackward(int64_t n, const float* y, const float* dy, float* dx) {
  Elementwise(n, dx, [=](int64_t i) {
    const float g = dy[i];  // loaded unconditionally so the select needs no branch
    return y[i] > 0.0f ? g : 0.0f;
  });
}

void CpuBackend::Sigmoid(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = StableSigmoid(x[i]);
}

void CpuBackend::SigmoidBackward(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (y[i] * (1.0f - y[i]));
}

float CpuBackend::BceWithLogits(int64_t n, const float* logits, const float* labels,
                                const float* weights, float normaliser, float* d_logits) {
  double sum = 0.0;  // sample order; double so that large batches lose nothing to rounding
  for (int64_t i = 0; i < n; ++i) {
    const float z = logits[i];
    const float w = weights != nullptr ? weights[i] : 1.0f;
    const float loss = std::max(z, 0.0f) - z * labels[i] + std::log1p(std::exp(-std::fabs(z)));
    sum += static_cast<double>(w) * loss;
    if (d_logits != nullptr) d_logits[i] = w * (StableSigmoid(z) - labels[i]) / normaliser;
  }
  return static_cast<float>(sum / normaliser);
}

void CpuBackend::Copy(int64_t n, const float* x, float* y) {
  if (n > 0 && x != y) std::memmove(y, x, n * sizeof(float));
}

void CpuBackend::Fill(int64_t n, float value, float* y) { std::fill_n(y, n, value); }

void CpuBackend::Axpy(int64_t n, float alpha, const float* x, float* y) { AxpyRow(n, alpha, x, y); }

void CpuBackend::CopyStrided(int64_t rows, int64_t cols, const float* src, int64_t src_ld,
                             float* dst, int64_t dst_ld, bool accumulate) {
  for (int64_t r = 0; r < rows; ++r) {
    if (accumulate) {
      AxpyRow(cols, 1.0f, src + r * src_ld, dst + r * dst_ld);
    } else {
      std::memcpy(dst + r * dst_ld, src + r * src_ld, cols * sizeof(float));
    }
  }
}

namespace {

// Each pair's dot is one accumulator summed over c in index order from 0.0f (never
// reassociated: no -ffast-math, -ffp-contract=off), the bits of the plain loop. Four pairs of
// row i at a time, (i, j..j+3), keep their four sums in registers over the whole row, so their
// adds overlap instead of waiting on one chain (1.65x the plain loop at n 27, d 16). `xt` is the
// sample transposed, d rows of `ld` >= n + 3 floats, zero past n, so a block never reads
// outside it; the sums of pairs past the last are dropped.
template <int64_t D>
void PairwiseDotsForwardImpl(int64_t batch, int64_t n, int64_t d, const float* x, float* out,
                             int64_t out_ld) {
  const int64_t width = D > 0 ? D : d;
  const int64_t ld = n + 3;
  thread_local std::vector<float> xt, sums;
  xt.assign(static_cast<size_t>(width * ld), 0.0f);
  sums.resize(static_cast<size_t>(n + 3));
  for (int64_t s = 0; s < batch; ++s) {
    const float* xs = x + s * n * width;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < width; ++c) xt[c * ld + j] = xs[j * width + c];
    }
    float* o = out + s * out_ld;
    for (int64_t i = 0; i + 1 < n; ++i) {
      const float* xi = xs + i * width;
      const int64_t m = n - i - 1;
      for (int64_t jb = 0; jb < m; jb += 4) {
        const float* t = xt.data() + i + 1 + jb;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        for (int64_t c = 0; c < width; ++c) {
          const float v = xi[c];
          const float* tc = t + c * ld;
          a0 += v * tc[0];
          a1 += v * tc[1];
          a2 += v * tc[2];
          a3 += v * tc[3];
        }
        sums[jb] = a0;
        sums[jb + 1] = a1;
        sums[jb + 2] = a2;
        sums[jb + 3] = a3;
      }
      std::copy_n(sums.data(), m, o);
      o += m;
    }
  }
}

// dx_i = sum over j != i, in j order, of g(i, j) * x_j, from 0.0f: what an AxpyRow per j into a
// zeroed row gives, with the row kept in registers for the whole sum (D > 0).
template <int64_t D>
void PairwiseDotsBackwardImpl(int64_t batch, int64_t n, int64_t d, const float* x, const float* dz,
                              int64_t dz_ld, float* dx) {
  constexpr int64_t kMax = D > 0 ? D : 1;
  for (int64_t s = 0; s < batch; ++s) {
    const float* xs = x + s * n * d;
    const float* g = dz + s * dz_ld;
    float* dxs = dx + s * n * d;
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (D > 0) {
        float acc[kMax];
        for (int64_t c = 0; c < D; ++c) acc[c] = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          if (j == i) continue;
          const float gij = g[i < j ? PairIndex(n, i, j) : PairIndex(n, j, i)];
          const float* xj = xs + j * D;
          for (int64_t c = 0; c < D; ++c) acc[c] += gij * xj[c];
        }
        for (int64_t c = 0; c < D; ++c) dxs[i * D + c] = acc[c];
      } else {
        float* di = dxs + i * d;
        std::fill_n(di, d, 0.0f);
        for (int64_t j = 0; j < n; ++j) {
          if (j == i) continue;
          AxpyRow(d, g[i < j ? PairIndex(n, i, j) : PairIndex(n, j, i)], xs + j * d, di);
        }
      }
    }
  }
}

}  // namespace

void CpuBackend::PairwiseDotsForward(int64_t batch, int64_t n, int64_t d, const float* x,
                                     float* out, int64_t out_ld) {
  switch (d) {
    case 8:
      return PairwiseDotsForwardImpl<8>(batch, n, d, x, out, out_ld);
    case 16:
      return PairwiseDotsForwardImpl<16>(batch, n, d, x, out, out_ld);
    case 32:
      return PairwiseDotsForwardImpl<32>(batch, n, d, x, out, out_ld);
    case 64:
      return PairwiseDotsForwardImpl<64>(batch, n, d, x, out, out_ld);
    default:
      return PairwiseDotsForwardImpl<0>(batch, n, d, x, out, out_ld);
  }
}

void CpuBackend::PairwiseDotsBackward(int64_t batch, int64_t n, int64_t d, const float* x,
                                      const float* dz, int64_t dz_ld, float* dx) {
  switch (d) {
    case 8:
      return PairwiseDotsBackwardImpl<8>(batch, n, d, x, dz, dz_ld, dx);
    case 16:
      return PairwiseDotsBackwardImpl<16>(batch, n, d, x, dz, dz_ld, dx);
    case 32:
      return PairwiseDotsBackwardImpl<32>(batch, n, d, x, dz, dz_ld, dx);
    case 64:
      return PairwiseDotsBackwardImpl<64>(batch, n, d, x, dz, dz_ld, dx);
    default:
      return PairwiseDotsBackwardImpl<0>(batch, n, d, x, dz, dz_ld, dx);
  }
}

void CpuBackend::EmbeddingBagForward(int64_t batch, int64_t d, const float* rows,
                                     const int64_t* offsets, const int64_t* inverse,
                                     const float* weights, bool mean, float* pooled) {
  for (int64_t s = 0; s < batch; ++s) {
    float* out = pooled + s * d;
    std::fill_n(out, d, 0.0f);
    for (int64_t k = offsets[s]; k < offsets[s + 1]; ++k)
      AxpyRow(d, weights ? weights[k] : 1.0f, rows + inverse[k] * d, out);
    const int64_t count = offsets[s + 1] - offsets[s];
    if (mean && count > 1) {
      const float scale = 1.0f / static_cast<float>(count);
      for (int64_t c = 0; c < d; ++c) out[c] *= scale;
    }
  }
}

void CpuBackend::EmbeddingBagBackward(int64_t batch, int64_t d, int64_t num_unique,
                                      const float* d_pooled, const int64_t* offsets,
                                      const int64_t* inverse, const float* weights, bool mean,
                                      float* d_rows) {
  std::fill_n(d_rows, num_unique * d, 0.0f);
  // One sequential pass over the lookups: each unique row receives its contributions in sample
  // order, which is the fixed order PROTOCOLS §5.1 requires.
  for (int64_t s = 0; s < batch; ++s) {
    const int64_t count = offsets[s + 1] - offsets[s];
    const float scale = mean && count > 1 ? 1.0f / static_cast<float>(count) : 1.0f;
    for (int64_t k = offsets[s]; k < offsets[s + 1]; ++k) {
      AxpyRow(d, weights ? scale * weights[k] : scale, d_pooled + s * d, d_rows + inverse[k] * d);
    }
  }
}

}  // namespace tandem::device
