#include "worker/device/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "worker/model/test_util.h"

namespace tandem::device {
namespace {

using model::testing::CheckGradient;
using model::testing::GradCheckOptions;
using model::testing::Project;

std::vector<float> Random(size_t n, uint32_t seed) { return model::testing::RandomVector(n, seed); }

std::unique_ptr<CpuBackend> Make() {
  auto be = CpuBackend::Create(1);
  EXPECT_TRUE(be.ok());
  return std::move(be).value();
}

TEST(CpuBackendTest, GemmMatchesNaiveForEveryTransposition) {
  auto be = Make();
  constexpr int64_t m = 5, n = 4, k = 3;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const std::vector<float> a = Random(m * k, 1), b = Random(k * n, 2);
      std::vector<float> c = Random(m * n, 3);
      const std::vector<float> c0 = c;
      be->Gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 2.0f, c.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < k; ++p) {
            sum += double{ta ? a[p * m + i] : a[i * k + p]} * (tb ? b[j * k + p] : b[p * n + j]);
          }
          EXPECT_NEAR(c[i * n + j], 0.5 * sum + 2.0 * c0[i * n + j], 1e-5) << ta << tb;
        }
      }
    }
  }
}

// Scoring's forward (SetRowStableForward): a row's output is the k-ascending sum of separately
// rounded products, the same bits whether the row is scored alone, in a small batch or at any
// place of a large one; training's BLAS GEMM stays within rounding of it.
TEST(CpuBackendTest, RowStableForwardGivesEveryRowTheSameBitsInAnyBatch) {
  auto be = Make();
  constexpr int64_t in = 37, out = 70, rows = 131;  // odd sizes: every edge of the blocking
  const std::vector<float> x = Random(rows * in, 4), w = Random(out * in, 5), b = Random(out, 6);
  std::vector<float> blas(rows * out), all(rows * out);
  be->LinearForward(Precision::kFp32, rows, in, out, x.data(), w.data(), b.data(), true,
                    blas.data());
  be->SetRowStableForward(true);
  be->LinearForward(Precision::kFp32, rows, in, out, x.data(), w.data(), b.data(), true,
                    all.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < out; ++j) {
      float sum = 0;
      for (int64_t k = 0; k < in; ++k) {
        const float p = x[r * in + k] * w[j * in + k];
        sum = sum + p;
      }
      sum = sum + b[j];
      sum = sum > 0 ? sum : 0.0f;
      ASSERT_EQ(all[r * out + j], sum) << r << "," << j;
      EXPECT_NEAR(blas[r * out + j], sum, 1e-5);
    }
  }
  // Row r alone, and rows [r0, r0 + n) as a batch of their own: the same bits.
  for (int64_t r0 : {0, 1, 5, 64, 130}) {
    for (int64_t n : {1, 3, 17}) {
      if (r0 + n > rows) continue;
      std::vector<float> part(n * out);
      be->LinearForward(Precision::kFp32, n, in, out, &x[r0 * in], w.data(), b.data(), true,
                        part.data());
      for (int64_t i = 0; i < n * out; ++i)
        ASSERT_EQ(part[i], all[r0 * out + i]) << "rows " << r0 << "+" << n;
    }
  }
}

TEST(CpuBackendTest, BiasGradSumsInSampleOrder) {
  auto be = Make();
  // (1 + 1e8) - 1e8 = 0 in float in sample order; any other order gives 1.
  const std::vector<float> dy = {1.0f, 1e8f, -1e8f};
  float db = -3.0f;
  be->BiasGrad(3, 1, dy.data(), &db);
  EXPECT_EQ(db, 0.0f);
}

