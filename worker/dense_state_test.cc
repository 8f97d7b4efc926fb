// The dense state file: round trip, checksum equal to Trainer::DenseChecksum, restore, and
// files that must be refused. Linked into trainer_tests (whose main() is in trainer_test.cc).
#include "worker/dense_state.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/crc32c.h"
#include "common/embedding/table_spec.h"
#include "common/testing/local_embedding_table.h"
#include "common/testing/test_util.h"
#include "worker/data/pipeline.h"
#include "worker/data/record_source.h"
#include "worker/device/backend_factory.h"
#include "worker/trainer.h"
#include "worker/trainer_test_util.h"

namespace tandem::worker {
namespace {

using ::tandem::testing::ReadFile;
using ::tandem::testing::TempDir;
using ::tandem::testing::WriteFile;

config::JobConfig Job(const std::string& optimizer) {
  auto job = config::ParseJobConfig(
      "data:\n  format: synthetic\n  num_categorical: 26\n  synthetic:\n    vocab: 200\n"
      "model:\n  embedding_dim: 8\n  bottom_mlp: [16, 8]\n  top_mlp: [16, 1]\n"
      "train:\n  batch_size: 64\n  seed: 7\n  dense_optimizer: " +
          optimizer + "\n  dense_lr: 0.01\n",
      "dense_state.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

using Run = testing::TrainerRun;

// A trainer after `steps` steps of the synthetic stream.
std::unique_ptr<Run> Trained(const std::string& optimizer, int64_t steps) {
  auto r = testing::MakeTrainerRun(Job(optimizer));
  for (int64_t s = 0; s < steps; ++s) {
    auto st = r->Step(s);
    EXPECT_TRUE(st.ok()) << st.status();
  }
  return r;
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DenseStateTest, RoundTripKeepsEveryTensorAndTheStep) {
  auto run = Trained("adam", 5);
  TempDir dir;
  const std::string path = dir.File("model/dense.ckpt");  // the directory is created
  ASSERT_TRUE(WriteDenseState(path, 4, *run->trainer).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto read = ReadDenseState(path);
  ASSERT_TRUE(read.ok()) << read.status();
  const DenseState want = SnapshotDenseState(*run->trainer, 4);
  EXPECT_EQ(read->step, 4);
  EXPECT_EQ(read->optimizer, "adam");
  ASSERT_EQ(read->tensors.size(), want.tensors.size());
  ASSERT_EQ(read->tensors.size(), run->trainer->model().param_info().size());
  for (size_t i = 0; i < want.tensors.size(); ++i) {
    EXPECT_EQ(read->tensors[i].name, want.tensors[i].name);
    EXPECT_EQ(read->tensors[i].shape, want.tensors[i].shape);
    EXPECT_TRUE(SameBits(read->tensors[i].values, want.tensors[i].values)) << i;
    EXPECT_TRUE(SameBits(read->tensors[i].slots, want.tensors[i].slots)) << i;
    EXPECT_EQ(read->tensors[i].slots.size(), 2 * read->tensors[i].values.size());  // adam m, v
  }
  EXPECT_EQ(read->optimizer_scalars.size(), 2u);  // beta1^t, beta2^t
  EXPECT_TRUE(SameBits(read->optimizer_scalars, want.optimizer_scalars));
  EXPECT_EQ(EncodeDenseState(*read), ReadFile(path));
}

TEST(DenseStateTest, ChecksumEqualsTheTrainersDenseChecksum) {
  for (const char* opt : {"adam", "sgd", "adagrad"}) {
    auto run = Trained(opt, 7);
    TempDir dir;
    DenseFileInfo info;
    ASSERT_TRUE(
        WriteDenseStateFile(dir.File("d"), SnapshotDenseState(*run->trainer, 6), &info).ok());
    const std::string bytes = ReadFile(dir.File("d"));
    EXPECT_EQ(info.size_bytes, bytes.size());
    EXPECT_EQ(info.crc32c, Crc32c(bytes.data(), bytes.size()));
    auto read = ReadDenseState(dir.File("d"));
    ASSERT_TRUE(read.ok()) << read.status();
    const ModelChecksum want = run->trainer->DenseChecksum();
    const ModelChecksum got = DenseStateChecksum(*read);
    EXPECT_EQ(got.high(), want.high()) << opt;
    EXPECT_EQ(got.low(), want.low()) << opt;
    // and it sees a difference: one more step moves it
    auto later = Trained(opt, 8);
    EXPECT_NE(DenseStateChecksum(SnapshotDenseState(*later->trainer, 7)).Hex(), got.Hex()) << opt;
  }
}

TEST(DenseStateTest, RestoreGivesIdenticalParamsAndOptimizerState) {
  auto trained = Trained("adam", 6);
  TempDir dir;
  ASSERT_TRUE(WriteDenseState(dir.File("d"), 5, *trained->trainer).ok());
  auto fresh = Trained("adam", 0);
  ASSERT_FALSE(SameBits(fresh->trainer->model().params(), trained->trainer->model().params()));
  auto read = ReadDenseState(dir.File("d"));
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(RestoreDenseState(*read, fresh->trainer.get()).ok());
  const Trainer& a = *fresh->trainer;
  const Trainer& b = *trained->trainer;
  EXPECT_TRUE(SameBits(a.model().params(), b.model().params()));
  EXPECT_TRUE(SameBits(a.optimizer().state(), b.optimizer().state()));
  EXPECT_EQ(a.DenseChecksum().Hex(), b.DenseChecksum().Hex());
}

TEST(DenseStateTest, RestoreRefusesAnotherModelOrOptimizerAndChangesNothing) {
  auto adam = Trained("adam", 2);
  const DenseState state = SnapshotDenseState(*adam->trainer, 1);
  auto sgd = Trained("sgd", 0);
  const std::string before = sgd->trainer->DenseChecksum().Hex();
  Status s = RestoreDenseState(state, sgd->trainer.get());
  EXPECT_TRUE(s.IsInvalidArgument()) << s;
  EXPECT_NE(s.message().find("adam"), std::string::npos) << s;

  DenseState reshaped = state;
  reshaped.tensors[0].shape = {reshaped.tensors[0].shape[1], reshaped.tensors[0].shape[0]};
  auto other = Trained("adam", 0);
  const std::string other_before = other->trainer->DenseChecksum().Hex();
  s = RestoreDenseState(reshaped, other->trainer.get());
  EXPECT_TRUE(s.IsInvalidArgument()) << s;
  EXPECT_NE(s.message().find(state.tensors[0].name), std::string::npos) << s;
  DenseState fewer = state;
  fewer.tensors.pop_back();
  EXPECT_TRUE(RestoreDenseState(fewer, other->trainer.get()).IsInvalidArgument());
  EXPECT_EQ(sgd->trainer->DenseChecksum().Hex(), before);
  EXPECT_EQ(other->trainer->DenseChecksum().Hex(), other_before);
}

class DenseStateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto run = Trained("adam", 1);
    path_ = dir_.File("dense.ckpt");
    ASSERT_TRUE(WriteDenseState(path_, 0, *run->trainer).ok());
    bytes_ = ReadFile(path_);
  }
  Status Read(const std::string& bytes) {
    WriteFile(path_, bytes);
    return ReadDenseState(path_).status();
  }

  TempDir dir_;
  std::string path_;
  std::string bytes_;
};

TEST_F(DenseStateFileTest, TruncatedFileIsDataLossNamingTheFile) {
  for (size_t keep : {bytes_.size() - 1, bytes_.size() / 2, size_t{13}, size_t{3}, size_t{0}}) {
    Status s = Read(bytes_.substr(0, keep));
    EXPECT_TRUE(s.IsDataLoss()) << keep << ": " << s;
    EXPECT_NE(s.message().find(path_), std::string::npos) << s;
  }
  Status s = Read(bytes_ + "x");
  EXPECT_TRUE(s.IsDataLoss()) << s;
}

TEST_F(DenseStateFileTest, AnyFlippedByteIsDataLossNamingTheFile) {
  for (size_t at : {size_t{20}, bytes_.size() / 3, bytes_.size() - 6, bytes_.size() - 1}) {
    std::string bad = bytes_;
    bad[at] ^= 0x10;
    Status s = Read(bad);
    EXPECT_TRUE(s.IsDataLoss()) << at << ": " << s;
    EXPECT_NE(s.message().find(path_), std::string::npos) << s;
  }
  std::string bad_magic = bytes_;
  bad_magic[0] = 'X';
  Status s = Read(bad_magic);
  EXPECT_TRUE(s.IsDataLoss()) << s;
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s;
}

TEST_F(DenseStateFileTest, UnknownVersionIsInvalidArgument) {
  std::string future = bytes_;
  future[8] = 2;  // the u32 version after the 8-byte magic
  const uint32_t crc = Crc32c(future.data(), future.size() - 4);
  for (int i = 0; i < 4; ++i) future[future.size() - 4 + i] = static_cast<char>(crc >> (8 * i));
  Status s = Read(future);
  EXPECT_TRUE(s.IsInvalidArgument()) << s;
  EXPECT_NE(s.message().find("version 2"), std::string::npos) << s;
  EXPECT_NE(s.message().find(path_), std::string::npos) << s;
}

TEST_F(DenseStateFileTest, MissingFileIsNotFound) {
  auto r = ReadDenseState(dir_.File("nothing"));
  EXPECT_TRUE(r.status().IsNotFound()) << r.status();
  EXPECT_NE(r.status().message().find(dir_.File("nothing")), std::string::npos) << r.status();
}

TEST_F(DenseStateFileTest, RewriteReplacesTheOldFile) {
  auto run = Trained("adam", 3);
  ASSERT_TRUE(WriteDenseState(path_, 2, *run->trainer).ok());
  auto read = ReadDenseState(path_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->step, 2);
  EXPECT_EQ(DenseStateChecksum(*read).Hex(), run->trainer->DenseChecksum().Hex());
}

}  // namespace
}  // namespace tandem::worker
