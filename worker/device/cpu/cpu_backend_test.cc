#include "worker/device/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <vector>

#include "worker/model/test_util.h"

namespace tandem::device {
namespace {

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

TEST(CpuBackendTest, CreateRejectsZeroThreads) {
  EXPECT_TRUE(CpuBackend::Create(0).status().IsInvalidArgument());
}

}  // namespace
}  // namespace tandem::device
