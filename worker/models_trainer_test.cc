// Issue 19's models trained in one process (the trainer with a local table). Each learns to
// within 0.02 of its teacher's AUC on held-out synthetic data whose teacher fits it, and beats
// plain DLRM where the teacher is built for the model: DCN-v2 and DeepFM on the cross teacher
// (third-order products, which cross layers represent and pairwise dots do not), MMoE on two
// correlated labels. Each also trains in bf16 and fp16 on the CPU backend (which emulates the
// rounding) like in fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "worker/evaluator.h"
#include "worker/trainer_test_util.h"

namespace tandem::worker {
namespace {

constexpr int64_t kSteps = 6000;

// 26 Criteo-like fields of vocab 200, batch 256; `labels` binary tasks whose id weights
// correlate at 0.5.
config::JobConfig ModelJob(const std::string& type, const std::string& teacher, int labels = 1,
                           const std::string& precision = "fp32") {
  const bool two = labels == 2;
  auto job = config::ParseJobConfig(
      "data:\n  format: synthetic\n  num_categorical: 26\n" +
          std::string(two ? "  labels: [click, conversion]\n" : "") +
          "  synthetic: {vocab: 200, zipf: 1.1, eval_rows: 8000, teacher: " + teacher +
          ", task_correlation: " + (two ? "0.5" : "0") +
          "}\n"
          "model:\n  type: " +
          type + "\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, " +
          std::to_string(labels) +
          "]\n  dcn: {cross_layers: 2}\n  mmoe: {num_experts: 4, expert_mlp: [32]}\n"
          "tables:\n  default: {optimizer: adagrad, lr: 0.3, init: {dist: uniform, scale: 0.01}}\n"
          "train:\n  batch_size: 256\n  seed: 7\n  dense_optimizer: adam\n  dense_lr: 0.01\n"
          "  precision: " +
          precision + "\n",
      "model.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : config::JobConfig{};
}

// Trains kSteps and returns each task's held-out figures (empty after a failure), having checked
// that it learned and, unless it is the baseline, ended within 0.02 of its teacher.
std::vector<TaskEval> TrainToTeacher(const config::JobConfig& job, bool baseline = false) {
  auto run = testing::MakeTrainerRun(job);
  auto evaluator = Evaluator::Create(job, 0, 1);
  EXPECT_TRUE(run != nullptr && evaluator.ok());
  if (run == nullptr || !evaluator.ok()) return {};
  auto before = (*evaluator)->Run(run->trainer.get(), nullptr, 0);
  EXPECT_TRUE(std::isfinite(run->MeanLoss(0, kSteps)));
  auto after = (*evaluator)->Run(run->trainer.get(), nullptr, kSteps);
  EXPECT_TRUE(before.ok() && after.ok());
  if (!before.ok() || !after.ok()) return {};
  EXPECT_EQ(after->tasks.size(), job.data.labels.size());
  for (size_t k = 0; k < after->tasks.size(); ++k) {
    const TaskEval& t = after->tasks[k];
    EXPECT_GT(t.auc, before->tasks[k].auc + 0.05) << job.model.type << " task " << k;
    if (!baseline) {
      EXPECT_GT(t.auc, t.teacher_auc - 0.02)
          << job.model.type << " task " << k << " model " << t.auc << " teacher " << t.teacher_auc;
    }
    std::printf("%s on the %s teacher, task %zu: model AUC %.4f, teacher %.4f\n",
                job.model.type.c_str(), job.data.synthetic_teacher.c_str(), k, t.auc,
                t.teacher_auc);
  }
  return after->tasks;
}

TEST(ModelTrainerTest, DcnV2AndDeepFmReachTheCrossTeacherAndBeatDlrmThere) {
  // DLRM does not reach this teacher (0.0207 short): it is the baseline.
  const auto dlrm = TrainToTeacher(ModelJob("dlrm", "cross"), /*baseline=*/true);
  const auto dcn = TrainToTeacher(ModelJob("dcn_v2", "cross"));
  const auto fm = TrainToTeacher(ModelJob("deepfm", "cross"));
  ASSERT_TRUE(dlrm.size() == 1 && dcn.size() == 1 && fm.size() == 1);
  // Measured here: DLRM 0.8507, DCN-v2 0.8599, DeepFM 0.8537 (teacher 0.8714).
  EXPECT_GT(dcn[0].auc, dlrm[0].auc + 0.005);
  EXPECT_GT(fm[0].auc, dlrm[0].auc);
}

TEST(ModelTrainerTest, MmoeReachesTwoCorrelatedLabelsAndBeatsSharedDlrm) {
  const auto mmoe = TrainToTeacher(ModelJob("mmoe", "linear", 2));
  const auto dlrm = TrainToTeacher(ModelJob("dlrm", "linear", 2), /*baseline=*/true);
  ASSERT_TRUE(mmoe.size() == 2 && dlrm.size() == 2);
  // Measured here: MMoE 0.8371 / 0.8350, DLRM (one top MLP, two logits) 0.8350 / 0.8324.
  for (size_t k = 0; k < 2; ++k) EXPECT_GT(mmoe[k].auc, dlrm[k].auc) << "task " << k;
}

TEST(ModelTrainerTest, WideDeepReachesTheLinearTeacher) {
  EXPECT_EQ(TrainToTeacher(ModelJob("wide_deep", "linear")).size(), 1u);
}

class ModelPrecisionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelPrecisionTest, TrainsInBf16AndFp16LikeInFp32AndRepeatsItsBits) {
  const std::string type = GetParam();
  const int labels = type == "mmoe" ? 2 : 1;
  auto fp32 = testing::MakeTrainerRun(ModelJob(type, "fm", labels, "fp32"));
  auto again = testing::MakeTrainerRun(ModelJob(type, "fm", labels, "fp32"));
  auto bf16 = testing::MakeTrainerRun(ModelJob(type, "fm", labels, "bf16"));
  auto fp16 = testing::MakeTrainerRun(ModelJob(type, "fm", labels, "fp16"));
  ASSERT_TRUE(fp32 && again && bf16 && fp16);
  const double l32 = fp32->MeanLoss(150, 200);
  EXPECT_EQ(again->MeanLoss(150, 200), l32);
  EXPECT_EQ(again->Checksum().Hex(), fp32->Checksum().Hex());
  EXPECT_NEAR(bf16->MeanLoss(150, 200), l32, 0.02);
  EXPECT_NEAR(fp16->MeanLoss(150, 200), l32, 0.02);
  // The rounding reached the model: the low-precision runs are not the fp32 run.
  EXPECT_NE(bf16->Checksum().Hex(), fp32->Checksum().Hex());
  EXPECT_GT(fp16->trainer->loss_scaler()->scale(), 1.0f);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelPrecisionTest,
                         ::testing::Values("dcn_v2", "deepfm", "wide_deep", "mmoe"));

}  // namespace
}  // namespace tandem::worker
