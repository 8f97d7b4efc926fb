#include "worker/model/dense_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "worker/model/test_util.h"

namespace tandem::model {
namespace {

using testing::RandomVector;

constexpr int64_t kParams = 16;
constexpr int kSteps = 100;

// Textbook updates in double, with beta^t from std::pow: what the float version must track.
struct Reference {
  DenseOptimizerOptions o;
  std::vector<double> p, a, b;  // params; momentum / m / accumulator; v

  Reference(const DenseOptimizerOptions& options, const std::vector<float>& init)
      : o(options), p(init.begin(), init.end()), a(init.size(), 0.0), b(init.size(), 0.0) {
    if (o.kind == DenseOptimizerKind::kAdagrad)
      a.assign(init.size(), o.adagrad_initial_accumulator);
  }

  void Step(int64_t step, const std::vector<float>& grads) {
    const double lr = ScheduledLearningRate(o, step);
    const double t = static_cast<double>(step + 1);
    for (size_t i = 0; i < p.size(); ++i) {
      const bool adamw = o.kind == DenseOptimizerKind::kAdamW;
      const double g = grads[i] + (adamw ? 0.0 : o.weight_decay * p[i]);
      switch (o.kind) {
        case DenseOptimizerKind::kSgd:
          a[i] = o.momentum * a[i] + g;
          p[i] -= lr * a[i];
          break;
        case DenseOptimizerKind::kAdam:
        case DenseOptimizerKind::kAdamW: {
          a[i] = o.beta1 * a[i] + (1 - o.beta1) * g;
          b[i] = o.beta2 * b[i] + (1 - o.beta2) * g * g;
          const double m_hat = a[i] / (1 - std::pow(double{o.beta1}, t));
          const double v_hat = b[i] / (1 - std::pow(double{o.beta2}, t));
          if (adamw) p[i] -= lr * o.weight_decay * p[i];
          p[i] -= lr * m_hat / (std::sqrt(v_hat) + o.eps);
          break;
        }
        case DenseOptimizerKind::kAdagrad:
          a[i] += g * g;
          p[i] -= lr * g / (std::sqrt(a[i]) + o.eps);
          break;
      }
    }
  }
};

void ExpectTracksReference(const DenseOptimizerOptions& options) {
  std::vector<float> params = RandomVector(kParams, 1);
  Reference ref(options, params);
  auto opt = DenseOptimizer::Create(options, kParams);
  ASSERT_TRUE(opt.ok()) << opt.status();
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float> grads = RandomVector(kParams, 100 + s, -0.5f, 0.6f);
    (*opt)->Step(s, params, grads);
    ref.Step(s, grads);
  }
  for (int64_t i = 0; i < kParams; ++i) {
    EXPECT_NEAR(params[i], ref.p[i], 1e-4 * (1 + std::fabs(ref.p[i]))) << i;
  }
}

DenseOptimizerOptions Options(DenseOptimizerKind kind, double lr, float weight_decay) {
  DenseOptimizerOptions o;
  o.kind = kind;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.warmup_steps = 10;
  o.decay = LrDecay::kCosine;
  o.decay_steps = 80;
  o.min_lr_ratio = 0.1;
  return o;
}

TEST(DenseOptimizerTest, SgdMomentumTracksReference) {
  ExpectTracksReference(Options(DenseOptimizerKind::kSgd, 0.05, 0.01f));
}
TEST(DenseOptimizerTest, AdamTracksReference) {
  ExpectTracksReference(Options(DenseOptimizerKind::kAdam, 0.01, 0.01f));
}
TEST(DenseOptimizerTest, AdamWTracksReference) {
  ExpectTracksReference(Options(DenseOptimizerKind::kAdamW, 0.01, 0.1f));
}
TEST(DenseOptimizerTest, AdagradTracksReference) {
  DenseOptimizerOptions o = Options(DenseOptimizerKind::kAdagrad, 0.1, 0.0f);
  o.adagrad_initial_accumulator = 0.1f;
  o.decay = LrDecay::kStep;
  o.decay_steps = 30;
  o.decay_rate = 0.5;
  ExpectTracksReference(o);
}

TEST(DenseOptimizerTest, ScheduleWarmsUpThenDecays) {
  DenseOptimizerOptions o;
  o.lr = 1.0;
  o.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(o, 0), 0.25);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(o, 3), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(o, 1000), 1.0);
  o.decay = LrDecay::kStep;
  o.decay_steps = 10;
  o.decay_rate = 0.5;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(o, 13), 1.0);  // 9 steps past warmup
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(o, 14), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(o, 24), 0.25);
  o.decay = LrDecay::kCosine;
  o.min_lr_ratio = 0.2;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(o, 4), 1.0);
  EXPECT_NEAR(ScheduledLearningRate(o, 9), 0.2 + 0.8 * 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(o, 14), 0.2);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(o, 500), 0.2);
}

TEST(DenseOptimizerTest, StateRoundTripResumesBitIdentically) {
  DenseOptimizerOptions o;  // adam: exercises m, v and the beta products
  std::vector<float> straight = RandomVector(kParams, 3);
  std::vector<float> resumed = straight;
  auto a = DenseOptimizer::Create(o, kParams);
  auto b = DenseOptimizer::Create(o, kParams);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int s = 0; s < 20; ++s) {
    const std::vector<float> grads = RandomVector(kParams, 200 + s);
    (*a)->Step(s, straight, grads);
    if (s < 10) (*b)->Step(s, resumed, grads);
    if (s == 9) {
      const std::vector<float> saved((*b)->state().begin(), (*b)->state().end());
      b = DenseOptimizer::Create(o, kParams);
      ASSERT_TRUE((*b)->LoadState(saved).ok());
    }
    if (s >= 10) (*b)->Step(s, resumed, grads);
  }
  EXPECT_EQ(std::memcmp(straight.data(), resumed.data(), kParams * sizeof(float)), 0);
  EXPECT_EQ((*a)->state().size(), 2 * kParams + 2);
  EXPECT_TRUE((*a)->LoadState(std::vector<float>(3)).IsInvalidArgument());
}

TEST(DenseOptimizerTest, OptionsFromConfigAndValidation) {
  config::TrainConfig train;
  train.dense_optimizer = "adagrad";
  train.dense_lr = 0.5;
  auto o = DenseOptimizerOptionsFromConfig(train);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->kind, DenseOptimizerKind::kAdagrad);
  EXPECT_EQ(o->lr, 0.5);
  train.dense_optimizer = "lamb";
  EXPECT_TRUE(DenseOptimizerOptionsFromConfig(train).status().IsInvalidArgument());
  DenseOptimizerOptions bad;
  bad.beta2 = 1.0f;
  EXPECT_TRUE(DenseOptimizer::Create(bad, 4).status().IsInvalidArgument());
  bad = DenseOptimizerOptions();
  bad.lr = 0;
  EXPECT_TRUE(bad.Validate().IsInvalidArgument());
}

}  // namespace
}  // namespace tandem::model
