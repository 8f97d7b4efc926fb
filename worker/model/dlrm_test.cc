#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "worker/model/dense_optimizer.h"
#include "worker/model/model.h"
#include "worker/model/test_util.h"

namespace tandem::model {
namespace {

using testing::CheckGradient;
using testing::MakeCpuBackend;
using testing::RandomVector;

constexpr int64_t kDense = 3;
constexpr int64_t kTables = 3;
constexpr int64_t kBatch = 4;

ModelConfig SmallConfig(const std::string& interaction) {
  ModelConfig config;
  config.embedding_dim = 2;
  config.bottom_mlp = {4, 2};
  config.top_mlp = {5, 1};
  config.interaction = interaction;
  return config;
}

// One batch of inputs with pointer tables, as the trainer would hold them.
struct Batch {
  std::vector<float> dense, labels, weights;
  std::vector<std::vector<float>> pooled, d_pooled;
  std::vector<const float*> pooled_ptrs;
  std::vector<float*> d_pooled_ptrs;

  Batch(int64_t dim, uint32_t seed) {
    dense = RandomVector(kBatch * kDense, seed, -2.0f, 2.0f);
    labels = {1, 0, 0, 1};
    weights = {1, 1, 0.5f, 1};
    for (int64_t t = 0; t < kTables; ++t) {
      pooled.push_back(RandomVector(kBatch * dim, seed + 1 + t));
      d_pooled.emplace_back(kBatch * dim);
    }
    for (int64_t t = 0; t < kTables; ++t) {
      pooled_ptrs.push_back(pooled[t].data());
      d_pooled_ptrs.push_back(d_pooled[t].data());
    }
  }

  float Step(Model* model, float normaliser) {
    return model->ForwardBackward(kBatch, dense.data(), pooled_ptrs.data(), labels.data(),
                                  weights.data(), normaliser, d_pooled_ptrs.data());
  }
};

std::unique_ptr<Model> MakeModel(const ModelConfig& config, uint64_t seed, device::Backend* be) {
  auto model = Model::Create(config, kDense, kTables, seed, be);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(model).value();
}

void CheckDlrmGradients(const std::string& interaction) {
  auto be = MakeCpuBackend();
  const ModelConfig config = SmallConfig(interaction);
  auto model = MakeModel(config, 5, be.get());
  // Move off the initial point: with zero biases a sample whose hidden units are all off puts
  // the next pre-activation exactly on the ReLU kink, where no derivative exists.
  const std::vector<float> shift = RandomVector(model->params().size(), 51, -0.2f, 0.2f);
  for (size_t i = 0; i < shift.size(); ++i) model->params()[i] += shift[i];
  Batch batch(config.embedding_dim, 50);
  // Normaliser 1 keeps gradients O(1), so the absolute floor of the check stays meaningful.
  batch.Step(model.get(), 1.0f);
  const std::vector<float> grads(model->grads().begin(), model->grads().end());
  const std::vector<std::vector<float>> d_pooled = batch.d_pooled;
  auto loss = [&] { return static_cast<double>(batch.Step(model.get(), 1.0f)); };
  testing::GradCheckOptions opt;
  opt.step = 1e-3;  // small enough to stay off the ReLU kinks for this seed
  opt.atol = 5e-4;
  EXPECT_EQ(CheckGradient(loss, model->params().data(), grads.size(), grads, opt), 0);
  for (int64_t t = 0; t < kTables; ++t) {
    EXPECT_EQ(CheckGradient(loss, batch.pooled[t].data(), d_pooled[t].size(), d_pooled[t], opt), 0)
        << "table " << t;
  }
}

TEST(DlrmTest, DotGradientsMatchFiniteDifferences) { CheckDlrmGradients("dot"); }
TEST(DlrmTest, ConcatGradientsMatchFiniteDifferences) { CheckDlrmGradients("concat"); }

TEST(DlrmTest, LossAndGradientsScaleWithNormaliser) {
  auto be = MakeCpuBackend();
  auto model = MakeModel(SmallConfig("dot"), 5, be.get());
  Batch batch(2, 60);
  const float loss1 = batch.Step(model.get(), 1.0f);
  const std::vector<float> g1(model->grads().begin(), model->grads().end());
  const float loss8 = batch.Step(model.get(), 8.0f);
  EXPECT_FLOAT_EQ(loss8 * 8, loss1);
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(model->grads()[i] * 8, g1[i], 1e-6);
}

TEST(DlrmTest, LayoutMatchesConfig) {
  auto be = MakeCpuBackend();
  const ModelConfig config = SmallConfig("dot");
  auto model = MakeModel(config, 5, be.get());
  // dot width: d + (T+1)T/2 = 2 + 6 (top_mlp.0 reads it).
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"bottom_mlp.0.weight", {4, 3}}, {"bottom_mlp.0.bias", {4}},
      {"bottom_mlp.1.weight", {2, 4}}, {"bottom_mlp.1.bias", {2}},
      {"top_mlp.0.weight", {5, 8}},    {"top_mlp.0.bias", {5}},
      {"top_mlp.1.weight", {1, 5}},    {"top_mlp.1.bias", {1}}};
  const std::vector<ParamInfo>& info = model->param_info();
  ASSERT_EQ(info.size(), expected.size());
  int64_t offset = 0;
  for (size_t i = 0; i < info.size(); ++i) {
    EXPECT_EQ(info[i].name, expected[i].first);
    EXPECT_EQ(info[i].shape, expected[i].second);
    EXPECT_EQ(info[i].offset, offset);
    int64_t size = 1;
    for (int64_t dim : info[i].shape) size *= dim;
    EXPECT_EQ(info[i].size, size);
    offset += size;
  }
  EXPECT_EQ(offset, model->num_params());
  EXPECT_EQ(model->grads().size(), model->params().size());
  for (const ParamInfo& p : info) {
    if (p.shape.size() != 1) continue;
    for (int64_t i = 0; i < p.size; ++i) EXPECT_EQ(model->params()[p.offset + i], 0.0f) << p.name;
  }
}

