// `tandem checksum --config JOB [--sparse]` as a user runs it on a stopped job: a real binary
// reading the shard directories that in-process shards (or a real `tandem local` job) wrote, and
// the job's dense.ckpt.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/model_checksum.h"
#include "server/ps/shard.h"
#include "server/ps/shard_options.h"
#include "server/ps/shard_test_util.h"
#include "tests/cluster/daemon_fixture.h"

namespace tandem::testing {
namespace {

CommandResult Tandem(std::vector<std::string> args) {
  args.insert(args.begin(), TANDEM_BINARY);
  return RunCommand(args, {}, {"TF_CONFIG"});
}

// A 2-shard job whose table C2 admits ids only on their second step, so admission counters are
// part of the sum too. The config lists one PS; the job "ran" with two (`--ps 2`).
class ChecksumCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = dir_.File("job.yaml");
    WriteFile(config_,
              LoopbackConfig(dir_.path()) + "tables:\n  C2:\n    admission:\n      min_count: 2\n");
    auto job = config::LoadJobConfig(config_, {});
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
    job_.cluster.ps.assign(2, "127.0.0.1:0");
  }

  // Trains both shards for `steps` steps (every rank of job_ pushes), closes them and returns
  // their sum.
  ModelChecksum Train(int64_t steps, uint64_t* rows) {
    ModelChecksum sum;
    *rows = 0;
    for (uint32_t i = 0; i < 2; ++i) {
      const ps::ShardOptions o = ps::ShardOptionsFromConfig(job_, i);
      auto shard = ps::Shard::Open(o);
      EXPECT_TRUE(shard.ok()) << shard.status();
      if (!shard.ok()) return sum;
      for (int64_t step = 0; step < steps; ++step) {
        for (uint32_t rank = 0; rank < job_.cluster.workers.size(); ++rank) {
          std::vector<uint64_t> c1;
          for (uint64_t id = 0; id < 30; ++id) c1.push_back(id * 7 + (step + rank) % 3);
          auto p = ps::testing::MakePush(step, rank, {{0, c1}, {1, {100 + uint64_t(step), 5}}}, o);
          auto ack = (*shard)->Push(p.input());
          EXPECT_TRUE(ack.ok()) << ack.status();
        }
      }
      uint64_t n = 0;
      EXPECT_TRUE((*shard)->AddToChecksum(&sum, &n).ok());
      *rows += n;
    }
    return sum;
  }

  TempDir dir_;
  std::string config_;
  config::JobConfig job_;
};

TEST_F(ChecksumCliTest, PrintsTheSumOfTheShardsAndCanBeRunAgain) {
  uint64_t rows = 0;
  const std::string want = Train(6, &rows).Hex();
  ASSERT_GT(rows, 0u);
  for (int run = 0; run < 2; ++run) {  // recovery leaves a restore point: the sum must not move
    auto r = Tandem({"checksum", "--config", config_, "--ps", "2", "--sparse"});
    ASSERT_EQ(r.exit.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(want + "\n"), std::string::npos) << "want " << want << ":\n"
                                                             << r.output;
    EXPECT_NE(r.output.find("rows: " + std::to_string(rows) + "\n"), std::string::npos) << r.output;
  }
  // --set reaches the config the same way.
  auto r = Tandem({"checksum", "--config", config_, "--set",
                   "cluster.ps=[\"127.0.0.1:0\", \"127.0.0.1:0\"]", "--sparse"});
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
}

TEST_F(ChecksumCliTest, ShardInUseExits1AndNothingIsChanged) {
  uint64_t rows = 0;
  const std::string want = Train(3, &rows).Hex();
  {
    auto held = ps::Shard::Open(ps::ShardOptionsFromConfig(job_, 1));
    ASSERT_TRUE(held.ok()) << held.status();
    auto r = Tandem({"checksum", "--config", config_, "--ps", "2", "--sparse"});
    EXPECT_EQ(r.exit.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("in use"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find(want), std::string::npos) << r.output;
  }
  auto r = Tandem({"checksum", "--config", config_, "--ps", "2", "--sparse"});
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
}

// A shard count that does not describe the job is refused, never summed: one shard of two would
// be a wrong value that looks right.
TEST_F(ChecksumCliTest, ShardCountThatDoesNotMatchExits3) {
  uint64_t rows = 0;
  Train(2, &rows);
  auto one_shard = Tandem({"checksum", "--config", config_, "--sparse"});
  EXPECT_EQ(one_shard.exit.exit_code, 3) << one_shard.output;
  EXPECT_NE(one_shard.output.find("shard-1"), std::string::npos) << one_shard.output;
  auto three_shards = Tandem({"checksum", "--config", config_, "--ps", "3", "--sparse"});
  EXPECT_EQ(three_shards.exit.exit_code, 3) << three_shards.output;
  EXPECT_NE(three_shards.output.find("shard-2"), std::string::npos) << three_shards.output;
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/ps/shard-1"))
      << "a refused run removed state";
}

// Fewer workers than the job had would replay the log into another model.
TEST_F(ChecksumCliTest, LogOfMoreWorkersThanTheConfigExits1) {
  job_.cluster.workers.assign(2, "127.0.0.1:0");
  uint64_t rows = 0;
  const std::string want = Train(2, &rows).Hex();
  auto r = Tandem({"checksum", "--config", config_, "--ps", "2", "--sparse"});
  EXPECT_EQ(r.exit.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("does not match"), std::string::npos) << r.output;
  r = Tandem({"checksum", "--config", config_, "--ps", "2", "--workers", "2", "--sparse"});
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
}

TEST_F(ChecksumCliTest, BadConfigExits3) {
  auto r = Tandem({"checksum", "--config", config_, "--set", "train.steps=many", "--sparse"});
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("--set train.steps=many"), std::string::npos) << r.output;
  WriteFile(dir_.File("bad.yaml"), "cluster:\n  ps: 7\n");
  r = Tandem({"checksum", "--config", dir_.File("bad.yaml"), "--sparse"});
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/ps")) << "a bad config created state";
}