TEST(CpuBackendTest, PairwiseDotsBackwardMatchesNaive) {
  auto be = Make();
  constexpr int64_t batch = 2, n = 4, d = 3, pairs = n * (n - 1) / 2;
  const std::vector<float> x = Random(batch * n * d, 4), dz = Random(batch * pairs, 5);
  std::vector<float> dx(x.size());
  be->PairwiseDotsBackward(batch, n, d, x.data(), dz.data(), pairs, dx.data());
  for (int64_t s = 0; s < batch; ++s) {
    std::vector<double> ref(n * d, 0.0);
    int64_t p = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i + 1; j < n; ++j, ++p) {
        for (int64_t c = 0; c < d; ++c) {
          ref[i * d + c] += dz[s * pairs + p] * x[(s * n + j) * d + c];
          ref[j * d + c] += dz[s * pairs + p] * x[(s * n + i) * d + c];
        }
      }
    }
    for (int64_t e = 0; e < n * d; ++e) EXPECT_NEAR(dx[s * n * d + e], ref[e], 1e-5);
  }
}

// The interaction's kernels vectorize across pairs (forward) or keep a row in registers
// (backward), and must still give the bits of the plain loops they replaced, which the model
// checksums of every earlier job were computed with: one accumulator a dot, summed in index
// order; dx_i summed over j in order from zero. Widths with and without a fixed-width kernel.
TEST(CpuBackendTest, PairwiseDotsGiveTheBitsOfThePlainLoops) {
  auto be = Make();
  for (int64_t d : {1, 3, 8, 16, 17, 32, 64, 100}) {
    for (int64_t n : {2, 5, 27}) {
      const int64_t batch = 3, pairs = n * (n - 1) / 2, ld = pairs + 2;
      const std::vector<float> x = Random(batch * n * d, 11), dz = Random(batch * ld, 12);
      std::vector<float> out(batch * ld, -1.0f), dx(x.size(), -1.0f);
      be->PairwiseDotsForward(batch, n, d, x.data(), out.data(), ld);
      be->PairwiseDotsBackward(batch, n, d, x.data(), dz.data(), ld, dx.data());
      for (int64_t s = 0; s < batch; ++s) {
        const float* xs = x.data() + s * n * d;
        int64_t p = 0;
        std::vector<int64_t> pair(n * n, -1);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = i + 1; j < n; ++j, ++p) {
            pair[i * n + j] = pair[j * n + i] = p;
            float sum = 0.0f;
            for (int64_t c = 0; c < d; ++c) sum += xs[i * d + c] * xs[j * d + c];
            ASSERT_EQ(std::bit_cast<uint32_t>(out[s * ld + p]), std::bit_cast<uint32_t>(sum))
                << "d " << d << " n " << n << " pair " << i << "," << j;
          }
        }
        EXPECT_EQ(out[s * ld + pairs], -1.0f) << "wrote past the pairs";
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t c = 0; c < d; ++c) {
            float sum = 0.0f;
            for (int64_t j = 0; j < n; ++j) {
              if (j != i) sum = sum + dz[s * ld + pair[i * n + j]] * xs[j * d + c];
            }
            ASSERT_EQ(std::bit_cast<uint32_t>(dx[(s * n + i) * d + c]),
                      std::bit_cast<uint32_t>(sum))
                << "d " << d << " n " << n << " row " << i << " lane " << c;
          }
        }
      }
    }
  }
}

TEST(CpuBackendTest, MulOverwritesOrAccumulates) {
  auto be = Make();
  constexpr int64_t n = 37;
  const std::vector<float> a = Random(n, 6), b = Random(n, 7), y0 = Random(n, 8);
  // Overwriting never reads y: a NaN there must not survive.
  std::vector<float> y(n, std::numeric_limits<float>::quiet_NaN());
  be->Mul(n, a.data(), b.data(), y.data(), false);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], double{a[i]} * b[i], 1e-7) << i;
  y = y0;
  be->Mul(n, a.data(), b.data(), y.data(), true);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], y0[i] + double{a[i]} * b[i], 1e-6) << i;
}

