// The trainer on the CUDA backend (label gpu; skips without a device): it learns like the CPU
// backend, is bit-for-bit repeatable, and the device all-reduce path (a one-rank NCCL group:
// gradients, loss and votes reduced in device memory) gives the same bits as no collective.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/testing/test_util.h"
#include "worker/collective/collective.h"
#include "worker/device/device_info.h"
#include "worker/trainer_test_util.h"
#ifdef TANDEM_HAVE_CUDA
#include "worker/collective/nccl_collective.h"
#endif

namespace tandem::worker {
namespace {

using testing::MakeTrainerRun;
using testing::TrainerRun;

config::JobConfig Job(const std::string& device, const std::string& precision) {
  auto job = config::ParseJobConfig(
      "data:\n  format: synthetic\n  num_categorical: 8\n  synthetic:\n    vocab: 100\n"
      "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 1]\n"
      "train:\n  batch_size: 128\n  seed: 5\n  dense_optimizer: adam\n  dense_lr: 0.01\n"
      "  device: " +
          device + "\n  precision: " + precision + "\n",
      "gpu.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

#define SKIP_WITHOUT_GPU()                                                             \
  do {                                                                                 \
    const device::DeviceReport r = device::ProbeDevices();                             \
    if (!r.cuda_compiled) GTEST_SKIP() << "built without CUDA (no nvcc at configure)"; \
    if (r.device_count == 0) GTEST_SKIP() << "no CUDA device: " << r.error;            \
  } while (0)

TEST(TrainerGpuTest, LearnsLikeTheCpuAndRepeatsItsBits) {
  SKIP_WITHOUT_GPU();
  auto cpu = MakeTrainerRun(Job("cpu", "fp32"));
  auto gpu = MakeTrainerRun(Job("cuda", "fp32"));
  auto again = MakeTrainerRun(Job("cuda", "fp32"));
  ASSERT_TRUE(cpu && gpu && again);
  const double l_cpu = cpu->MeanLoss(200, 300);
  const double l_gpu = gpu->MeanLoss(200, 300);
  again->MeanLoss(200, 300);
  EXPECT_NEAR(l_gpu, l_cpu, 0.01) << "gpu " << l_gpu << " cpu " << l_cpu;
  EXPECT_EQ(gpu->Checksum().Hex(), again->Checksum().Hex());
  // Predictions on the device agree with the CPU's on the same batch.
  std::vector<float> p_cpu, p_gpu;
  ASSERT_TRUE(cpu->trainer->Predict(300, cpu->batch, &p_cpu).ok());
  ASSERT_TRUE(gpu->trainer->Predict(300, gpu->batch, &p_gpu).ok());
  ASSERT_EQ(p_cpu.size(), p_gpu.size());
  double max_diff = 0;
  for (size_t i = 0; i < p_cpu.size(); ++i)
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(p_cpu[i] - p_gpu[i])));
  EXPECT_LT(max_diff, 0.05);
}

TEST(TrainerGpuTest, MixedPrecisionTrainsOnTheDevice) {
  SKIP_WITHOUT_GPU();
  auto fp32 = MakeTrainerRun(Job("cuda", "fp32"));
  auto bf16 = MakeTrainerRun(Job("cuda", "bf16"));
  auto fp16 = MakeTrainerRun(Job("cuda", "fp16"));
  ASSERT_TRUE(fp32 && bf16 && fp16);
  const double l32 = fp32->MeanLoss(200, 300);
  EXPECT_NEAR(bf16->MeanLoss(200, 300), l32, 0.02);
  EXPECT_NEAR(fp16->MeanLoss(200, 300), l32, 0.02);
  EXPECT_GT(fp16->trainer->loss_scaler()->scale(), 1.0f);
}

// Issue 19: every model on the device learns like on the CPU, repeats its bits, and trains in
// bf16 and fp16.
config::JobConfig ModelJob(const std::string& type, const std::string& device,
                           const std::string& precision) {
  const bool two = type == "mmoe";
  auto job = config::ParseJobConfig(
      "data:\n  format: synthetic\n  num_categorical: 8\n  synthetic:\n    vocab: 100\n" +
          std::string(two ? "  labels: [click, conversion]\n" : "") + "model:\n  type: " + type +
          "\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, " + (two ? "2" : "1") +
          "]\n  dcn: {cross_layers: 2, low_rank: 4, structure: parallel}\n"
          "  mmoe: {num_experts: 3, expert_mlp: [16]}\n"
          "train:\n  batch_size: 300\n  seed: 5\n  dense_optimizer: adam\n  dense_lr: 0.01\n"
          "  device: " +
          device + "\n  precision: " + precision + "\n",
      "gpu-model.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

class ModelGpuTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelGpuTest, LearnsLikeTheCpuRepeatsItsBitsAndTrainsInMixedPrecision) {
  SKIP_WITHOUT_GPU();
  const std::string type = GetParam();
  auto cpu = MakeTrainerRun(ModelJob(type, "cpu", "fp32"));
  auto gpu = MakeTrainerRun(ModelJob(type, "cuda", "fp32"));
  auto again = MakeTrainerRun(ModelJob(type, "cuda", "fp32"));
  ASSERT_TRUE(cpu && gpu && again);
  // The first step's loss: the same model on the same batch, within rounding. It is checked on
  // runs of their own, since MeanLoss trains from step 0 and `gpu` and `again` must train the
  // same steps for their checksums to be comparable.
  auto probe_cpu = MakeTrainerRun(ModelJob(type, "cpu", "fp32"));
  auto probe_gpu = MakeTrainerRun(ModelJob(type, "cuda", "fp32"));
  ASSERT_TRUE(probe_cpu && probe_gpu);
  auto first_cpu = probe_cpu->Step(0);
  auto first_gpu = probe_gpu->Step(0);
  ASSERT_TRUE(first_cpu.ok() && first_gpu.ok());
  EXPECT_NEAR(first_gpu->loss, first_cpu->loss, 1e-4);
  const double l_cpu = cpu->MeanLoss(200, 300);
  const double l_gpu = gpu->MeanLoss(200, 300);
  EXPECT_EQ(again->MeanLoss(200, 300), l_gpu) << type;
  EXPECT_NEAR(l_gpu, l_cpu, 0.01) << type << ": gpu " << l_gpu << " cpu " << l_cpu;
  EXPECT_EQ(gpu->Checksum().Hex(), again->Checksum().Hex()) << type;
  auto bf16 = MakeTrainerRun(ModelJob(type, "cuda", "bf16"));
  auto fp16 = MakeTrainerRun(ModelJob(type, "cuda", "fp16"));
  ASSERT_TRUE(bf16 && fp16);
  EXPECT_NEAR(bf16->MeanLoss(200, 300), l_gpu, 0.02) << type;
  EXPECT_NEAR(fp16->MeanLoss(200, 300), l_gpu, 0.02) << type;
}

INSTANTIATE_TEST_SUITE_P(Models, ModelGpuTest,
                         ::testing::Values("dcn_v2", "deepfm", "wide_deep", "mmoe"));

#ifdef TANDEM_HAVE_CUDA
TEST(TrainerGpuTest, DeviceAllReducePathGivesTheSameBitsAsNoCollective) {
  SKIP_WITHOUT_GPU();
  ::tandem::testing::TempDir dir;
  auto store = collective::FileStore::Open(dir.path() + "/store");
  ASSERT_TRUE(store.ok()) << store.status();
  collective::NcclOptions no;
  no.store = store->get();
  auto nccl = collective::NcclCollective::Create(no);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  ASSERT_TRUE((*nccl)->device_memory());

  auto plain = MakeTrainerRun(Job("cuda", "fp32"));
  ASSERT_TRUE(plain);
  // The same job with the one-rank group: world 1, so the loss normaliser is the same.
  auto grouped = MakeTrainerRun(Job("cuda", "fp32"), nccl->get());
  ASSERT_TRUE(grouped);
  for (int64_t s = 0; s < 50; ++s) {
    auto a = plain->Step(s);
    auto b = grouped->Step(s);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << " " << b.status();
    ASSERT_EQ(a->loss, b->loss) << "step " << s;
  }
  EXPECT_EQ(plain->Checksum().Hex(), grouped->Checksum().Hex());
}
#endif

}  // namespace
}  // namespace tandem::worker
