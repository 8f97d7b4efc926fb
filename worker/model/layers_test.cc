#include "worker/model/layers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "worker/model/interaction.h"
#include "worker/model/test_util.h"

namespace tandem::model {
namespace {

using testing::CheckGradient;
using testing::MakeCpuBackend;
using testing::Project;
using testing::RandomAwayFromZero;
using testing::RandomVector;

TEST(LinearTest, GradientsMatchFiniteDifferences) {
  auto be = MakeCpuBackend();
  constexpr int64_t kBatch = 4, kIn = 5, kOut = 3;
  Linear layer(kIn, kOut);
  std::vector<float> params = RandomVector(layer.num_params(), 1);
  std::vector<float> grads(params.size());
  layer.Bind(params.data(), grads.data());
  std::vector<float> x = RandomVector(kBatch * kIn, 2);
  const std::vector<float> r = RandomVector(kBatch * kOut, 3);
  std::vector<float> y(kBatch * kOut), dx(kBatch * kIn);
  auto f = [&] {
    layer.Forward(be.get(), kBatch, x.data(), y.data());
    return Project(r, y.data());
  };
  f();
  layer.Backward(be.get(), kBatch, x.data(), r.data(), dx.data());
  EXPECT_EQ(CheckGradient(f, x.data(), x.size(), dx), 0);
  EXPECT_EQ(CheckGradient(f, params.data(), params.size(), grads), 0);
}

TEST(LinearTest, ForwardMatchesNaiveLoops) {
  auto be = MakeCpuBackend();
  Linear layer(3, 2);
  std::vector<float> params = {1, 2, 3, 4, 5, 6, 0.5f, -1};  // W = [[1,2,3],[4,5,6]], b
  std::vector<float> grads(params.size());
  layer.Bind(params.data(), grads.data());
  const std::vector<float> x = {1, 0, -1, 2, 1, 0};
  std::vector<float> y(4);
  layer.Forward(be.get(), 2, x.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{-1.5f, -3.0f, 4.5f, 12.0f}));
}

TEST(ReluTest, GradientMatchesFiniteDifferences) {
  auto be = MakeCpuBackend();
  std::vector<float> x = RandomAwayFromZero(20, 4, 0.05f);
  const std::vector<float> r = RandomVector(20, 5);
  std::vector<float> y(20), dx(20);
  auto f = [&] {
    Relu::Forward(be.get(), 20, x.data(), y.data());
    return Project(r, y.data());
  };
  f();
  Relu::Backward(be.get(), 20, y.data(), r.data(), dx.data());
  EXPECT_EQ(CheckGradient(f, x.data(), x.size(), dx), 0);
}

TEST(SigmoidTest, GradientMatchesFiniteDifferencesAndIsStable) {
  auto be = MakeCpuBackend();
  std::vector<float> x = RandomVector(20, 6, -4.0f, 4.0f);
  const std::vector<float> r = RandomVector(20, 7);
  std::vector<float> y(20), dx(20);
  auto f = [&] {
    Sigmoid::Forward(be.get(), 20, x.data(), y.data());
    return Project(r, y.data());
  };
  f();
  Sigmoid::Backward(be.get(), 20, y.data(), r.data(), dx.data());
  EXPECT_EQ(CheckGradient(f, x.data(), x.size(), dx), 0);
  const float extremes[2] = {-200.0f, 200.0f};
  float out[2];
  Sigmoid::Forward(be.get(), 2, extremes, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 1.0f);
}

TEST(BceWithLogitsTest, ValueAndGradientMatchReference) {
  auto be = MakeCpuBackend();
  constexpr int64_t kN = 8;
  constexpr float kNormaliser = 3.0f;
  std::vector<float> z = RandomVector(kN, 8, -3.0f, 3.0f);
  const std::vector<float> labels = {0, 1, 1, 0, 0.25f, 1, 0, 1};
  const std::vector<float> weights = RandomVector(kN, 9, 0.5f, 1.5f);
  std::vector<float> dz(kN);
  const float loss = BceWithLogitsLoss(be.get(), kN, z.data(), labels.data(), weights.data(),
                                       kNormaliser, dz.data());
  double ref = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(z[i])));
    ref -= weights[i] * (labels[i] * std::log(p) + (1 - labels[i]) * std::log(1 - p));
  }
  EXPECT_NEAR(loss, ref / kNormaliser, 1e-5);
  auto f = [&] {
    return static_cast<double>(BceWithLogitsLoss(be.get(), kN, z.data(), labels.data(),
                                                 weights.data(), kNormaliser, nullptr));
  };
  EXPECT_EQ(CheckGradient(f, z.data(), z.size(), dz), 0);
}

void CheckMlpGradients(bool relu_last) {
  auto be = MakeCpuBackend();
  constexpr int64_t kBatch = 3, kIn = 4;
  Mlp mlp(kIn, {6, 3}, relu_last);
  std::vector<float> params(mlp.num_params()), grads(mlp.num_params());
  mlp.Bind(params.data(), grads.data());
  mlp.Init(11, 0, params.data());
  std::vector<float> x = RandomVector(kBatch * kIn, 12, -2.0f, 2.0f);
  const std::vector<float> r = RandomVector(kBatch * mlp.out(), 13);
  std::vector<float> dx(x.size());
  auto f = [&] { return Project(r, mlp.Forward(be.get(), kBatch, x.data())); };
  f();
  mlp.Backward(be.get(), kBatch, x.data(), r.data(), dx.data());
  const std::vector<float> analytic_params = grads;
  testing::GradCheckOptions opt;
  opt.step = 1e-3;  // small enough to stay off the ReLU kinks of this seed
  opt.atol = 1e-3;
  EXPECT_EQ(CheckGradient(f, x.data(), x.size(), dx, opt), 0);
  EXPECT_EQ(CheckGradient(f, params.data(), params.size(), analytic_params, opt), 0);
}

