#include "worker/data/auc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tandem::data {
namespace {

TEST(Auc, HandComputedWithTies) {
  // Positives at scores 0.8, 0.4, 0.4; negatives at 0.4, 0.2, 0.9.
  // Pairs (pos beats neg): 0.8: beats 0.4, 0.2, loses 0.9 -> 2; each 0.4: tie 0.4 (0.5), beats
  // 0.2 (1), loses 0.9 -> 1.5. Total 5 / 9.
  const std::vector<double> scores = {0.8, 0.4, 0.4, 0.4, 0.2, 0.9};
  const std::vector<float> labels = {1, 1, 1, 0, 0, 0};
  EXPECT_DOUBLE_EQ(Auc(scores, labels), 5.0 / 9.0);
}

TEST(Auc, WeightsCountAsRepeatedSamples) {
  const std::vector<double> scores = {0.1, 0.5, 0.5, 0.9};
  const std::vector<float> labels = {0, 1, 0, 1};
  const std::vector<float> weights = {2, 1, 1, 0};
  // Positive 0.5 (w 1) vs negatives 0.1 (w 2, beats) and 0.5 (w 1, tie): (2 + 0.5) / 3.
  EXPECT_DOUBLE_EQ(Auc(scores, labels, weights), 2.5 / 3.0);
  const std::vector<double> repeated = {0.1, 0.1, 0.5, 0.5};
  EXPECT_DOUBLE_EQ(Auc(repeated, std::vector<float>{0, 0, 1, 0}), 2.5 / 3.0);
}

TEST(Auc, PerfectInvertedConstantAndDegenerate) {
  const std::vector<float> labels = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(Auc(std::vector<double>{1, 2, 3, 4}, labels), 1.0);
  EXPECT_DOUBLE_EQ(Auc(std::vector<double>{4, 3, 2, 1}, labels), 0.0);
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{7, 7, 7, 7}, labels), 0.5);
  EXPECT_TRUE(std::isnan(Auc(std::vector<double>{1, 2}, std::vector<float>{1, 1})));
}

TEST(LogLoss, HandComputed) {
  const std::vector<double> p = {0.5, 0.25, 1.0};
  const std::vector<float> labels = {1, 0, 1};
  EXPECT_NEAR(LogLoss(p, labels), (std::log(2.0) - std::log(0.75) + 1e-7) / 3, 1e-9);
  EXPECT_NEAR(LogLoss(p, labels, std::vector<float>{1, 0, 0}), std::log(2.0), 1e-12);
}

}  // namespace
}  // namespace tandem::data
