// train.precision on the trainer, run on the CPU backend (which emulates bf16/fp16 rounding):
// bf16 trains like fp32 and is deterministic; fp16 loss scaling skips an overflowed step
// everywhere (nothing applied, scale halved, PROTOCOLS §2.7) and its state is checkpointed.
// Linked into trainer_tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "worker/dense_state.h"
#include "worker/trainer_test_util.h"

namespace tandem::worker {
namespace {

using testing::MakeTrainerRun;
using testing::TrainerRun;

config::JobConfig Job(const std::string& precision) {
  auto job = config::ParseJobConfig(
      "data:\n  format: synthetic\n  num_categorical: 8\n  synthetic:\n    vocab: 100\n"
      "model:\n  embedding_dim: 8\n  bottom_mlp: [16, 8]\n  top_mlp: [16, 1]\n"
      "train:\n  batch_size: 64\n  seed: 5\n  dense_optimizer: adam\n  dense_lr: 0.01\n"
      "  precision: " +
          precision + "\n",
      "precision.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

TEST(MixedPrecisionTest, Bf16TrainsLikeFp32AndIsDeterministic) {
  auto fp32 = MakeTrainerRun(Job("fp32"));
  auto bf16 = MakeTrainerRun(Job("bf16"));
  auto again = MakeTrainerRun(Job("bf16"));
  ASSERT_TRUE(fp32 && bf16 && again);
  const double l32 = fp32->MeanLoss(300, 400);
  const double l16 = bf16->MeanLoss(300, 400);
  again->MeanLoss(300, 400);
  EXPECT_NEAR(l16, l32, 0.02) << "bf16 mean loss " << l16 << " fp32 " << l32;
  EXPECT_LT(l16, 0.69) << "bf16 did not learn";
  // Rounding changes the bits, not the determinism.
  EXPECT_NE(bf16->Checksum().Hex(), fp32->Checksum().Hex());
  EXPECT_EQ(bf16->Checksum().Hex(), again->Checksum().Hex());
}

TEST(MixedPrecisionTest, Fp16OverflowSkipsTheStepAndHalvesTheScale) {
  auto run = MakeTrainerRun(Job("fp16"));
  ASSERT_TRUE(run);
  model::LossScaler* scaler = run->trainer->mutable_loss_scaler();
  ASSERT_NE(scaler, nullptr);
  // At 2^24 the scaled loss gradient (about 0.5 / 64 per sample) exceeds fp16's 65504: the
  // GEMM inputs become infinite and the gradients overflow.
  ASSERT_TRUE(scaler->Load(16777216.0f, 0).ok());
  const std::vector<float> params(run->trainer->model().params().begin(),
                                  run->trainer->model().params().end());
  const std::vector<float> opt(run->trainer->optimizer().state().begin(),
                               run->trainer->optimizer().state().end());
  ModelChecksum rows_before;
  run->table->AddToChecksum(&rows_before);
  auto st = run->Step(0);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->skipped);
  EXPECT_EQ(st->loss_scale, 16777216.0f);
  EXPECT_EQ(scaler->scale(), 8388608.0f);
  EXPECT_EQ(scaler->good_steps(), 0);
  // Nothing was applied: not the dense update, not the optimizer state, not an embedding row
  // (the step's pushes were skip pushes).
  const auto& trainer = *run->trainer;
  EXPECT_TRUE(std::equal(params.begin(), params.end(), trainer.model().params().begin()));
  EXPECT_TRUE(std::equal(opt.begin(), opt.end(), trainer.optimizer().state().begin()));
  ModelChecksum rows_after;
  run->table->AddToChecksum(&rows_after);
  EXPECT_EQ(rows_after.Hex(), rows_before.Hex());
  // Halving continues until the gradients fit, then steps train and count good steps.
  int64_t s = 1;
  for (; s < 10 && scaler->good_steps() == 0; ++s) ASSERT_TRUE(run->Step(s).ok());
  EXPECT_LT(s, 10) << "the scale never came down to a finite step";
  EXPECT_LE(scaler->scale(), 8388608.0f);
  EXPECT_EQ(scaler->good_steps(), 1);
}

}  // namespace
}  // namespace tandem::worker

namespace tandem::worker {
namespace {

TEST(MixedPrecisionTest, Fp16LossScaleIsCheckpointedWithTheDenseState) {
  auto run = testing::MakeTrainerRun(Job("fp16"));
  ASSERT_TRUE(run);
  for (int64_t s = 0; s < 5; ++s) ASSERT_TRUE(run->Step(s).ok());
  ASSERT_TRUE(run->trainer->mutable_loss_scaler()->Load(1024.0f, 7).ok());
  const DenseState state = SnapshotDenseState(*run->trainer, 4);
  ASSERT_FALSE(state.tensors.empty());
  EXPECT_EQ(state.tensors.back().name, kLossScaleTensor);
  auto decoded = DecodeDenseState(EncodeDenseState(state), "mem");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(DenseStateChecksum(*decoded).Hex(), run->trainer->DenseChecksum().Hex());

  auto fresh = testing::MakeTrainerRun(Job("fp16"));
  ASSERT_TRUE(fresh);
  ASSERT_TRUE(RestoreDenseState(*decoded, fresh->trainer.get()).ok());
  EXPECT_EQ(fresh->trainer->loss_scaler()->scale(), 1024.0f);
  EXPECT_EQ(fresh->trainer->loss_scaler()->good_steps(), 7);
  EXPECT_EQ(fresh->trainer->DenseChecksum().Hex(), run->trainer->DenseChecksum().Hex());

  // An fp32 job refuses it (one tensor too many) and an fp16 job an fp32 state; a scale that
  // is not a power of two is refused; none of them changes the trainer.
  auto fp32 = testing::MakeTrainerRun(Job("fp32"));
  ASSERT_TRUE(fp32);
  EXPECT_TRUE(RestoreDenseState(*decoded, fp32->trainer.get()).IsInvalidArgument());
  const DenseState fp32_state = SnapshotDenseState(*fp32->trainer, 0);
  Status s = RestoreDenseState(fp32_state, fresh->trainer.get());
  EXPECT_TRUE(s.IsInvalidArgument()) << s;
  EXPECT_NE(s.message().find("loss_scale"), std::string::npos) << s;
  DenseState bad = *decoded;
  bad.tensors.back().values[0] = 3.0f;
  s = RestoreDenseState(bad, fresh->trainer.get());
  EXPECT_TRUE(s.IsInvalidArgument()) << s;
  EXPECT_EQ(fresh->trainer->loss_scaler()->scale(), 1024.0f);
}

}  // namespace
}  // namespace tandem::worker
