// The CUDA backend against the CPU backend, op by op, on seeded random inputs. Every test skips
// when there is no CUDA device (CI has nvcc but no GPU); run with one via scripts/gpu_check.sh.
#include "worker/device/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "worker/device/buffer.h"
#include "worker/device/cpu/cpu_backend.h"
#include "worker/model/test_util.h"

namespace tandem::device {
namespace {

using model::testing::RandomVector;

constexpr float kFp32Tol = 1e-5f;   // elementwise and reductions
constexpr float kGemmTol = 1e-4f;   // fp32 GEMMs: another summation order
constexpr float kMixedTol = 1e-3f;  // bf16 / fp16 inputs: CPU emulation vs tensor cores

// |got - want| <= tol * max(1, |want|) everywhere; reports the first few differences.
::testing::AssertionResult Close(const std::vector<float>& got, const std::vector<float>& want,
                                 float tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  int bad = 0;
  auto failure = ::testing::AssertionFailure();
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (both_nan || std::fabs(got[i] - want[i]) <= tol * std::max(1.0f, std::fabs(want[i]))) {
      continue;
    }
    if (++bad <= 5) failure << "[" << i << "] got " << got[i] << " want " << want[i] << "; ";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return failure << bad << " of " << got.size() << " differ";
}

// Data movement: the same values (a NaN matches a NaN).
::testing::AssertionResult Equal(const std::vector<float>& got, const std::vector<float>& want) {
  return Close(got, want, 0.0f);
}

::testing::AssertionResult BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "not bit-identical";
}

// One embedding-bag index: bag sizes in [0, max_bag], rows drawn from [0, num_unique).
struct BagIndex {
  std::vector<int64_t> offsets{0};
  std::vector<int64_t> inverse;
  int64_t num_unique = 0;
};

BagIndex RandomBags(int64_t batch, int64_t max_bag, int64_t num_unique, uint32_t seed) {
  std::mt19937 engine(seed);
  BagIndex index;
  index.num_unique = num_unique;
  for (int64_t s = 0; s < batch; ++s) {
    const int64_t count = std::uniform_int_distribution<int64_t>(0, max_bag)(engine);
    for (int64_t k = 0; k < count; ++k) {
      index.inverse.push_back(std::uniform_int_distribution<int64_t>(0, num_unique - 1)(engine));
    }
    index.offsets.push_back(static_cast<int64_t>(index.inverse.size()));
  }
  return index;
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gpu = CreateCudaBackend(0);
    if (!gpu.ok() && gpu.status().code() == StatusCode::kUnavailable) {
      GTEST_SKIP() << "no CUDA device: " << gpu.status().message();
    }
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(gpu).value();
    auto cpu = CpuBackend::Create(1);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(cpu).value();
  }
  void TearDown() override {
    if (gpu_ != nullptr && expect_ok_) {
      EXPECT_TRUE(gpu_->status().ok()) << gpu_->status();
    }
  }

  template <typename T>
  Buffer<T> Upload(const std::vector<T>& v) {
    Buffer<T> b(gpu_.get(), static_cast<int64_t>(v.size()));
    gpu_->CopyToDevice(b.data(), v.data(), v.size() * sizeof(T));
    return b;
  }
  template <typename T>
  std::vector<T> Download(const Buffer<T>& b) {
    std::vector<T> v(static_cast<size_t>(b.size()));
    gpu_->CopyToHost(v.data(), b.data(), v.size() * sizeof(T));
    return v;
  }

  // CPU and GPU GEMM (precision, both transpositions) of the same random inputs.
  void CompareGemm(Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                   float beta, float tol) {
    const std::vector<float> a = RandomVector(m * k, 11), b = RandomVector(k * n, 12);
    std::vector<float> want = RandomVector(m * n, 13);
    Buffer<float> ga = Upload(a), gb = Upload(b), gc = Upload(want);
    cpu_->GemmMixed(p, ta, tb, m, n, k, alpha, a.data(), b.data(), beta, want.data());
    gpu_->GemmMixed(p, ta, tb, m, n, k, alpha, ga.data(), gb.data(), beta, gc.data());
    EXPECT_TRUE(Close(Download(gc), want, tol))
        << "precision " << static_cast<int>(p) << " ta " << ta << " tb " << tb << " m " << m
        << " n " << n << " k " << k << " beta " << beta;
  }

  std::unique_ptr<Backend> gpu_;
  std::unique_ptr<CpuBackend> cpu_;
  bool expect_ok_ = true;  // TearDown requires an OK status unless a test provokes an error
};

