#include "worker/data/auc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
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

AucHistogram Histogram(const std::vector<double>& scores, const std::vector<float>& labels,
                       const std::vector<float>& weights, size_t begin, size_t end) {
  AucHistogram h;
  for (size_t i = begin; i < end; ++i) h.Add(scores[i], labels[i], weights[i]);
  return h;
}

TEST(AucHistogram, ExactWhenScoresFallInDistinctBuckets) {
  // 3000 distinct buckets, some holding two samples of the same score (an exact tie), with
  // weights: the histogram's groups are then exactly Auc's groups of equal score.
  std::mt19937_64 rng(7);
  std::vector<size_t> buckets(AucHistogram::kBuckets);
  for (size_t i = 0; i < buckets.size(); ++i) buckets[i] = i;
  std::shuffle(buckets.begin(), buckets.end(), rng);
  std::vector<double> scores;
  std::vector<float> labels, weights;
  for (int i = 0; i < 3000; ++i) {
    const double score = (static_cast<double>(buckets[i]) + 0.25) / AucHistogram::kBuckets;
    for (int k = 0; k < 1 + (i % 3 == 0); ++k) {
      scores.push_back(score);
      labels.push_back(static_cast<float>(rng() % 2));
      weights.push_back(static_cast<float>(1 + rng() % 4) / 2);
    }
  }
  const AucHistogram h = Histogram(scores, labels, weights, 0, scores.size());
  EXPECT_DOUBLE_EQ(h.Auc(), Auc(scores, labels, weights));
  EXPECT_DOUBLE_EQ(Histogram({0.1, 0.9}, {0, 1}, {1, 1}, 0, 2).Auc(), 1.0);
  EXPECT_TRUE(std::isnan(AucHistogram().Auc()));
}

TEST(AucHistogram, CloseToExactOnManyRandomScoresAndMergesExactly) {
  // Labels drawn from the score itself so the AUC is far from 0.5; scores near the ends and out
  // of range exercise the clamping.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const size_t n = 100000;
  std::vector<double> scores(n);
  std::vector<float> labels(n), weights(n);
  for (size_t i = 0; i < n; ++i) {
    scores[i] = unit(rng);
    labels[i] = unit(rng) < scores[i] ? 1.0f : 0.0f;
    weights[i] = static_cast<float>(1 + rng() % 3);  // integers: every sum is exact
  }
  scores[0] = 1.0;
  scores[1] = 1.5;
  scores[2] = -0.5;
  const AucHistogram whole = Histogram(scores, labels, weights, 0, n);
  const double exact = Auc(scores, labels, weights);
  EXPECT_GT(exact, 0.7);
  EXPECT_NEAR(whole.Auc(), exact, 1e-3);

  AucHistogram merged = Histogram(scores, labels, weights, 0, n / 2);
  merged.Merge(Histogram(scores, labels, weights, n / 2, n));
  EXPECT_TRUE(std::equal(merged.counts().begin(), merged.counts().end(), whole.counts().begin(),
                         whole.counts().end()));
  EXPECT_EQ(merged.Auc(), whole.Auc());
}

TEST(LogLoss, HandComputed) {
  const std::vector<double> p = {0.5, 0.25, 1.0};
  const std::vector<float> labels = {1, 0, 1};
  EXPECT_NEAR(LogLoss(p, labels), (std::log(2.0) - std::log(0.75) + 1e-7) / 3, 1e-9);
  EXPECT_NEAR(LogLoss(p, labels, std::vector<float>{1, 0, 0}), std::log(2.0), 1e-12);
}

}  // namespace
}  // namespace tandem::data