// The FM identity 0.5 * ((sum x)^2 - sum x^2) = the sum of the dot products of distinct vectors.
TEST(CpuBackendTest, FmForwardIsTheSumOfPairwiseDots) {
  auto be = Make();
  constexpr int64_t out_ld = 3;
  for (int64_t n : {1, 2, 5, 26}) {
    for (int64_t d : {1, 7, 16}) {
      constexpr int64_t batch = 3;
      const std::vector<float> x = Random(batch * n * d, 9);
      std::vector<float> out = Random(batch * out_ld, 10);
      const std::vector<float> out0 = out;
      be->FmForward(batch, n, d, x.data(), out.data(), out_ld);
      for (int64_t s = 0; s < batch; ++s) {
        double ref = 0;
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = i + 1; j < n; ++j) {
            for (int64_t c = 0; c < d; ++c) {
              ref += double{x[(s * n + i) * d + c]} * x[(s * n + j) * d + c];
            }
          }
        }
        EXPECT_NEAR(out[s * out_ld], ref, 1e-5 * std::max(1.0, std::fabs(ref)))
            << "n " << n << " d " << d << " sample " << s;
        for (int64_t p = 1; p < out_ld; ++p) EXPECT_EQ(out[s * out_ld + p], out0[s * out_ld + p]);
      }
    }
  }
}

TEST(CpuBackendTest, FmBackwardIsTheGradientOfFmForward) {
  auto be = Make();
  constexpr int64_t batch = 3, n = 6, d = 5, dz_ld = 2;
  std::vector<float> x = Random(batch * n * d, 11);
  const std::vector<float> dz = Random(batch * dz_ld, 12);
  std::vector<float> dx(x.size(), std::numeric_limits<float>::quiet_NaN());  // overwritten
  be->FmBackward(batch, n, d, x.data(), dz.data(), dz_ld, dx.data());
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < d; ++c) {
        double others = 0;
        for (int64_t j = 0; j < n; ++j) {
          if (j != i) others += x[(s * n + j) * d + c];
        }
        EXPECT_NEAR(dx[(s * n + i) * d + c], dz[s * dz_ld] * others, 1e-5);
      }
    }
  }
  // f = sum_s dz_s * fm(x_s): quadratic in each x, so the central difference is exact up to
  // the rounding of f.
  std::vector<float> out(batch);
  std::vector<float> r(batch);
  for (int64_t s = 0; s < batch; ++s) r[s] = dz[s * dz_ld];
  auto f = [&] {
    be->FmForward(batch, n, d, x.data(), out.data(), 1);
    return Project(r, out.data());
  };
  EXPECT_EQ(CheckGradient(f, x.data(), x.size(), dx, GradCheckOptions{.step = 0.1}), 0);
}

TEST(CpuBackendTest, SoftmaxForwardRowsSumToOneAndMatchExp) {
  auto be = Make();
  constexpr int64_t rows = 5, cols = 7;
  std::vector<float> x = Random(rows * cols, 13);
  // Row 1 would overflow exp without the max subtracted; row 2 would underflow to 0 / 0.
  for (int64_t c = 0; c < cols; ++c) {
    x[cols + c] += 1000.0f;
    x[2 * cols + c] -= 1000.0f;
  }
  x[3 * cols] = 30.0f;  // one column dominates
  std::vector<float> y(x.size());
  be->SoftmaxForward(rows, cols, x.data(), y.data());
  for (int64_t r = 0; r < rows; ++r) {
    double max = x[r * cols], sum = 0, total = 0;
    for (int64_t c = 0; c < cols; ++c) max = std::max(max, double{x[r * cols + c]});
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - max);
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_NEAR(y[r * cols + c], std::exp(x[r * cols + c] - max) / sum, 1e-6) << r << "," << c;
      total += y[r * cols + c];
    }
    EXPECT_NEAR(total, 1.0, 1e-6) << "row " << r;
  }
  // In place, as a layer may call it, and a single column (always 1).
  std::vector<float> in_place = x;
  be->SoftmaxForward(rows, cols, in_place.data(), in_place.data());
  EXPECT_EQ(in_place, y);
  float one = -5.0f;
  be->SoftmaxForward(1, 1, &one, &one);
  EXPECT_EQ(one, 1.0f);
}