TEST(MlpTest, GradientsMatchFiniteDifferencesWithoutFinalRelu) { CheckMlpGradients(false); }
TEST(MlpTest, GradientsMatchFiniteDifferencesWithFinalRelu) { CheckMlpGradients(true); }

TEST(MlpTest, InitIsGlorotBoundedDeterministicAndKeyedBySeedAndLayer) {
  std::vector<float> a(64 * 32), b(64 * 32), c(64 * 32), d(64 * 32);
  InitGlorotUniform(1, 0, 32, 64, a.data());
  InitGlorotUniform(1, 0, 32, 64, b.data());
  InitGlorotUniform(2, 0, 32, 64, c.data());
  InitGlorotUniform(1, 1, 32, 64, d.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.data(), d.data(), a.size() * sizeof(float)), 0);
  const float bound = static_cast<float>(std::sqrt(6.0 / 96.0));
  double mean = 0;
  for (float w : a) {
    EXPECT_LE(std::fabs(w), bound);
    mean += w;
  }
  EXPECT_NEAR(mean / a.size(), 0.0, 0.05 * bound);
}

// Runs an interaction forward, projects the output on r and checks both input gradients.
// `be` must outlive `inter`: its workspaces are the backend's memory.
void CheckInteractionGradients(Backend* be, Interaction* inter, int64_t bottom_dim,
                               const std::vector<int64_t>& dims) {
  const auto tables = static_cast<int64_t>(dims.size());
  constexpr int64_t kBatch = 3;
  std::vector<float> bottom = RandomVector(kBatch * bottom_dim, 21);
  std::vector<std::vector<float>> pooled, d_pooled;
  std::vector<const float*> pooled_ptrs;
  std::vector<float*> d_pooled_ptrs;
  for (int64_t t = 0; t < tables; ++t) {
    pooled.push_back(RandomVector(kBatch * dims[t], 22 + t));
    d_pooled.emplace_back(kBatch * dims[t]);
  }
  for (int64_t t = 0; t < tables; ++t) {
    pooled_ptrs.push_back(pooled[t].data());
    d_pooled_ptrs.push_back(d_pooled[t].data());
  }
  const std::vector<float> r = RandomVector(kBatch * inter->output_width(), 40);
  std::vector<float> out(r.size()), d_bottom(bottom.size());
  auto f = [&] {
    inter->Forward(be, kBatch, bottom.data(), pooled_ptrs.data(), out.data());
    return Project(r, out.data());
  };
  f();
  inter->Backward(be, kBatch, r.data(), d_bottom.data(), d_pooled_ptrs.data());
  EXPECT_EQ(CheckGradient(f, bottom.data(), bottom.size(), d_bottom), 0);
  for (int64_t t = 0; t < tables; ++t) {
    EXPECT_EQ(CheckGradient(f, pooled[t].data(), pooled[t].size(), d_pooled[t]), 0) << t;
  }
}

TEST(ConcatInteractionTest, MixedWidthsGradientsMatchFiniteDifferences) {
  auto be = MakeCpuBackend();
  ConcatInteraction inter(4, {2, 5, 3});
  EXPECT_EQ(inter.output_width(), 4 + 10);
  CheckInteractionGradients(be.get(), &inter, 4, {2, 5, 3});
}

TEST(DotInteractionTest, GradientsMatchFiniteDifferences) {
  auto be = MakeCpuBackend();
  DotInteraction inter(3, 4);
  EXPECT_EQ(inter.output_width(), 4 + 6);
  CheckInteractionGradients(be.get(), &inter, 4, std::vector<int64_t>(3, 4));
}

TEST(DotInteractionTest, OutputIsBottomThenUpperTriangleDots) {
  auto be = MakeCpuBackend();
  DotInteraction inter(2, 2);
  const float bottom[2] = {1, 2};
  const float p0[2] = {3, 4};
  const float p1[2] = {-1, 5};
  const float* pooled[2] = {p0, p1};
  float out[5];
  inter.Forward(be.get(), 1, bottom, pooled, out);
  // [x0, <x0,x1>, <x0,x2>, <x1,x2>]
  EXPECT_EQ(std::vector<float>(out, out + 5), (std::vector<float>{1, 2, 11, 9, 17}));
}

TEST(ConcatInteractionTest, GradientsMatchFiniteDifferences) {
  auto be = MakeCpuBackend();
  ConcatInteraction inter(5, {3, 3});
  EXPECT_EQ(inter.output_width(), 5 + 6);
  CheckInteractionGradients(be.get(), &inter, 5, std::vector<int64_t>(2, 3));
}

TEST(InteractionTest, MakeRejectsBadShapesAndKinds) {
  EXPECT_TRUE(MakeInteraction("dot", 8, {4, 4}).status().IsInvalidArgument());
  EXPECT_TRUE(MakeInteraction("dcn", 4, {4, 4}).status().IsInvalidArgument());
  EXPECT_TRUE(MakeInteraction("concat", 8, {4, 4}).ok());
}

}  // namespace
}  // namespace tandem::model