TEST_F(CudaBackendTest, CreateRejectsABadDeviceIndex) {
  EXPECT_TRUE(CreateCudaBackend(-1).status().IsInvalidArgument());
  EXPECT_TRUE(CreateCudaBackend(1 << 20).status().IsUnavailable());
  EXPECT_FALSE(gpu_->host_memory());
}

TEST_F(CudaBackendTest, AllocateZeroFillsAndCopiesRoundTrip) {
  Buffer<float> zeros(gpu_.get(), 1000);
  EXPECT_TRUE(Equal(Download(zeros), std::vector<float>(1000, 0.0f)));
  const std::vector<float> v = RandomVector(12345, 1);
  EXPECT_TRUE(Equal(Download(Upload(v)), v));
  // Larger than one staging chunk (8 MiB): copied in pieces.
  const std::vector<float> big = RandomVector(5'000'000, 2);
  EXPECT_TRUE(Equal(Download(Upload(big)), big));
}

TEST_F(CudaBackendTest, CopyToDeviceSourceIsReusableOnReturn) {
  // More copies than staging slots, queued without a wait, all from one host vector.
  std::vector<float> src(300'000);
  std::vector<Buffer<float>> buffers;
  for (int i = 0; i < 10; ++i) {
    std::fill(src.begin(), src.end(), static_cast<float>(i));
    buffers.emplace_back(gpu_.get(), static_cast<int64_t>(src.size()));
    gpu_->CopyToDevice(buffers.back().data(), src.data(), src.size() * sizeof(float));
  }
  gpu_->Synchronize();
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(Equal(Download(buffers[i]), std::vector<float>(src.size(), static_cast<float>(i))))
        << i;
  }
}

TEST_F(CudaBackendTest, GemmMatchesCpuForEveryTransposition) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      CompareGemm(Precision::kFp32, ta, tb, 37, 53, 29, 0.7f, 0.0f, kGemmTol);
      CompareGemm(Precision::kFp32, ta, tb, 37, 53, 29, 0.7f, 1.5f, kGemmTol);
    }
  }
  CompareGemm(Precision::kFp32, false, true, 300, 257, 515, 1.0f, 0.0f, kGemmTol);
  CompareGemm(Precision::kFp32, true, false, 1, 64, 2048, 1.0f, 1.0f, kGemmTol);
}

TEST_F(CudaBackendTest, GemmWithEmptyProductScalesC) {
  CompareGemm(Precision::kFp32, false, false, 5, 7, 0, 1.0f, 0.5f, 0.0f);
  CompareGemm(Precision::kFp32, false, false, 5, 7, 0, 1.0f, 0.0f, 0.0f);
}

TEST_F(CudaBackendTest, GemmMixedMatchesCpuEmulation) {
  for (Precision p : {Precision::kBf16, Precision::kFp16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        CompareGemm(p, ta, tb, 37, 53, 29, 0.7f, 0.0f, kMixedTol);
        CompareGemm(p, ta, tb, 64, 48, 96, 1.0f, 1.0f, kMixedTol);
      }
    }
    CompareGemm(p, false, true, 256, 512, 333, 1.0f, 0.0f, kMixedTol);
  }
  CompareGemm(Precision::kFp32, true, true, 37, 53, 29, 0.7f, 0.5f, kGemmTol);
}

TEST_F(CudaBackendTest, LinearForwardMatchesCpuWithAndWithoutRelu) {
  struct Shape {
    int64_t batch, in, out;
  };
  for (const Shape& s :
       {Shape{33, 47, 19}, Shape{64, 13, 1}, Shape{128, 256, 512}, Shape{4, 0, 3}}) {
    for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
      for (bool relu : {false, true}) {
        const std::vector<float> x = RandomVector(s.batch * s.in, 21);
        const std::vector<float> w = RandomVector(s.out * s.in, 22);
        const std::vector<float> b = RandomVector(s.out, 23);
        std::vector<float> want(s.batch * s.out);
        Buffer<float> gx = Upload(x), gw = Upload(w), gb = Upload(b);
        Buffer<float> gy = Upload(RandomVector(want.size(), 24));  // overwritten
        cpu_->LinearForward(p, s.batch, s.in, s.out, x.data(), w.data(), b.data(), relu,
                            want.data());
        gpu_->LinearForward(p, s.batch, s.in, s.out, gx.data(), gw.data(), gb.data(), relu,
                            gy.data());
        EXPECT_TRUE(Close(Download(gy), want, p == Precision::kFp32 ? kGemmTol : kMixedTol))
            << "batch " << s.batch << " in " << s.in << " out " << s.out << " precision "
            << static_cast<int>(p) << " relu " << relu;
      }
    }
  }
}

