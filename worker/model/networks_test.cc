// Every model type on the CPU backend: finite-difference checks of each whole model with
// mixed-width fields, mean pooling and two weighted labels (which covers each layer: DLRM's
// interactions and projections, cross, FM, gates and experts, towers, the wide part), their flat
// layouts, and the shapes they refuse.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "worker/model/model.h"
#include "worker/model/network_factory.h"
#include "worker/model/test_util.h"

namespace tandem::model {
namespace {

using testing::CheckGradient;
using testing::MakeCpuBackend;
using testing::RandomVector;

constexpr int64_t kDense = 3;
constexpr int64_t kBatch = 5;

ModelConfig Config(const std::string& type) {
  ModelConfig c;
  c.type = type;
  c.embedding_dim = 2;
  c.bottom_mlp = {4, 2};
  c.top_mlp = {5, 2};
  c.dcn_cross_layers = 2;
  c.mmoe_num_experts = 3;
  c.mmoe_expert_mlp = {4, 3};
  return c;
}

// Fields of widths 2, 3, 2 (the 3-wide one is projected where a model needs one width), two
// labels with loss weights 1 and 0.5, and for deepfm / wide_deep one wide feature per field.
ModelInputs Inputs(const std::string& type) {
  ModelInputs in;
  in.num_dense = kDense;
  in.dims = {2, 3, 2};
  in.mean = {false, true, false};
  in.num_labels = 2;
  in.loss_weights = {1.0f, 0.5f};
  if (type == "deepfm" || type == "wide_deep") {
    in.num_wide = 3;
    in.dims.insert(in.dims.end(), {2, 2, 2});
    in.mean.insert(in.mean.end(), {false, true, false});
  }
  return in;
}

struct Case {
  std::string name;
  ModelConfig config;
  std::string first_param, last_param;
};

class NetworkGradientTest : public ::testing::TestWithParam<Case> {};

TEST_P(NetworkGradientTest, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  auto be = MakeCpuBackend();
  const ModelInputs inputs = Inputs(c.config.type);
  auto created = Model::Create(c.config, inputs, 5, be.get());
  ASSERT_TRUE(created.ok()) << created.status();
  auto model = std::move(created).value();
  EXPECT_EQ(model->param_info().front().name, c.first_param);
  EXPECT_EQ(model->param_info().back().name, c.last_param);
  int64_t total = 0;
  for (const ParamInfo& p : model->param_info()) {
    EXPECT_EQ(p.offset, total) << p.name;
    total += p.size;
  }
  EXPECT_EQ(total, model->num_params());
  // Off the initial point: zero biases put pre-activations on ReLU kinks.
  const std::vector<float> shift = RandomVector(model->params().size(), 51, -0.2f, 0.2f);
  for (size_t i = 0; i < shift.size(); ++i) model->params()[i] += shift[i];
  std::vector<float> dense = RandomVector(kBatch * kDense, 50, -2.0f, 2.0f);
  const std::vector<float> labels = {1, 0, 0, 0, 0, 1, 1, 1, 0, 1};  // batch x 2
  const std::vector<float> weights = {1, 1, 0.5f, 1, 1};
  std::vector<std::vector<float>> pooled, d_pooled;
  std::vector<const float*> pp;
  std::vector<float*> dp;
  for (size_t f = 0; f < inputs.dims.size(); ++f) {
    pooled.push_back(RandomVector(kBatch * inputs.dims[f], 60 + f));
    d_pooled.emplace_back(kBatch * inputs.dims[f]);
  }
  for (size_t f = 0; f < pooled.size(); ++f) {
    pp.push_back(pooled[f].data());
    dp.push_back(d_pooled[f].data());
  }
  auto step = [&] {
    return model->ForwardBackward(kBatch, dense.data(), pp.data(), labels.data(), weights.data(),
                                  1.0f, dp.data());
  };
  const float first = step();
  EXPECT_EQ(step(), first);  // the same inputs give the same bits
  const std::vector<float> grads(model->grads().begin(), model->grads().end());
  const std::vector<std::vector<float>> want_pooled = d_pooled;
  auto loss = [&] { return static_cast<double>(step()); };
  testing::GradCheckOptions opt;
  opt.step = 1e-3;
  opt.atol = 5e-4;
  EXPECT_EQ(CheckGradient(loss, model->params().data(), grads.size(), grads, opt), 0);
  for (size_t f = 0; f < pooled.size(); ++f) {
    EXPECT_EQ(CheckGradient(loss, pooled[f].data(), want_pooled[f].size(), want_pooled[f], opt), 0)
        << "feature " << f;
  }
  std::vector<float> probs(kBatch * 2);
  model->Predict(kBatch, dense.data(), pp.data(), probs.data());
  for (float p : probs) EXPECT_TRUE(p > 0 && p < 1) << p;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  // DLRM (issue 18's mixed widths): dot projects the 3-wide field to the bottom MLP's width.
  cases.push_back({"dlrm_dot", Config("dlrm"), "bottom_mlp.0.weight", "proj.1.0.bias"});
  ModelConfig concat = Config("dlrm");
  concat.interaction = "concat";
  cases.push_back({"dlrm_concat", concat, "bottom_mlp.0.weight", "top_mlp.1.bias"});
  cases.push_back(
      {"dcn_v2_full_stacked", Config("dcn_v2"), "bottom_mlp.0.weight", "top_mlp.1.bias"});
  ModelConfig low = Config("dcn_v2");
  low.dcn_low_rank = 2;
  low.dcn_structure = "parallel";
  cases.push_back({"dcn_v2_low_rank_parallel", low, "bottom_mlp.0.weight", "head.bias"});
  ModelConfig shallow = Config("dcn_v2");
  shallow.dcn_structure = "parallel";
  shallow.top_mlp = {2};  // no deep layer: the head reads [x_L, x0]
  cases.push_back({"dcn_v2_parallel_no_deep_layer", shallow, "bottom_mlp.0.weight", "head.bias"});
  cases.push_back({"deepfm", Config("deepfm"), "bottom_mlp.0.weight", "proj.1.0.bias"});
  cases.push_back({"wide_deep", Config("wide_deep"), "bottom_mlp.0.weight", "top_mlp.1.bias"});
  cases.push_back({"mmoe", Config("mmoe"), "bottom_mlp.0.weight", "tower.1.1.bias"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Models, NetworkGradientTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(NetworkLayoutTest, DcnFullAndLowRankCrossShapes) {
  auto be = MakeCpuBackend();
  ModelConfig c = Config("dcn_v2");
  c.top_mlp = {5, 2};
  auto full = Model::Create(c, Inputs("dcn_v2"), 1, be.get());
  ASSERT_TRUE(full.ok()) << full.status();
  // x0 width: bottom 2 + fields 2 + 3 + 2 = 9.
  const auto& info = (*full)->param_info();
  EXPECT_EQ(info[4].name, "cross.0.weight");
  EXPECT_EQ(info[4].shape, (std::vector<int64_t>{9, 9}));
  c.dcn_low_rank = 4;
  auto low = Model::Create(c, Inputs("dcn_v2"), 1, be.get());
  ASSERT_TRUE(low.ok()) << low.status();
  EXPECT_EQ((*low)->param_info()[4].name, "cross.0.v.weight");
  EXPECT_EQ((*low)->param_info()[4].shape, (std::vector<int64_t>{4, 9}));
  EXPECT_EQ((*low)->param_info()[6].name, "cross.0.u.weight");
  EXPECT_EQ((*low)->param_info()[6].shape, (std::vector<int64_t>{9, 4}));
}

TEST(NetworkLayoutTest, MmoeHasExpertsGatesAndTowersPerTask) {
  auto be = MakeCpuBackend();
  auto model = Model::Create(Config("mmoe"), Inputs("mmoe"), 1, be.get());
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::string> names;
  for (const auto& p : (*model)->param_info()) names.push_back(p.name);
  for (const char* want : {"expert.2.1.weight", "gate.0.weight", "gate.1.bias", "tower.0.0.weight",
                           "tower.1.1.weight"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) { return n.starts_with("gate."); }),
            4);
}

TEST(NetworkFactoryTest, RefusesWhatAModelCannotTake) {
  ModelInputs plain = Inputs("dlrm");
  ModelInputs wide = Inputs("deepfm");
  // The wide models need one wide feature per field; the others take none.
  EXPECT_TRUE(MakeNetwork(Config("deepfm"), plain).status().IsInvalidArgument());
  EXPECT_TRUE(MakeNetwork(Config("wide_deep"), plain).status().IsInvalidArgument());
  EXPECT_TRUE(MakeNetwork(Config("dcn_v2"), wide).status().IsInvalidArgument());
  EXPECT_TRUE(MakeNetwork(Config("mmoe"), wide).status().IsInvalidArgument());
  ModelConfig bad = Config("nope");
  EXPECT_TRUE(MakeNetwork(bad, plain).status().IsInvalidArgument());
  ModelConfig no_experts = Config("mmoe");
  no_experts.mmoe_expert_mlp.clear();
  EXPECT_TRUE(MakeNetwork(no_experts, plain).status().IsInvalidArgument());
  wide.dims.back() = 1;  // one column, two labels
  EXPECT_TRUE(MakeNetwork(Config("wide_deep"), wide).status().IsInvalidArgument());
}

TEST(NetworkFactoryTest, IgnoredKeysAreNamed) {
  ModelConfig c;
  EXPECT_TRUE(IgnoredModelKeys(c).empty());
  c.type = "dcn_v2";
  c.interaction = "dot";
  c.mmoe_num_experts = 2;
  c.dcn_cross_layers = 5;
  const auto keys = IgnoredModelKeys(c);
  EXPECT_EQ(keys, (std::vector<std::string>{"model.interaction=dot", "model.mmoe.num_experts=2"}));
}

}  // namespace
}  // namespace tandem::model