// The shards alone are not the model: without --sparse a missing dense.ckpt is an error that
// names it, and no shard is opened.
TEST_F(ChecksumCliTest, WithoutSparseAMissingDenseFileExits3NamingIt) {
  uint64_t rows = 0;
  Train(2, &rows);
  auto r = Tandem({"checksum", "--config", config_, "--ps", "2"});
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find(dir_.path() + "/out/model/dense.ckpt"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--sparse"), std::string::npos) << r.output;
}

TEST_F(ChecksumCliTest, ADirectoryWithoutACheckpointExits3AndCheckpointExcludesConfig) {
  auto r = Tandem({"checksum", "--checkpoint", dir_.path()});
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("NOT_FOUND"), std::string::npos) << r.output;
  r = Tandem({"checksum", "--checkpoint", dir_.path(), "--config", config_});
  EXPECT_EQ(r.exit.exit_code, 2) << r.output;  // one or the other
  r = Tandem({"checksum"});
  EXPECT_EQ(r.exit.exit_code, 2) << r.output;
}

// A small synthetic job under `dir` (local_job_test.cc's SmallJob, shorter), shards on RocksDB.
std::string SmallJob(const std::string& dir, int64_t steps) {
  return "cluster:\n  chief: [\"127.0.0.1:0\"]\n  ps: [\"127.0.0.1:0\"]\n"
         "  workers: [\"127.0.0.1:0\"]\n"
         "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 1]\n"
         "tables:\n  default:\n    optimizer: adagrad\n    lr: 0.3\n"
         "    init: {dist: uniform, scale: 0.01}\n"
         "data:\n  format: synthetic\n  num_categorical: 26\n"
         "  synthetic:\n    vocab: 200\n    zipf: 1.1\n    eval_rows: 2000\n"
         "train:\n  steps: " +
         std::to_string(steps) +
         "\n  batch_size: 128\n  seed: 7\n  dense_optimizer: adam\n  dense_lr: 0.01\n"
         "  log_every_steps: 20\n  eval_every_steps: 0\n"
         "ps:\n  data_dir: " +
         dir + "/ps\n  storage: rocksdb\n" +
         "chief:\n  heartbeat_interval_ms: 200\n  heartbeat_timeout_ms: 5000\n"
         "collective:\n  timeout_ms: 20000\n"
         "checkpoint:\n  dir: " +
         dir + "/ckpt\noutput:\n  dir: " + dir + "/out\n";
}

// model_checksum of the last line of metrics.jsonl ("" when there is none).
std::string FinalModelChecksum(const std::string& metrics_path) {
  std::istringstream in(ReadFile(metrics_path));
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  std::smatch m;
  static const std::regex kChecksum("\"model_checksum\"\\s*:\\s*\"([0-9a-f]{32})\"");
  return std::regex_search(last, m, kChecksum) ? m[1].str() : "";
}

// The acceptance check of DESIGN §12: the checksum of a stopped job, read back from its files,
// is the one the job reported; a corrupt dense file is refused, never summed.
TEST(ChecksumLocalJobTest, FullChecksumEqualsTheFinalMetricsLineAndCorruptionExits3) {
  TempDir dir;
  const std::string config = dir.File("job.yaml");
  WriteFile(config, SmallJob(dir.path(), 40));
  auto job = RunCommand({TANDEM_BINARY, "local", "--config", config, "--ps", "2", "--workers", "2"},
                        {}, {"TF_CONFIG"}, std::chrono::milliseconds(100000));
  ASSERT_EQ(job.exit.exit_code, 0) << job.output;
  const std::string want = FinalModelChecksum(dir.path() + "/out/metrics.jsonl");
  ASSERT_EQ(want.size(), 32u) << ReadFile(dir.path() + "/out/metrics.jsonl");
  const std::string dense = dir.path() + "/out/model/dense.ckpt";
  ASSERT_TRUE(std::filesystem::exists(dense));

  auto r = Tandem({"checksum", "--config", config, "--ps", "2", "--workers", "2"});
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(want + "\n"), std::string::npos) << "want " << want << ":\n" << r.output;
  EXPECT_NE(r.output.find("dense step: 39\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
  auto sparse = Tandem({"checksum", "--config", config, "--ps", "2", "--workers", "2", "--sparse"});
  ASSERT_EQ(sparse.exit.exit_code, 0) << sparse.output;
  EXPECT_EQ(sparse.output.find(want), std::string::npos) << "--sparse printed the full sum";

  {
    std::fstream f(dense, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x01;
    f.seekp(100);
    f.write(&c, 1);
  }
  r = Tandem({"checksum", "--config", config, "--ps", "2", "--workers", "2"});
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find(dense), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(want), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tandem::testing