TEST_F(CudaBackendTest, ScaleFillAxpyCopyMatchCpu) {
  const int64_t n = 10007;
  const std::vector<float> x = RandomVector(n, 31);
  std::vector<float> y = RandomVector(n, 32);
  Buffer<float> gx = Upload(x), gy = Upload(y);

  cpu_->Axpy(n, -0.37f, x.data(), y.data());
  gpu_->Axpy(n, -0.37f, gx.data(), gy.data());
  EXPECT_TRUE(Close(Download(gy), y, kFp32Tol));

  cpu_->Scale(n, 3.5f, y.data());
  gpu_->Scale(n, 3.5f, gy.data());
  EXPECT_TRUE(Close(Download(gy), y, kFp32Tol));

  cpu_->Fill(n / 2, -2.25f, y.data() + 3);
  gpu_->Fill(n / 2, -2.25f, gy.data() + 3);
  EXPECT_TRUE(Equal(Download(gy), y));

  cpu_->Copy(n - 5, x.data() + 5, y.data());
  gpu_->Copy(n - 5, gx.data() + 5, gy.data());
  EXPECT_TRUE(Equal(Download(gy), y));

  // Overlapping ranges, both directions (memmove semantics).
  cpu_->Copy(n - 100, y.data(), y.data() + 100);
  gpu_->Copy(n - 100, gy.data(), gy.data() + 100);
  EXPECT_TRUE(Equal(Download(gy), y));
  cpu_->Copy(n - 7, y.data() + 7, y.data());
  gpu_->Copy(n - 7, gy.data() + 7, gy.data());
  EXPECT_TRUE(Equal(Download(gy), y));
}

TEST_F(CudaBackendTest, ActivationsMatchCpu) {
  const int64_t n = 4099;
  std::vector<float> x = RandomVector(n, 41, -8.0f, 8.0f);
  // Both signs far out (where a naive sigmoid overflows), zero and tiny values.
  const float extremes[] = {-100.0f, 100.0f, -88.7f, 88.7f, 0.0f, -0.0f, 1e-30f, -1e-30f};
  std::copy(std::begin(extremes), std::end(extremes), x.begin());
  const std::vector<float> dy = RandomVector(n, 42);
  Buffer<float> gx = Upload(x), gdy = Upload(dy), gy(gpu_.get(), n), gdx(gpu_.get(), n);
  std::vector<float> y(n), dx(n);

  cpu_->Sigmoid(n, x.data(), y.data());
  gpu_->Sigmoid(n, gx.data(), gy.data());
  EXPECT_TRUE(Close(Download(gy), y, kFp32Tol));
  cpu_->SigmoidBackward(n, y.data(), dy.data(), dx.data());
  gpu_->SigmoidBackward(n, gy.data(), gdy.data(), gdx.data());
  EXPECT_TRUE(Close(Download(gdx), dx, kFp32Tol));

  cpu_->ReluForward(n, x.data(), y.data());
  gpu_->ReluForward(n, gx.data(), gy.data());
  EXPECT_TRUE(Equal(Download(gy), y));
  cpu_->ReluBackward(n, y.data(), dy.data(), dx.data());
  gpu_->ReluBackward(n, gy.data(), gdy.data(), gdx.data());
  EXPECT_TRUE(Equal(Download(gdx), dx));
  // In place, as the layers use them.
  cpu_->ReluForward(n, x.data(), x.data());
  gpu_->ReluForward(n, gx.data(), gx.data());
  EXPECT_TRUE(Equal(Download(gx), x));
}

TEST_F(CudaBackendTest, AddBiasAndCopyStridedMatchCpu) {
  const int64_t rows = 70, cols = 33, src_ld = 40, dst_ld = 50;
  const std::vector<float> bias = RandomVector(cols, 51);
  std::vector<float> y = RandomVector(rows * cols, 52);
  Buffer<float> gbias = Upload(bias), gy = Upload(y);
  cpu_->AddBias(rows, cols, bias.data(), y.data());
  gpu_->AddBias(rows, cols, gbias.data(), gy.data());
  EXPECT_TRUE(Close(Download(gy), y, kFp32Tol));

  const std::vector<float> src = RandomVector(rows * src_ld, 53);
  for (bool accumulate : {false, true}) {
    std::vector<float> dst = RandomVector(rows * dst_ld, 54);  // padding must stay untouched
    Buffer<float> gsrc = Upload(src), gdst = Upload(dst);
    cpu_->CopyStrided(rows, cols, src.data(), src_ld, dst.data() + 4, dst_ld, accumulate);
    gpu_->CopyStrided(rows, cols, gsrc.data(), src_ld, gdst.data() + 4, dst_ld, accumulate);
    EXPECT_TRUE(Close(Download(gdst), dst, kFp32Tol)) << "accumulate " << accumulate;
  }
}