TEST(CpuBackendTest, SoftmaxBackwardIsTheGradientOfSoftmaxForward) {
  auto be = Make();
  constexpr int64_t rows = 4, cols = 9;
  std::vector<float> x = Random(rows * cols, 14);
  for (float& v : x) v *= 3.0f;
  const std::vector<float> dy = Random(rows * cols, 15);
  std::vector<float> y(x.size()), dx(x.size());
  be->SoftmaxForward(rows, cols, x.data(), y.data());
  be->SoftmaxBackward(rows, cols, y.data(), dy.data(), dx.data());
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += double{y[r * cols + c]} * dy[r * cols + c];
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_NEAR(dx[r * cols + c], y[r * cols + c] * (dy[r * cols + c] - dot), 1e-6);
    }
  }
  std::vector<float> scratch(x.size());
  auto f = [&] {
    be->SoftmaxForward(rows, cols, x.data(), scratch.data());
    return Project(dy, scratch.data());
  };
  EXPECT_EQ(CheckGradient(f, x.data(), x.size(), dx), 0);
}

TEST(CpuBackendTest, MixtureForwardIsTheGateWeightedSum) {
  auto be = Make();
  constexpr int64_t batch = 3, e = 4, h = 6;
  const std::vector<float> gate = Random(batch * e, 16), x = Random(batch * e * h, 17);
  std::vector<float> out(batch * h, std::numeric_limits<float>::quiet_NaN());  // overwritten
  be->MixtureForward(batch, e, h, gate.data(), x.data(), out.data());
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t c = 0; c < h; ++c) {
      double ref = 0;
      for (int64_t k = 0; k < e; ++k) ref += double{gate[s * e + k]} * x[(s * e + k) * h + c];
      EXPECT_NEAR(out[s * h + c], ref, 1e-6) << s << "," << c;
    }
  }
}

TEST(CpuBackendTest, MixtureBackwardIsTheGradientOfMixtureForward) {
  auto be = Make();
  constexpr int64_t batch = 3, e = 4, h = 6;
  std::vector<float> gate = Random(batch * e, 18), x = Random(batch * e * h, 19);
  const std::vector<float> dy = Random(batch * h, 20), dx0 = Random(x.size(), 21);
  // d_gate is overwritten in both modes; dx only without accumulate.
  std::vector<float> d_gate(gate.size(), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> dx(x.size(), std::numeric_limits<float>::quiet_NaN());
  be->MixtureBackward(batch, e, h, gate.data(), x.data(), dy.data(), d_gate.data(), dx.data(),
                      false);
  std::vector<float> out(batch * h);
  auto f = [&] {
    be->MixtureForward(batch, e, h, gate.data(), x.data(), out.data());
    return Project(dy, out.data());
  };
  // Bilinear in (gate, x): the central difference is exact up to the rounding of f.
  const GradCheckOptions exact{.step = 0.1};
  EXPECT_EQ(CheckGradient(f, gate.data(), gate.size(), d_gate, exact), 0);
  EXPECT_EQ(CheckGradient(f, x.data(), x.size(), dx, exact), 0);

  std::vector<float> d_gate2(gate.size(), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> dx2 = dx0;
  be->MixtureBackward(batch, e, h, gate.data(), x.data(), dy.data(), d_gate2.data(), dx2.data(),
                      true);
  EXPECT_EQ(d_gate2, d_gate);
  for (size_t i = 0; i < dx2.size(); ++i) EXPECT_NEAR(dx2[i], double{dx0[i]} + dx[i], 1e-6) << i;
}

TEST(CpuBackendTest, CreateRejectsZeroThreads) {
  EXPECT_TRUE(CpuBackend::Create(0).status().IsInvalidArgument());
}

}  // namespace
}  // namespace tandem::device
