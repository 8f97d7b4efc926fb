#include "worker/model/dense_optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tandem::model {
namespace {

bool InUnitInterval(float x) { return x >= 0.0f && x < 1.0f; }

// Decay factor for `after` steps past the warmup.
double DecayFactor(const DenseOptimizerOptions& o, int64_t after) {
  switch (o.decay) {
    case LrDecay::kNone:
      return 1.0;
    case LrDecay::kStep:
      return std::pow(o.decay_rate, static_cast<double>(after / o.decay_steps));
    case LrDecay::kCosine: {
      // std::cos of a step-only argument: identical on every replica of one binary.
      const double progress =
          std::min(1.0, static_cast<double>(after) / static_cast<double>(o.decay_steps));
      const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
      return o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine;
    }
  }
  return 1.0;
}

}  // namespace

Status DenseOptimizerOptions::Validate() const {
  if (!(lr > 0)) return Status::InvalidArgument("dense optimizer: lr must be > 0");
  if (!InUnitInterval(momentum) || !InUnitInterval(beta1) || !InUnitInterval(beta2)) {
    return Status::InvalidArgument("dense optimizer: momentum and betas must be in [0, 1)");
  }
  if (!(eps > 0)) return Status::InvalidArgument("dense optimizer: eps must be > 0");
  if (!(weight_decay >= 0) || !(adagrad_initial_accumulator >= 0)) {
    return Status::InvalidArgument("dense optimizer: weight decay / accumulator must be >= 0");
  }
  if (warmup_steps < 0 || decay_steps < 1) {
    return Status::InvalidArgument("dense optimizer: warmup >= 0 and decay_steps >= 1");
  }
  if (!(decay_rate > 0 && decay_rate <= 1) || !(min_lr_ratio >= 0 && min_lr_ratio <= 1)) {
    return Status::InvalidArgument("dense optimizer: decay_rate in (0, 1], min_lr in [0, 1]");
  }
  return Status::Ok();
}

StatusOr<DenseOptimizerOptions> DenseOptimizerOptionsFromConfig(const config::TrainConfig& train) {
  DenseOptimizerOptions options;
  if (train.dense_optimizer == "sgd") {
    options.kind = DenseOptimizerKind::kSgd;
  } else if (train.dense_optimizer == "adam") {
    options.kind = DenseOptimizerKind::kAdam;
  } else if (train.dense_optimizer == "adamw") {
    options.kind = DenseOptimizerKind::kAdamW;
  } else if (train.dense_optimizer == "adagrad") {
    options.kind = DenseOptimizerKind::kAdagrad;
  } else {
    return Status::InvalidArgument("unknown train.dense_optimizer '" + train.dense_optimizer +
                                   "' (sgd | adam | adamw | adagrad)");
  }
  options.lr = train.dense_lr;
  options.momentum = static_cast<float>(train.dense_momentum);
  options.weight_decay = static_cast<float>(train.dense_weight_decay);
  options.warmup_steps = train.lr_warmup_steps;
  options.decay = train.lr_decay == "step"     ? LrDecay::kStep
                  : train.lr_decay == "cosine" ? LrDecay::kCosine
                                               : LrDecay::kNone;
  options.decay_steps = train.lr_decay_steps;
  options.decay_rate = train.lr_decay_rate;
  TANDEM_RETURN_IF_ERROR(options.Validate());
  return options;
}

double ScheduledLearningRate(const DenseOptimizerOptions& o, int64_t step) {
  if (step < o.warmup_steps) {
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  }
  return o.lr * DecayFactor(o, step - o.warmup_steps);
}

StatusOr<std::unique_ptr<DenseOptimizer>> DenseOptimizer::Create(
    const DenseOptimizerOptions& options, int64_t num_params) {
  TANDEM_RETURN_IF_ERROR(options.Validate());
  if (num_params < 0) return Status::InvalidArgument("dense optimizer: num_params < 0");
  return std::unique_ptr<DenseOptimizer>(new DenseOptimizer(options, num_params));
}

