// Optimizers for the dense parameters, over the model's flat buffers (dlrm.h): SGD with
// momentum, Adam, AdamW and Adagrad, with learning-rate warmup and decay. Every replica applies
// the same update to the same all-reduced gradient, so every factor comes from the step count
// or from state (a running product for beta^t), never from wall time (PROTOCOLS §5.6).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"

namespace tandem::model {

enum class DenseOptimizerKind { kSgd, kAdam, kAdamW, kAdagrad };
enum class LrDecay { kNone, kStep, kCosine };

struct DenseOptimizerOptions {
  DenseOptimizerKind kind = DenseOptimizerKind::kAdam;
  double lr = 0.001;          // peak learning rate, > 0
  float momentum = 0.9f;      // SGD: buf = momentum * buf + g (0 = plain SGD), in [0, 1)
  float beta1 = 0.9f;         // Adam/AdamW, in [0, 1)
  float beta2 = 0.999f;       // Adam/AdamW, in [0, 1)
  float eps = 1e-8f;          // Adam/AdamW/Adagrad denominator term, > 0
  float weight_decay = 0.0f;  // AdamW: decoupled (p -= lr*wd*p); others: L2 added to g; >= 0
  float adagrad_initial_accumulator = 0.0f;  // >= 0
  // Schedule: linear warmup lr * (s+1)/W for s < W, then decay.
  int64_t warmup_steps = 0;  // W >= 0
  LrDecay decay = LrDecay::kNone;
  int64_t decay_steps = 1;    // step: period; cosine: length of the cosine after warmup; >= 1
  double decay_rate = 0.1;    // step: lr * rate^floor((s-W)/period), in (0, 1]
  double min_lr_ratio = 0.0;  // cosine: floor as a fraction of lr, in [0, 1]

  Status Validate() const;
};

// train.dense_optimizer (sgd | adam | adagrad) and train.dense_lr; the rest keep defaults.
StatusOr<DenseOptimizerOptions> DenseOptimizerOptionsFromConfig(const config::TrainConfig& train);

// The learning rate of global step `step` (0-based): a function of the step only.
double ScheduledLearningRate(const DenseOptimizerOptions& options, int64_t step);

// Thread-safety: requires external synchronization.
class DenseOptimizer {
 public:
  // InvalidArgument for invalid options or num_params < 0.
  static StatusOr<std::unique_ptr<DenseOptimizer>> Create(const DenseOptimizerOptions& options,
                                                          int64_t num_params);

  // Applies the update of global step `step` (0-based; the lr comes from it) in place.
  // REQUIRES: params.size() == grads.size() == num_params.
  void Step(int64_t step, std::span<float> params, std::span<const float> grads);

  // The whole optimizer state as one flat buffer, for checkpoints. Layout: sgd momentum[n];
  // adam/adamw m[n], v[n], beta1^t, beta2^t; adagrad accumulator[n].
  std::span<const float> state() const { return state_; }
  // InvalidArgument when the size does not match this optimizer's layout.
  Status LoadState(std::span<const float> state);

  const DenseOptimizerOptions& options() const { return options_; }

 private:
  DenseOptimizer(const DenseOptimizerOptions& options, int64_t num_params);

  void SgdStep(float lr, std::span<float> params, std::span<const float> grads);
  void AdamStep(float lr, std::span<float> params, std::span<const float> grads);
  void AdagradStep(float lr, std::span<float> params, std::span<const float> grads);

  DenseOptimizerOptions options_;
  int64_t num_params_;
  std::vector<float> state_;
};

}  // namespace tandem::model