TEST(DlrmTest, CreateRejectsInconsistentConfigs) {
  auto be = MakeCpuBackend();
  ModelConfig bad_dot = SmallConfig("dot");
  bad_dot.bottom_mlp = {4, 3};
  EXPECT_TRUE(Model::Create(bad_dot, kDense, kTables, 1, be.get()).status().IsInvalidArgument());
  ModelConfig bad_top = SmallConfig("dot");
  bad_top.top_mlp = {5, 2};
  EXPECT_TRUE(Model::Create(bad_top, kDense, kTables, 1, be.get()).status().IsInvalidArgument());
  ModelConfig empty_bottom = SmallConfig("concat");
  empty_bottom.bottom_mlp.clear();
  EXPECT_TRUE(
      Model::Create(empty_bottom, kDense, kTables, 1, be.get()).status().IsInvalidArgument());
  EXPECT_TRUE(
      Model::Create(SmallConfig("dot"), 0, kTables, 1, be.get()).status().IsInvalidArgument());
  EXPECT_TRUE(
      Model::Create(SmallConfig("dot"), kDense, kTables, 1, nullptr).status().IsInvalidArgument());
}

TEST(DlrmTest, PredictIsSigmoidOfTheTrainedLogit) {
  auto be = MakeCpuBackend();
  auto model = MakeModel(SmallConfig("dot"), 5, be.get());
  Batch batch(2, 70);
  std::vector<float> probs(kBatch);
  model->Predict(kBatch, batch.dense.data(), batch.pooled_ptrs.data(), probs.data());
  double loss = 0;
  for (int64_t i = 0; i < kBatch; ++i) {
    ASSERT_GT(probs[i], 0.0f);
    ASSERT_LT(probs[i], 1.0f);
    const double p = batch.labels[i] == 1 ? probs[i] : 1.0 - probs[i];
    loss -= batch.weights[i] * std::log(p);
  }
  EXPECT_NEAR(batch.Step(model.get(), kBatch), loss / kBatch, 1e-5);
}

// Trains `steps` Adam steps on fixed seeded batches and returns the parameters.
std::vector<float> Train(uint64_t seed, int steps) {
  auto be = MakeCpuBackend();
  auto model = MakeModel(SmallConfig("dot"), seed, be.get());
  DenseOptimizerOptions options;
  options.lr = 0.01;
  auto opt = DenseOptimizer::Create(options, model->num_params());
  EXPECT_TRUE(opt.ok());
  for (int s = 0; s < steps; ++s) {
    Batch batch(2, 100 + s);
    batch.Step(model.get(), kBatch);
    (*opt)->Step(s, model->params(), model->grads());
  }
  return {model->params().begin(), model->params().end()};
}

TEST(DlrmTest, SameSeedAndBatchesGiveBitIdenticalParameters) {
  const std::vector<float> a = Train(7, 20);
  const std::vector<float> b = Train(7, 20);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  const std::vector<float> c = Train(8, 20);
  EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace tandem::model
