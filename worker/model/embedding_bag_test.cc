#include "worker/model/embedding_bag.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "worker/model/test_util.h"

namespace tandem::model {
namespace {

using testing::CheckGradient;
using testing::MakeCpuBackend;
using testing::Project;
using testing::RandomVector;

// Three samples over 3 unique rows: {0, 2, 0}, {}, {2, 1}; row 0 is repeated within a bag and
// row 2 across bags.
struct Fixture {
  std::vector<int64_t> offsets = {0, 3, 3, 5};
  std::vector<int64_t> inverse = {0, 2, 0, 2, 1};
  BagIndex index() const { return {3, offsets.data(), inverse.data(), 3}; }
};

TEST(EmbeddingBagTest, SumAndMeanPoolingForward) {
  auto be = MakeCpuBackend();
  Fixture fx;
  const std::vector<float> rows = {1, 2, 10, 20, 100, 200};  // d = 2
  std::vector<float> pooled(6);
  EmbeddingBag::Forward(be.get(), fx.index(), 2, Pooling::kSum, rows.data(), pooled.data());
  EXPECT_EQ(pooled, (std::vector<float>{102, 204, 0, 0, 110, 220}));
  EmbeddingBag::Forward(be.get(), fx.index(), 2, Pooling::kMean, rows.data(), pooled.data());
  EXPECT_EQ(pooled, (std::vector<float>{102.0f / 3 * 1, 204.0f * (1.0f / 3), 0, 0, 55, 110}));
}

TEST(EmbeddingBagTest, BackwardOverwritesAndScattersRepeatedIds) {
  auto be = MakeCpuBackend();
  Fixture fx;
  const std::vector<float> d_pooled = {1, 2, 3, 4, 5, 6};
  std::vector<float> d_rows(6, -7.0f);  // overwritten, not accumulated into
  EmbeddingBag::Backward(be.get(), fx.index(), 2, Pooling::kSum, d_pooled.data(), d_rows.data());
  EXPECT_EQ(d_rows, (std::vector<float>{2, 4, 5, 6, 6, 8}));
}

TEST(EmbeddingBagTest, BackwardSumsInSampleOrder) {
  auto be = MakeCpuBackend();
  // Three single-lookup bags of row 0. In float, (1 + 1e8) - 1e8 = 0 (sample order) while
  // (-1e8 + 1e8) + 1 = 1 (reverse order), so the result shows the order used.
  const std::vector<int64_t> offsets = {0, 1, 2, 3};
  const std::vector<int64_t> inverse = {0, 0, 0};
  const std::vector<float> d_pooled = {1.0f, 1e8f, -1e8f};
  float d_row = -7.0f;
  EmbeddingBag::Backward(be.get(), {3, offsets.data(), inverse.data(), 1}, 1, Pooling::kSum,
                         d_pooled.data(), &d_row);
  EXPECT_EQ(d_row, 0.0f);
}

void CheckBagGradient(Pooling pooling) {
  auto be = MakeCpuBackend();
  Fixture fx;
  constexpr int64_t kDim = 4;
  std::vector<float> rows = RandomVector(3 * kDim, 31);
  const std::vector<float> r = RandomVector(3 * kDim, 32);
  std::vector<float> pooled(3 * kDim), d_rows(3 * kDim);
  auto f = [&] {
    EmbeddingBag::Forward(be.get(), fx.index(), kDim, pooling, rows.data(), pooled.data());
    return Project(r, pooled.data());
  };
  EmbeddingBag::Backward(be.get(), fx.index(), kDim, pooling, r.data(), d_rows.data());
  EXPECT_EQ(CheckGradient(f, rows.data(), rows.size(), d_rows), 0);
}

TEST(EmbeddingBagTest, SumGradientMatchesFiniteDifferences) { CheckBagGradient(Pooling::kSum); }
TEST(EmbeddingBagTest, MeanGradientMatchesFiniteDifferences) { CheckBagGradient(Pooling::kMean); }

TEST(EmbeddingBagTest, ValidateRejectsBadIndices) {
  Fixture fx;
  EXPECT_TRUE(EmbeddingBag::Validate(fx.index()).ok());
  Fixture out_of_range;
  out_of_range.inverse[1] = 3;
  EXPECT_TRUE(EmbeddingBag::Validate(out_of_range.index()).IsInvalidArgument());
  Fixture decreasing;
  decreasing.offsets = {0, 3, 2, 5};
  EXPECT_TRUE(EmbeddingBag::Validate(decreasing.index()).IsInvalidArgument());
  Fixture bad_start;
  bad_start.offsets[0] = 1;
  EXPECT_TRUE(EmbeddingBag::Validate(bad_start.index()).IsInvalidArgument());
}

}  // namespace
}  // namespace tandem::model
