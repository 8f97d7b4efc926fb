#include "worker/data/auc.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace tandem::data {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
double AucImpl(std::span<const T> scores, std::span<const float> labels,
               std::span<const float> weights) {
  const size_t n = scores.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  // Walk groups of equal score in ascending order: each positive beats the negative weight
  // below its group and ties half of the negative weight inside it.
  double neg_below = 0, pos_total = 0, area = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    double pos = 0, neg = 0;
    for (; j < n && scores[order[j]] == scores[order[i]]; ++j) {
      const uint32_t k = order[j];
      const double w = weights.empty() ? 1.0 : weights[k];
      (labels[k] > 0.5f ? pos : neg) += w;
    }
    area += pos * (neg_below + 0.5 * neg);
    neg_below += neg;
    pos_total += pos;
    i = j;
  }
  const double denom = pos_total * neg_below;
  return denom > 0 ? area / denom : kNaN;
}

}  // namespace

double Auc(std::span<const double> scores, std::span<const float> labels,
           std::span<const float> weights) {
  return AucImpl(scores, labels, weights);
}

double Auc(std::span<const float> scores, std::span<const float> labels,
           std::span<const float> weights) {
  return AucImpl(scores, labels, weights);
}

AucHistogram::AucHistogram() : counts_(2 * kBuckets, 0.0) {}

size_t AucHistogram::Bucket(double score) {
  if (!(score > 0)) return 0;  // also NaN: a NaN prediction must not index out of range
  if (score >= 1) return kBuckets - 1;
  // score * kBuckets is exact (a power of two); min() guards scores that round up to 1.
  return std::min(static_cast<size_t>(score * static_cast<double>(kBuckets)), kBuckets - 1);
}

void AucHistogram::Add(double score, float label, float weight) {
  counts_[(label > 0.5f ? 0 : kBuckets) + Bucket(score)] += weight;
}

void AucHistogram::Merge(const AucHistogram& other) {
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
}

void AucHistogram::Clear() { std::fill(counts_.begin(), counts_.end(), 0.0); }

// The same walk as AucImpl with buckets as the groups of equal score, so data whose distinct
// scores land in distinct buckets gets the exact AUC, bit for bit.
double AucHistogram::Auc() const {
  const double* pos = counts_.data();
  const double* neg = counts_.data() + kBuckets;
  double neg_below = 0, pos_total = 0, area = 0;
  for (size_t b = 0; b < kBuckets; ++b) {
    if (pos[b] == 0 && neg[b] == 0) continue;
    area += pos[b] * (neg_below + 0.5 * neg[b]);
    neg_below += neg[b];
    pos_total += pos[b];
  }
  const double denom = pos_total * neg_below;
  return denom > 0 ? area / denom : kNaN;
}

double LogLoss(std::span<const double> probs, std::span<const float> labels,
               std::span<const float> weights) {
  constexpr double kEps = 1e-7;
  double sum = 0, total = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    const double p = std::clamp(probs[i], kEps, 1 - kEps);
    sum -= w * (labels[i] > 0.5f ? std::log(p) : std::log(1 - p));
    total += w;
  }
  return total > 0 ? sum / total : kNaN;
}

}  // namespace tandem::data
