// Evaluation metrics: exact ROC AUC (sort-based, ties by midranks, sample weights) and logloss.
// Used by the synthetic generator (teacher AUC) and by evaluation.
#pragma once

#include <span>

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

}  // namespace tandem::data
