#include "worker/device/cpu/row_stable_linear.h"

#include <algorithm>

namespace tandem::device {

namespace {

constexpr int64_t kRows = 4;   // rows sharing each load of W
constexpr int64_t kCols = 64;  // outputs accumulated at once (kept in registers or L1)

// One output block with its sizes known at compile time, so the accumulators stay in registers.
template <int64_t NR, int64_t NC>
inline void Block(int64_t in, int64_t out, const float* x, const float* wt, float* y) {
  float acc[NR][NC] = {};
  for (int64_t k = 0; k < in; ++k) {
    const float* wk = wt + k * out;
    for (int64_t r = 0; r < NR; ++r) {
      const float xv = x[r * in + k];
      for (int64_t c = 0; c < NC; ++c) acc[r][c] += xv * wk[c];
    }
  }
  for (int64_t r = 0; r < NR; ++r) std::copy_n(acc[r], NC, y + r * out);
}

// One version per vector width; the arithmetic is the same in each (-ffp-contract=off: no FMA),
// and the same in full and edge blocks, only its speed differs.
__attribute__((target_clones("avx512f", "avx2", "default"))) void Kernel(
    int64_t rows, int64_t in, int64_t out, const float* x, const float* wt, float* y) {
  for (int64_t i = 0; i < rows; i += kRows) {
    const int64_t nr = std::min(kRows, rows - i);
    for (int64_t j0 = 0; j0 < out; j0 += kCols) {
      const int64_t nc = std::min(kCols, out - j0);
      if (nr == kRows && nc == kCols) {
        Block<kRows, kCols>(in, out, x + i * in, wt + j0, y + i * out + j0);
        continue;
      }
      float acc[kRows][kCols] = {};
      for (int64_t k = 0; k < in; ++k) {
        const float* wk = wt + k * out + j0;
        for (int64_t r = 0; r < nr; ++r) {
          const float xv = x[(i + r) * in + k];
          float* a = acc[r];
          for (int64_t c = 0; c < nc; ++c) a[c] += xv * wk[c];
        }
      }
      for (int64_t r = 0; r < nr; ++r) std::copy_n(acc[r], nc, y + (i + r) * out + j0);
    }
  }
}

}  // namespace

void RowStableLinear(int64_t rows, int64_t in, int64_t out, const float* x, const float* w,
                     float* y, std::vector<float>* wt) {
  wt->resize(static_cast<size_t>(in * out));
  for (int64_t j = 0; j < out; ++j)
    for (int64_t k = 0; k < in; ++k) (*wt)[static_cast<size_t>(k * out + j)] = w[j * in + k];
  Kernel(rows, in, out, x, wt->data(), y);
}

}  // namespace tandem::device