TEST_F(CudaBackendTest, AllFiniteFindsNanAndInfinity) {
  std::vector<float> x = RandomVector(100'000, 61);
  Buffer<float> gx = Upload(x);
  EXPECT_TRUE(gpu_->AllFinite(static_cast<int64_t>(x.size()), gx.data()));
  EXPECT_TRUE(gpu_->AllFinite(0, gx.data()));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    x[77'777] = bad;
    gx = Upload(x);
    EXPECT_FALSE(gpu_->AllFinite(static_cast<int64_t>(x.size()), gx.data())) << bad;
    EXPECT_TRUE(gpu_->AllFinite(77'777, gx.data())) << "only the prefix before " << bad;
  }
}

TEST_F(CudaBackendTest, BceWithLogitsMatchesCpu) {
  const int64_t n = 3001;  // several fixed blocks and a partial one
  const std::vector<float> logits = RandomVector(n, 71, -30.0f, 30.0f);
  std::vector<float> labels = RandomVector(n, 72, 0.0f, 1.0f);
  for (int64_t i = 0; i < n; i += 3) labels[i] = labels[i] < 0.5f ? 0.0f : 1.0f;
  const std::vector<float> weights = RandomVector(n, 73, 0.0f, 2.0f);
  Buffer<float> gz = Upload(logits), gl = Upload(labels), gw = Upload(weights);
  Buffer<float> gd(gpu_.get(), n);
  for (bool weighted : {false, true}) {
    for (float normaliser : {static_cast<float>(n), 17.5f}) {
      std::vector<float> d(n);
      const float want =
          cpu_->BceWithLogits(n, logits.data(), labels.data(), weighted ? weights.data() : nullptr,
                              normaliser, d.data());
      const float got = gpu_->BceWithLogits(n, gz.data(), gl.data(), weighted ? gw.data() : nullptr,
                                            normaliser, gd.data());
      EXPECT_NEAR(got, want, kFp32Tol * std::fabs(want)) << weighted << " " << normaliser;
      // Compared at the scale of one sample's gradient (the normaliser divides it).
      std::vector<float> got_d = Download(gd);
      for (int64_t i = 0; i < n; ++i) {
        got_d[i] *= normaliser;
        d[i] *= normaliser;
      }
      EXPECT_TRUE(Close(got_d, d, kFp32Tol)) << weighted << " " << normaliser;
      const float loss_only = gpu_->BceWithLogits(
          n, gz.data(), gl.data(), weighted ? gw.data() : nullptr, normaliser, nullptr);
      EXPECT_EQ(loss_only, got);
    }
  }
  EXPECT_EQ(gpu_->BceWithLogits(0, gz.data(), gl.data(), nullptr, 1.0f, nullptr), 0.0f);
}

TEST_F(CudaBackendTest, BiasGradMatchesCpu) {
  const int64_t cols = 13;
  for (int64_t rows : {0, 1, 100, 256, 257, 3000}) {
    const std::vector<float> dy = RandomVector(std::max<int64_t>(rows, 1) * cols, 81);
    std::vector<float> want(cols);
    Buffer<float> gdy = Upload(dy), gdb = Upload(RandomVector(cols, 82));
    cpu_->BiasGrad(rows, cols, dy.data(), want.data());
    gpu_->BiasGrad(rows, cols, gdy.data(), gdb.data());
    // Past one 256-row chunk the GPU sums in another order than the CPU: the rounding
    // differences grow with the number of chunks combined.
    const float tol = kFp32Tol * std::max(1.0f, static_cast<float>(rows) / 256.0f);
    EXPECT_TRUE(Close(Download(gdb), want, tol)) << "rows " << rows;
  }
}

TEST_F(CudaBackendTest, PairwiseDotsMatchCpu) {
  struct Shape {
    int64_t batch, n, d;
  };
  // The last shape does not fit in shared memory (the kernel reads global memory instead).
  for (const Shape& s : {Shape{5, 7, 9}, Shape{64, 27, 16}, Shape{3, 40, 400}, Shape{4, 1, 8}}) {
    const int64_t pairs = s.n * (s.n - 1) / 2, out_ld = pairs + 3, dz_ld = pairs + 2;
    const std::vector<float> x = RandomVector(s.batch * s.n * s.d, 91);
    const std::vector<float> dz = RandomVector(s.batch * dz_ld, 92);
    std::vector<float> out = RandomVector(s.batch * out_ld, 93);  // padding stays
    std::vector<float> dx(x.size());
    Buffer<float> gx = Upload(x), gdz = Upload(dz), gout = Upload(out);
    Buffer<float> gdx = Upload(RandomVector(x.size(), 94));  // overwritten
    cpu_->PairwiseDotsForward(s.batch, s.n, s.d, x.data(), out.data(), out_ld);
    gpu_->PairwiseDotsForward(s.batch, s.n, s.d, gx.data(), gout.data(), out_ld);
    EXPECT_TRUE(Close(Download(gout), out, kFp32Tol)) << s.batch << " " << s.n << " " << s.d;
    cpu_->PairwiseDotsBackward(s.batch, s.n, s.d, x.data(), dz.data(), dz_ld, dx.data());
    gpu_->PairwiseDotsBackward(s.batch, s.n, s.d, gx.data(), gdz.data(), dz_ld, gdx.data());
    EXPECT_TRUE(Close(Download(gdx), dx, kFp32Tol)) << s.batch << " " << s.n << " " << s.d;
  }
}

class CudaEmbeddingBagTest : public CudaBackendTest {
 protected:
  // Forward and backward of one index, sum and mean, without and with per-id weights, CPU
  // against GPU: bit-identical or close.
  void Compare(const BagIndex& index, int64_t d, bool exact) {
    const int64_t batch = static_cast<int64_t>(index.offsets.size()) - 1;
    const std::vector<float> rows = RandomVector(index.num_unique * d, 101);
    const std::vector<float> d_pooled = RandomVector(batch * d, 102);
    const std::vector<float> weights =
        RandomVector(std::max<int64_t>(static_cast<int64_t>(index.inverse.size()), 1), 105);
    Buffer<float> grows = Upload(rows), gdp = Upload(d_pooled), gw = Upload(weights);
    Buffer<int64_t> goff = Upload(index.offsets), ginv = Upload(index.inverse);
    for (int variant = 0; variant < 4; ++variant) {
      const bool mean = variant & 1;
      const float* w = variant & 2 ? weights.data() : nullptr;
      const float* gwp = variant & 2 ? gw.data() : nullptr;
      std::vector<float> pooled(batch * d), d_rows(index.num_unique * d);
      Buffer<float> gpooled = Upload(RandomVector(pooled.size(), 103));  // overwritten
      Buffer<float> gd_rows = Upload(RandomVector(d_rows.size(), 104));  // overwritten
      cpu_->EmbeddingBagForward(batch, d, rows.data(), index.offsets.data(), index.inverse.data(),
                                w, mean, pooled.data());
      gpu_->EmbeddingBagForward(batch, d, grows.data(), goff.data(), ginv.data(), gwp, mean,
                                gpooled.data());
      cpu_->EmbeddingBagBackward(batch, d, index.num_unique, d_pooled.data(), index.offsets.data(),
                                 index.inverse.data(), w, mean, d_rows.data());
      gpu_->EmbeddingBagBackward(batch, d, index.num_unique, gdp.data(), goff.data(), ginv.data(),
                                 gwp, mean, gd_rows.data());
      if (exact) {
        EXPECT_TRUE(BitIdentical(Download(gpooled), pooled)) << "forward, variant " << variant;
        EXPECT_TRUE(BitIdentical(Download(gd_rows), d_rows)) << "backward, variant " << variant;
      } else {
        EXPECT_TRUE(Close(Download(gpooled), pooled, kFp32Tol)) << "forward, variant " << variant;
        EXPECT_TRUE(Close(Download(gd_rows), d_rows, kFp32Tol)) << "backward, variant " << variant;
      }
    }
  }
};

BagIndex HandMadeBags() {
  // Empty bags first, inside and last; ids repeated within a bag and across bags; row 4 is never
  // looked up (its gradient is 0).
  BagIndex index;
  index.offsets = {0, 0, 3, 5, 5, 9, 10, 10};
  index.inverse = {2, 2, 0, 1, 2, 0, 3, 3, 3, 1};
  index.num_unique = 5;
  return index;
}

TEST_F(CudaEmbeddingBagTest, MatchesCpuWithRepeatedIdsAndEmptyBags) {
  for (int64_t d : {1, 5, 70}) Compare(HandMadeBags(), d, false);
  Compare(RandomBags(512, 12, 97, 105), 16, false);
  Compare(RandomBags(3000, 40, 5000, 106), 64, false);
}

TEST_F(CudaEmbeddingBagTest, BackwardWithoutLookupsIsZero) {
  BagIndex index;
  index.offsets = {0, 0, 0};
  index.num_unique = 3;
  Compare(index, 4, false);
}

// The GPU sums these in the CPU's order with the CPU's operations (see cuda_kernels.h), so the
// results are the same bits, not merely close.
TEST_F(CudaEmbeddingBagTest, OrderedSumsAreTheCpuBits) {
  Compare(HandMadeBags(), 70, true);
  Compare(RandomBags(512, 12, 97, 107), 16, true);
}

TEST_F(CudaBackendTest, OrderedSumsAreTheCpuBits) {
  const int64_t batch = 6, n = 9, d = 33, pairs = n * (n - 1) / 2;
  const std::vector<float> x = RandomVector(batch * n * d, 111);
  const std::vector<float> dz = RandomVector(batch * pairs, 112);
  std::vector<float> out(batch * pairs), dx(x.size());
  Buffer<float> gx = Upload(x), gdz = Upload(dz), gout(gpu_.get(), batch * pairs);
  Buffer<float> gdx(gpu_.get(), batch * n * d);
  cpu_->PairwiseDotsForward(batch, n, d, x.data(), out.data(), pairs);
  gpu_->PairwiseDotsForward(batch, n, d, gx.data(), gout.data(), pairs);
  EXPECT_TRUE(BitIdentical(Download(gout), out));
  cpu_->PairwiseDotsBackward(batch, n, d, x.data(), dz.data(), pairs, dx.data());
  gpu_->PairwiseDotsBackward(batch, n, d, gx.data(), gdz.data(), pairs, gdx.data());
  EXPECT_TRUE(BitIdentical(Download(gdx), dx));
  // BiasGrad over one chunk of rows runs in sample order, as on the CPU.
  const int64_t rows = 200, cols = 7;
  const std::vector<float> dy = RandomVector(rows * cols, 113);
  std::vector<float> db(cols);
  Buffer<float> gdy = Upload(dy), gdb(gpu_.get(), cols);
  cpu_->BiasGrad(rows, cols, dy.data(), db.data());
  gpu_->BiasGrad(rows, cols, gdy.data(), gdb.data());
  EXPECT_TRUE(BitIdentical(Download(gdb), db));
}

// The CTR ops (issue 19) on shapes with odd sizes, rows shorter and longer than a warp (32) and
// not a multiple of it, and batches past one block of 256 threads. n and d are FM's vectors and
// their width, the mixture's experts and its width; softmax has batch rows of d columns.
struct CtrShape {
  int64_t batch, n, d;
};
constexpr CtrShape kCtrShapes[] = {{1, 1, 1},    {5, 7, 9},      {300, 26, 16},
                                   {257, 3, 70}, {1000, 39, 33}, {4, 2, 513}};

std::string Describe(const CtrShape& s) {
  return "batch " + std::to_string(s.batch) + " n " + std::to_string(s.n) + " d " +
         std::to_string(s.d);
}

class CudaCtrOpsTest : public CudaBackendTest {
 protected:
  struct Results {
    std::vector<std::string> names;
    std::vector<std::vector<float>> cpu, gpu;
  };

  // Every CTR op on both backends from the same seeded inputs; each GPU output starts from other
  // values than the CPU's where the op overwrites it.
  Results Run(const CtrShape& s, bool accumulate) {
    Results r;
    auto add = [&](const char* name, const std::vector<float>& cpu, const Buffer<float>& gpu) {
      r.names.emplace_back(name);
      r.cpu.push_back(cpu);
      r.gpu.push_back(Download(gpu));
    };
    const int64_t b = s.batch, n = s.n, d = s.d;
    {
      const int64_t len = b * n * d;
      const std::vector<float> x = RandomVector(len, 131), w = RandomVector(len, 132);
      std::vector<float> y = RandomVector(len, 133);
      Buffer<float> gx = Upload(x), gw = Upload(w), gy = Upload(y);
      cpu_->Mul(len, x.data(), w.data(), y.data(), accumulate);
      gpu_->Mul(len, gx.data(), gw.data(), gy.data(), accumulate);
      add("Mul", y, gy);
    }
    {
      constexpr int64_t out_ld = 2, dz_ld = 3;
      const std::vector<float> x = RandomVector(b * n * d, 134), dz = RandomVector(b * dz_ld, 135);
      std::vector<float> out = RandomVector(b * out_ld, 136);  // the padding stays
      std::vector<float> dx(x.size());
      Buffer<float> gx = Upload(x), gdz = Upload(dz), gout = Upload(out);
      Buffer<float> gdx = Upload(RandomVector(x.size(), 137));
      cpu_->FmForward(b, n, d, x.data(), out.data(), out_ld);
      gpu_->FmForward(b, n, d, gx.data(), gout.data(), out_ld);
      cpu_->FmBackward(b, n, d, x.data(), dz.data(), dz_ld, dx.data());
      gpu_->FmBackward(b, n, d, gx.data(), gdz.data(), dz_ld, gdx.data());
      add("FmForward", out, gout);
      add("FmBackward", dx, gdx);
    }
    {
      std::vector<float> x = RandomVector(b * d, 138, -4.0f, 4.0f);
      for (int64_t c = 0; c < d; ++c) x[c] += 100.0f;  // exp overflows unless the max is taken
      const std::vector<float> dy = RandomVector(b * d, 139);
      std::vector<float> y(x.size()), dx(x.size());
      Buffer<float> gx = Upload(x), gy(gpu_.get(), b * d), gdy = Upload(dy);
      Buffer<float> gdx = Upload(RandomVector(x.size(), 140));
      cpu_->SoftmaxForward(b, d, x.data(), y.data());
      gpu_->SoftmaxForward(b, d, gx.data(), gy.data());
      add("SoftmaxForward", y, gy);
      gpu_->SoftmaxForward(b, d, gx.data(), gx.data());
      EXPECT_TRUE(BitIdentical(Download(gx), r.gpu.back())) << "in place, " << Describe(s);
      // From the CPU's forward on both, so that the backward is compared on its own.
      Buffer<float> gy_cpu = Upload(y);
      cpu_->SoftmaxBackward(b, d, y.data(), dy.data(), dx.data());
      gpu_->SoftmaxBackward(b, d, gy_cpu.data(), gdy.data(), gdx.data());
      add("SoftmaxBackward", dx, gdx);
    }
    {
      const std::vector<float> gate = RandomVector(b * n, 141), x = RandomVector(b * n * d, 142);
      const std::vector<float> dy = RandomVector(b * d, 143);
      std::vector<float> out(b * d), d_gate(b * n), dx = RandomVector(b * n * d, 144);
      Buffer<float> ggate = Upload(gate), gx = Upload(x), gdy = Upload(dy), gdx = Upload(dx);
      Buffer<float> gout = Upload(RandomVector(out.size(), 145));
      Buffer<float> gd_gate = Upload(RandomVector(d_gate.size(), 146));
      cpu_->MixtureForward(b, n, d, gate.data(), x.data(), out.data());
      gpu_->MixtureForward(b, n, d, ggate.data(), gx.data(), gout.data());
      cpu_->MixtureBackward(b, n, d, gate.data(), x.data(), dy.data(), d_gate.data(), dx.data(),
                            accumulate);
      gpu_->MixtureBackward(b, n, d, ggate.data(), gx.data(), gdy.data(), gd_gate.data(),
                            gdx.data(), accumulate);
      add("MixtureForward", out, gout);
      add("MixtureBackward d_gate", d_gate, gd_gate);
      add("MixtureBackward dx", dx, gdx);
    }
    return r;
  }
};

TEST_F(CudaCtrOpsTest, MatchCpu) {
  for (const CtrShape& s : kCtrShapes) {
    for (bool accumulate : {false, true}) {
      const Results r = Run(s, accumulate);
      for (size_t i = 0; i < r.names.size(); ++i) {
        EXPECT_TRUE(Close(r.gpu[i], r.cpu[i], kFp32Tol))
            << r.names[i] << ", " << Describe(s) << ", accumulate " << accumulate;
      }
    }
  }
}

// All but SoftmaxForward (CUDA's expf) sum in the CPU's order with the CPU's operations.
TEST_F(CudaCtrOpsTest, OrderedSumsAreTheCpuBits) {
  for (const CtrShape& s : kCtrShapes) {
    for (bool accumulate : {false, true}) {
      const Results r = Run(s, accumulate);
      for (size_t i = 0; i < r.names.size(); ++i) {
        if (r.names[i] == "SoftmaxForward") continue;
        EXPECT_TRUE(BitIdentical(r.gpu[i], r.cpu[i]))
            << r.names[i] << ", " << Describe(s) << ", accumulate " << accumulate;
      }
    }
  }
}

TEST_F(CudaCtrOpsTest, BitIdenticalFromRunToRun) {
  for (const CtrShape& s : kCtrShapes) {
    const Results first = Run(s, true);
    const Results second = Run(s, true);
    for (size_t i = 0; i < first.names.size(); ++i) {
      EXPECT_TRUE(BitIdentical(first.gpu[i], second.gpu[i]))
          << first.names[i] << ", " << Describe(s);
    }
  }
}

TEST_F(CudaBackendTest, ReductionsAreBitIdenticalFromRunToRun) {
  const BagIndex index = RandomBags(4096, 30, 2000, 121);
  const int64_t batch = 4096, d = 32;
  Buffer<float> gdp = Upload(RandomVector(batch * d, 122));
  Buffer<int64_t> goff = Upload(index.offsets), ginv = Upload(index.inverse);
  const int64_t rows = 5000, cols = 17, n = 10000;
  Buffer<float> gdy = Upload(RandomVector(rows * cols, 123));
  Buffer<float> gz = Upload(RandomVector(n, 124, -5.0f, 5.0f));
  Buffer<float> glabels = Upload(RandomVector(n, 125, 0.0f, 1.0f));
  Buffer<float> ga = Upload(RandomVector(300 * 700, 126)),
                gb = Upload(RandomVector(700 * 200, 127));

  auto run = [&] {
    std::vector<std::vector<float>> results;
    Buffer<float> d_rows(gpu_.get(), index.num_unique * d), db(gpu_.get(), cols);
    Buffer<float> d_logits(gpu_.get(), n), c(gpu_.get(), 300 * 200);
    gpu_->EmbeddingBagBackward(batch, d, index.num_unique, gdp.data(), goff.data(), ginv.data(),
                               nullptr, true, d_rows.data());
    gpu_->BiasGrad(rows, cols, gdy.data(), db.data());
    const float loss =
        gpu_->BceWithLogits(n, gz.data(), glabels.data(), nullptr, 1.0f, d_logits.data());
    gpu_->Gemm(false, false, 300, 200, 700, 1.0f, ga.data(), gb.data(), 0.0f, c.data());
    results.push_back(Download(d_rows));
    results.push_back(Download(db));
    results.push_back(Download(d_logits));
    results.push_back({loss});
    results.push_back(Download(c));
    return results;
  };
  const auto first = run();
  const auto second = run();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(BitIdentical(first[i], second[i])) << i;
}

TEST_F(CudaBackendTest, ErrorsAreStickyAndLaterOpsDoNothing) {
  expect_ok_ = false;
  Buffer<float> b = Upload(std::vector<float>{1.0f, 2.0f, 3.0f});
  EXPECT_EQ(gpu_->Allocate(size_t{1} << 60), nullptr);
  const Status first = gpu_->status();
  EXPECT_EQ(first.code(), StatusCode::kResourceExhausted) << first;
  EXPECT_NE(first.message().find("cudaMalloc"), std::string::npos) << first;

  // Every op is now a no-op: none touches memory, none crashes, the first error stays.
  EXPECT_EQ(gpu_->Allocate(16), nullptr);
  gpu_->Fill(3, 7.0f, b.data());
  gpu_->Gemm(false, false, 8, 8, 8, 1.0f, nullptr, nullptr, 0.0f, nullptr);
  gpu_->EmbeddingBagBackward(4, 4, 4, nullptr, nullptr, nullptr, nullptr, false, nullptr);
  gpu_->FmForward(4, 4, 4, nullptr, nullptr, 1);
  gpu_->SoftmaxForward(4, 4, nullptr, nullptr);
  gpu_->MixtureBackward(4, 4, 4, nullptr, nullptr, nullptr, nullptr, nullptr, false);
  EXPECT_TRUE(std::isnan(gpu_->BceWithLogits(3, b.data(), b.data(), nullptr, 1.0f, nullptr)));
  EXPECT_FALSE(gpu_->AllFinite(3, b.data()));
  std::vector<float> host = {-1.0f, -1.0f, -1.0f};
  gpu_->CopyToHost(host.data(), b.data(), 3 * sizeof(float));
  EXPECT_EQ(host, std::vector<float>(3, -1.0f));
  gpu_->Synchronize();
  EXPECT_EQ(gpu_->status(), first);

  // The failed allocation did not poison the device: a new backend works.
  auto fresh = CreateCudaBackend(0);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  Buffer<float> c((*fresh).get(), 3);
  (*fresh)->Fill(3, 7.0f, c.data());
  (*fresh)->CopyToHost(host.data(), c.data(), 3 * sizeof(float));
  EXPECT_EQ(host, std::vector<float>(3, 7.0f));
  EXPECT_TRUE((*fresh)->status().ok()) << (*fresh)->status();
}

}  // namespace
}  // namespace tandem::device
