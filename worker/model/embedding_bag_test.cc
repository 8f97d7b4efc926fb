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
  std::vector<float> weights = {0.5f, 2.0f, -1.5f, 3.0f, 0.25f};
  BagIndex index() const { return {3, offsets.data(), inverse.data(), 3}; }
  BagIndex weighted() const { return {3, offsets.data(), inverse.data(), 3, weights.data()}; }
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

void CheckBagGradient(Pooling pooling, bool weighted) {
  auto be = MakeCpuBackend();
  Fixture fx;
  const BagIndex index = weighted ? fx.weighted() : fx.index();
  constexpr int64_t kDim = 4;
  std::vector<float> rows = RandomVector(3 * kDim, 31);
  const std::vector<float> r = RandomVector(3 * kDim, 32);
  std::vector<float> pooled(3 * kDim), d_rows(3 * kDim);
  auto f = [&] {
    EmbeddingBag::Forward(be.get(), index, kDim, pooling, rows.data(), pooled.data());
    return Project(r, pooled.data());
  };
  EmbeddingBag::Backward(be.get(), index, kDim, pooling, r.data(), d_rows.data());
  EXPECT_EQ(CheckGradient(f, rows.data(), rows.size(), d_rows), 0);
}

// The fixture has an empty bag, an id repeated within a bag and one repeated across bags.
TEST(EmbeddingBagTest, SumGradientMatchesFiniteDifferences) {
  CheckBagGradient(Pooling::kSum, false);
}
TEST(EmbeddingBagTest, MeanGradientMatchesFiniteDifferences) {
  CheckBagGradient(Pooling::kMean, false);
}
TEST(EmbeddingBagTest, WeightedSumGradientMatchesFiniteDifferences) {
  CheckBagGradient(Pooling::kSum, true);
}
TEST(EmbeddingBagTest, WeightedMeanGradientMatchesFiniteDifferences) {
  CheckBagGradient(Pooling::kMean, true);
}

TEST(EmbeddingBagTest, WeightedPoolingScalesEachIdByItsWeight) {
  auto be = MakeCpuBackend();
  Fixture fx;
  const std::vector<float> rows = {1, 2, 10, 20, 100, 200};  // d = 2
  std::vector<float> pooled(6);
  EmbeddingBag::Forward(be.get(), fx.weighted(), 2, Pooling::kSum, rows.data(), pooled.data());
  // Sample 0: 0.5 * row0 + 2 * row2 - 1.5 * row0; sample 2: 3 * row2 + 0.25 * row1.
  EXPECT_EQ(pooled, (std::vector<float>{199, 398, 0, 0, 302.5f, 605}));
  const std::vector<float> d_pooled = {1, 2, 3, 4, 5, 6};
  std::vector<float> d_rows(6);
  EmbeddingBag::Backward(be.get(), fx.weighted(), 2, Pooling::kSum, d_pooled.data(), d_rows.data());
  // row0: (0.5 - 1.5) * d0; row1: 0.25 * d2; row2: 2 * d0 + 3 * d2.
  EXPECT_EQ(d_rows, (std::vector<float>{-1, -2, 1.25f, 1.5f, 17, 22}));
}

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
