// Evaluation metrics: exact ROC AUC (sort-based, ties by midranks, sample weights) and logloss.
// Used by the synthetic generator (teacher AUC) and by evaluation.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace tandem::data {

// Exact weighted AUC: the probability that a random positive scores above a random negative,
// a tie counting one half. Labels > 0.5 are positives. `weights` empty means all 1; weight-0
// samples do not count. Returns NaN when either class has zero total weight.
double Auc(std::span<const double> scores, std::span<const float> labels,
           std::span<const float> weights = {});
double Auc(std::span<const float> scores, std::span<const float> labels,
           std::span<const float> weights = {});

// Weighted mean binary cross-entropy of probabilities, clamped to [1e-7, 1 - 1e-7].
// Returns NaN when the total weight is zero.
double LogLoss(std::span<const double> probs, std::span<const float> labels,
               std::span<const float> weights = {});

// Approximate weighted AUC for sets too large to sort, and mergeable across workers: scores are
// probabilities binned into kBuckets equal buckets over [0, 1] (out-of-range scores clamp to
// the end buckets, NaN goes to bucket 0), positive and negative weight summed per bucket, and
// two samples in one bucket count as a tie (one half). The error is at most half the weighted
// fraction of positive-negative pairs that share a bucket: ~1e-5 for well-spread scores.
// Thread-compatible.
class AucHistogram {
 public:
  static constexpr size_t kBuckets = size_t{1} << 16;

  AucHistogram();
  // Same conventions as Auc: label > 0.5 is a positive.
  void Add(double score, float label, float weight = 1);
  // Adds another histogram's weights (e.g. another worker's), as if its samples were added here.
  void Merge(const AucHistogram& other);
  // The AUC of everything added; NaN when either class has zero total weight.
  double Auc() const;
  void Clear();

  // All bucket weights as one flat array: positives of buckets [0, kBuckets), then negatives.
  // Exposed so that a collective can sum histograms in place (an all-reduce of 2 * kBuckets
  // doubles) without a Merge per peer.
  std::span<const double> counts() const { return counts_; }
  std::span<double> mutable_counts() { return counts_; }

  static size_t Bucket(double score);

 private:
  std::vector<double> counts_;  // [2 * kBuckets]
};

}  // namespace tandem::data
