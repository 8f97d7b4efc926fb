// Issue 19's models trained in one process (the trainer with a local table): each learns to its
// teacher's AUC on held-out synthetic data, and trains in bf16 and fp16 on the CPU backend (which
// emulates the rounding) like in fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "worker/evaluator.h"
#include "worker/trainer_test_util.h"

namespace tandem::worker {
namespace {

// 26 Criteo-like fields of vocab 200, each model on a teacher it fits: the pairwise (FM)
// teacher for DCN-v2 and DeepFM, the linear one for Wide & Deep, and for MMoE two labels whose
// id weights correlate at 0.5.
config::JobConfig ModelJob(const std::string& type, const std::string& precision = "fp32") {
  const bool two = type == "mmoe";
  const bool linear = type == "wide_deep" || type == "mmoe";
  auto job = config::ParseJobConfig(
      "data:\n  format: synthetic\n  num_categorical: 26\n" +
          std::string(two ? "  labels: [click, conversion]\n" : "") +
          "  synthetic: {vocab: 200, zipf: 1.1, eval_rows: 8000, teacher: " +
          (linear ? "linear" : "fm") + ", task_correlation: " + (two ? "0.5" : "0") +
          "}\n"
          "model:\n  type: " +
          type + "\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, " +
          (two ? "2" : "1") +
          "]\n  dcn: {cross_layers: 2}\n  mmoe: {num_experts: 4, expert_mlp: [32]}\n"
          "tables:\n  default: {optimizer: adagrad, lr: 0.3, init: {dist: uniform, scale: 0.01}}\n"
          "train:\n  batch_size: 256\n  seed: 7\n  dense_optimizer: adam\n  dense_lr: 0.01\n"
          "  precision: " +
          precision + "\n",
      "model.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : config::JobConfig{};
}

class ModelTrainerTest : public ::testing::TestWithParam<std::string> {};

// The bar: within 0.02 of the teacher's AUC on held-out data.
TEST_P(ModelTrainerTest, ReachesTheTeachersAuc) {
  constexpr int64_t kSteps = 6000;
  const auto job = ModelJob(GetParam());
  auto run = testing::MakeTrainerRun(job);
  ASSERT_NE(run, nullptr);
  auto evaluator = Evaluator::Create(job, 0, 1);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  auto before = (*evaluator)->Run(run->trainer.get(), nullptr, 0);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(std::isfinite(run->MeanLoss(0, kSteps)));
  auto after = (*evaluator)->Run(run->trainer.get(), nullptr, kSteps);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->tasks.size(), job.data.labels.size());
  for (size_t k = 0; k < after->tasks.size(); ++k) {
    const TaskEval& t = after->tasks[k];
    EXPECT_GT(t.auc, before->tasks[k].auc + 0.05) << "task " << k;
    EXPECT_GT(t.auc, t.teacher_auc - 0.02)
        << GetParam() << " task " << k << " model " << t.auc << " teacher " << t.teacher_auc;
    std::printf("%s task %zu: model AUC %.4f, teacher %.4f\n", GetParam().c_str(), k, t.auc,
                t.teacher_auc);
  }
}

TEST_P(ModelTrainerTest, TrainsInBf16AndFp16LikeInFp32AndRepeatsItsBits) {
  auto fp32 = testing::MakeTrainerRun(ModelJob(GetParam(), "fp32"));
  auto again = testing::MakeTrainerRun(ModelJob(GetParam(), "fp32"));
  auto bf16 = testing::MakeTrainerRun(ModelJob(GetParam(), "bf16"));
  auto fp16 = testing::MakeTrainerRun(ModelJob(GetParam(), "fp16"));
  ASSERT_TRUE(fp32 && again && bf16 && fp16);
  const double l32 = fp32->MeanLoss(150, 200);
  EXPECT_EQ(again->MeanLoss(150, 200), l32);
  EXPECT_EQ(again->Checksum().Hex(), fp32->Checksum().Hex());
  const double l16b = bf16->MeanLoss(150, 200);
  const double l16 = fp16->MeanLoss(150, 200);
  EXPECT_NEAR(l16b, l32, 0.02);
  EXPECT_NEAR(l16, l32, 0.02);
  // The rounding reached the model: the low-precision runs are not the fp32 run.
  EXPECT_NE(bf16->Checksum().Hex(), fp32->Checksum().Hex());
  EXPECT_GT(fp16->trainer->loss_scaler()->scale(), 1.0f);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelTrainerTest,
                         ::testing::Values("dcn_v2", "deepfm", "wide_deep", "mmoe"));

}  // namespace
}  // namespace tandem::worker