DenseOptimizer::DenseOptimizer(const DenseOptimizerOptions& options, int64_t num_params)
    : options_(options), num_params_(num_params) {
  const auto n = static_cast<size_t>(num_params);
  switch (options.kind) {
    case DenseOptimizerKind::kSgd:
      state_.assign(n, 0.0f);
      break;
    case DenseOptimizerKind::kAdam:
    case DenseOptimizerKind::kAdamW:
      state_.assign(2 * n + 2, 0.0f);
      state_[2 * n] = 1.0f;      // beta1^0
      state_[2 * n + 1] = 1.0f;  // beta2^0
      break;
    case DenseOptimizerKind::kAdagrad:
      state_.assign(n, options.adagrad_initial_accumulator);
      break;
  }
}

Status DenseOptimizer::LoadState(std::span<const float> state) {
  if (state.size() != state_.size()) {
    return Status::InvalidArgument("dense optimizer: state has " + std::to_string(state.size()) +
                                   " floats, expected " + std::to_string(state_.size()));
  }
  std::copy(state.begin(), state.end(), state_.begin());
  return Status::Ok();
}

void DenseOptimizer::Step(int64_t step, std::span<float> params, std::span<const float> grads) {
  const auto lr = static_cast<float>(ScheduledLearningRate(options_, step));
  switch (options_.kind) {
    case DenseOptimizerKind::kSgd:
      return SgdStep(lr, params, grads);
    case DenseOptimizerKind::kAdam:
    case DenseOptimizerKind::kAdamW:
      return AdamStep(lr, params, grads);
    case DenseOptimizerKind::kAdagrad:
      return AdagradStep(lr, params, grads);
  }
}

void DenseOptimizer::SgdStep(float lr, std::span<float> params, std::span<const float> grads) {
  const float mu = options_.momentum;
  const float wd = options_.weight_decay;
  float* buf = state_.data();
  for (int64_t i = 0; i < num_params_; ++i) {
    const float g = grads[i] + wd * params[i];
    buf[i] = mu * buf[i] + g;
    params[i] -= lr * buf[i];
  }
}

void DenseOptimizer::AdamStep(float lr, std::span<float> params, std::span<const float> grads) {
  const DenseOptimizerOptions& o = options_;
  float* m = state_.data();
  float* v = m + num_params_;
  float* beta_pow = v + num_params_;
  beta_pow[0] *= o.beta1;  // running products: beta^t without pow (PROTOCOLS §5.6)
  beta_pow[1] *= o.beta2;
  const float c1 = 1.0f / (1.0f - beta_pow[0]);
  const float c2 = 1.0f / (1.0f - beta_pow[1]);
  const bool decoupled = o.kind == DenseOptimizerKind::kAdamW;
  const float l2 = decoupled ? 0.0f : o.weight_decay;
  const float shrink = decoupled ? 1.0f - lr * o.weight_decay : 1.0f;
  for (int64_t i = 0; i < num_params_; ++i) {
    const float g = grads[i] + l2 * params[i];
    m[i] = o.beta1 * m[i] + (1.0f - o.beta1) * g;
    v[i] = o.beta2 * v[i] + (1.0f - o.beta2) * (g * g);
    const float update = (m[i] * c1) / (std::sqrt(v[i] * c2) + o.eps);
    params[i] = shrink * params[i] - lr * update;
  }
}

void DenseOptimizer::AdagradStep(float lr, std::span<float> params, std::span<const float> grads) {
  const float wd = options_.weight_decay;
  const float eps = options_.eps;
  float* acc = state_.data();
  for (int64_t i = 0; i < num_params_; ++i) {
    const float g = grads[i] + wd * params[i];
    acc[i] += g * g;
    params[i] -= lr * g / (std::sqrt(acc[i]) + eps);
  }
}

}  // namespace tandem::model
