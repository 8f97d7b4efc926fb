// Resuming a job restores every PS shard from the committed checkpoint (issue 6, item 2): onto
// another number of shards (re-partitioned from the durable copy), onto a lost shard directory
// (from the durable copy), and over a damaged local file (repaired, named in the log). At k = 0
// each ends with exactly the model of the job that was continued on its own shards.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>

#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSteps = 40;      // the first run; checkpoints every 20 steps and its last
constexpr int64_t kMoreSteps = 60;  // the continued runs
constexpr int64_t kCheckpointStep = kSteps - 1;
constexpr int64_t kPreviousStep = kCheckpointStep - 20;  // the checkpoint before it

// `final_part`: what the shards make of the job's last checkpoint (checkpoint.final_part).
void WriteJob(const TempDir& dir, const std::string& final_part) {
  std::string yaml = SmallJob(dir.path(), kSteps);
  const std::string key = "checkpoint:\n  dir: " + dir.path() + "/ckpt\n";
  yaml.replace(yaml.find(key), key.size(),
               key + "  every_steps: 20\n  keep: 2\n  final_part: " + final_part + "\n");
  WriteFile(dir.File("job.yaml"), yaml);
}

// The final metrics line of a finished run.
nlohmann::json FinalLine(const TempDir& dir) {
  auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
  if (lines.empty() || !lines.back().value("final", false)) return {};
  return lines.back();
}

// A copy of the stopped job `from` in `to` (data, checkpoints, outputs), its config naming `to`.
void CopyJob(const TempDir& from, const TempDir& to, const std::string& final_part = "full") {
  for (const char* sub : {"ps", "ckpt", "out"})
    fs::copy(from.path() + "/" + sub, to.path() + "/" + sub, fs::copy_options::recursive);
  WriteJob(to, final_part);
}

// Shard `shard`'s part of the checkpoint LATEST names (its "detail").
nlohmann::json LatestPart(const TempDir& dir, int shard) {
  const auto latest = nlohmann::json::parse(ReadFile(dir.path() + "/ckpt/LATEST"));
  const auto manifest = nlohmann::json::parse(
      ReadFile(dir.path() + "/ckpt/" + latest["manifest"].get<std::string>()));
  for (const auto& part : manifest["parts"])
    if (part["name"] == "shard-" + std::to_string(shard)) return part["detail"];
  return {};
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// The `nth` SST of shard `shard`'s part of the checkpoint LATEST names: (db_name, path in the
// pool); empty when there are fewer.
std::pair<std::string, std::string> LatestSst(const TempDir& dir, int shard, int nth = 0) {
  const auto latest = nlohmann::json::parse(ReadFile(dir.path() + "/ckpt/LATEST"));
  const auto manifest = nlohmann::json::parse(
      ReadFile(dir.path() + "/ckpt/" + latest["manifest"].get<std::string>()));
  for (const auto& part : manifest["parts"]) {
    if (part["name"] != "shard-" + std::to_string(shard)) continue;
    for (const auto& f : part["detail"]["files"])
      if (f["sst"].get<bool>() && nth-- == 0)
        return {f["db_name"].get<std::string>(), f["path"].get<std::string>()};
  }
  return {};
}

// The local restore point directory of `shard` at the checkpoint step.
std::string LocalRestorePoint(const TempDir& dir, int shard) {
  const std::string restore = dir.path() + "/ps/shard-" + std::to_string(shard) + "/restore";
  const std::string step = "-s" + std::to_string(kCheckpointStep) + "-";
  for (const auto& e : fs::directory_iterator(restore)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.find(step) != std::string::npos) return e.path().string();
  }
  ADD_FAILURE() << "no restore point of step " << kCheckpointStep << " in " << restore;
  return "";
}

std::string PsLog(const TempDir& dir, int shard) {
  return ReadFile(dir.path() + "/out/logs/ps-" + std::to_string(shard) + ".log");
}

class RestoreTest : public ::testing::Test {
 protected:
  // One 2 PS x 2 worker run to kSteps (checkpointed at its last step, every part full), shared
  // by every test: each test works on a copy. The reference: that run continued on its own 2
  // shards. The same run with a delta as its last checkpoint (checkpoint.final_part: delta):
  // the same model, its last checkpoint each shard's part of step 19 plus its change log since.
  static void SetUpTestSuite() {
    first_ = new TempDir;
    WriteJob(*first_, "full");
    auto r = Local(*first_, 2, 2);
    ASSERT_EQ(r.exit.exit_code, 0) << r.output;
    first_delta_ = new TempDir;
    WriteJob(*first_delta_, "delta");
    r = Local(*first_delta_, 2, 2);
    ASSERT_EQ(r.exit.exit_code, 0) << r.output;
    reference_ = new TempDir;
    CopyJob(*first_, *reference_);
    r = Local(*reference_, 2, 2, {"train.steps=" + std::to_string(kMoreSteps)});
    ASSERT_EQ(r.exit.exit_code, 0) << r.output;
    expected_ = new nlohmann::json(FinalLine(*reference_));
    ASSERT_TRUE(expected_->contains("model_checksum")) << *expected_;
  }
  static void TearDownTestSuite() {
    delete first_delta_;
    delete expected_;
    delete reference_;
    delete first_;
  }

  // Continues the copy `dir` to kMoreSteps on `ps` shards and checks it ends with the
  // reference's model and held-out AUC.
  void ContinueAndExpectTheReferenceModel(const TempDir& dir, int ps) {
    ASSERT_NE(expected_, nullptr);
    auto r = Local(dir, ps, 2, {"train.steps=" + std::to_string(kMoreSteps)});
    ASSERT_EQ(r.exit.exit_code, 0) << r.output;
    const nlohmann::json final_line = FinalLine(dir);
    ASSERT_TRUE(final_line.contains("model_checksum")) << final_line;
    EXPECT_EQ(final_line["model_checksum"], (*expected_)["model_checksum"]) << ps << " shards";
    EXPECT_EQ(final_line["auc"], (*expected_)["auc"]) << ps << " shards";
    EXPECT_EQ(final_line["step"], (*expected_)["step"]);
  }

  static TempDir* first_;
  static TempDir* first_delta_;
  static TempDir* reference_;
  static nlohmann::json* expected_;
};

TempDir* RestoreTest::first_ = nullptr;
TempDir* RestoreTest::first_delta_ = nullptr;
TempDir* RestoreTest::reference_ = nullptr;
nlohmann::json* RestoreTest::expected_ = nullptr;

TEST_F(RestoreTest, TwoShardCheckpointContinuesOnThreeAndOnOneShardWithTheSameModel) {
  for (int ps : {3, 1}) {
    TempDir dir;
    CopyJob(*first_, dir);
    ContinueAndExpectTheReferenceModel(dir, ps);
    for (int i = 0; i < ps; ++i)
      EXPECT_NE(PsLog(dir, i).find("re-partitioned"), std::string::npos) << PsLog(dir, i);
  }
}

TEST_F(RestoreTest, LostShardDirectoryIsRestoredFromTheDurableCopy) {
  TempDir dir;
  CopyJob(*first_, dir);
  fs::remove_all(dir.path() + "/ps/shard-1");
  ContinueAndExpectTheReferenceModel(dir, 2);
  EXPECT_NE(PsLog(dir, 1).find("from the durable copy"), std::string::npos) << PsLog(dir, 1);
  EXPECT_NE(PsLog(dir, 0).find("from its local restore point"), std::string::npos);
}

TEST_F(RestoreTest, DamagedLocalSstIsRepairedAndNamed) {
  TempDir dir;
  CopyJob(*first_, dir);
  const auto [db_name, pool_path] = LatestSst(dir, 0);
  const std::string local = LocalRestorePoint(dir, 0) + "/" + db_name;
  FlipByte(local, fs::file_size(local) / 2);
  ContinueAndExpectTheReferenceModel(dir, 2);
  const std::string log = PsLog(dir, 0);
  EXPECT_NE(log.find(db_name + " is damaged"), std::string::npos) << log;
  EXPECT_NE(log.find(pool_path), std::string::npos) << log;
}

// A damaged file in the durable copy of LATEST (and the same SST damaged locally): the chief,
// which reads every file of the checkpoint a job starts from, skips it for the previous one,
// naming the file; the job resumes from there and, at k = 0, still ends with the same model.
TEST_F(RestoreTest, DamagedDurableSstSkipsToThePreviousCheckpoint) {
  TempDir dir;
  CopyJob(*first_, dir);
  // An SST only the newest checkpoint has (the pool shares the others with the previous one).
  const auto previous = nlohmann::json::parse(ReadFile(
      dir.path() + "/ckpt/ckpt-" + std::string(12 - std::to_string(kPreviousStep).size(), '0') +
      std::to_string(kPreviousStep) + "/MANIFEST"));
  std::set<std::string> older;
  for (const auto& part : previous["parts"])
    for (const auto& f : part["files"]) older.insert(f["path"].get<std::string>());
  std::string db_name, pool_path;
  for (int i = 0; i < 8 && db_name.empty(); ++i) {
    auto sst = LatestSst(dir, 1, i);
    if (sst.first.empty()) break;
    if (!older.count("shards/shard-1/" + sst.second)) std::tie(db_name, pool_path) = sst;
  }
  ASSERT_FALSE(db_name.empty()) << "every SST of the newest part is shared with the previous";
  const std::string local = LocalRestorePoint(dir, 1) + "/" + db_name;
  FlipByte(local, fs::file_size(local) / 2);
  FlipByte(dir.path() + "/ckpt/shards/shard-1/" + pool_path, 10);
  ContinueAndExpectTheReferenceModel(dir, 2);
  const std::string chief = ReadFile(dir.path() + "/out/logs/chief-0.log");
  EXPECT_NE(chief.find(pool_path), std::string::npos) << chief;
  EXPECT_NE(chief.find("checkpoint of step " + std::to_string(kCheckpointStep) + " skipped"),
            std::string::npos)
      << chief;
  EXPECT_NE(chief.find("resuming from the checkpoint of step " + std::to_string(kPreviousStep)),
            std::string::npos)
      << chief;
}

// The job's last checkpoint as a delta (issue 21: the end of a job costs what it wrote since the
// previous checkpoint): shard 1's directory is lost, so it rebuilds the part from the durable
// copy (step 19's files, then the change log replayed); shard 0's own restore point is damaged,
// and a delta's restore point files are in no durable copy, so it does the same, naming the
// file. Both end with the model of the run whose every checkpoint was full.
TEST_F(RestoreTest, FinalDeltaPartIsResumedFromTheDurableCopyWhenItsRestorePointIsLost) {
  TempDir dir;
  CopyJob(*first_delta_, dir, "delta");
  for (int shard : {0, 1}) {
    const nlohmann::json part = LatestPart(dir, shard);
    ASSERT_EQ(part.value("base_step", int64_t{-1}), kPreviousStep) << part;
    ASSERT_FALSE(part["local_files"].empty()) << part;
  }
  std::string damaged;
  const nlohmann::json part0 = LatestPart(dir, 0);
  for (const auto& f : part0["local_files"])
    if (f["sst"].get<bool>()) damaged = f["db_name"].get<std::string>();
  ASSERT_FALSE(damaged.empty());
  const std::string local = LocalRestorePoint(dir, 0) + "/" + damaged;
  FlipByte(local, fs::file_size(local) / 2);
  fs::remove_all(dir.path() + "/ps/shard-1");
  ContinueAndExpectTheReferenceModel(dir, 2);
  EXPECT_NE(PsLog(dir, 1).find("from the durable copy"), std::string::npos) << PsLog(dir, 1);
  const std::string log = PsLog(dir, 0);
  EXPECT_NE(log.find(damaged + " is damaged"), std::string::npos) << log;
  EXPECT_NE(log.find("restoring it from the durable copy instead"), std::string::npos) << log;
}

// The same delta resumed as is (each shard's own restore point, checked against the part's
// local_files) and onto three shards (every old part rebuilt and re-partitioned).
TEST_F(RestoreTest, FinalDeltaPartContinuesOnTheSameAndOnThreeShardsWithTheSameModel) {
  for (int ps : {2, 3}) {
    TempDir dir;
    CopyJob(*first_delta_, dir, "delta");
    ContinueAndExpectTheReferenceModel(dir, ps);
    for (int i = 0; i < ps; ++i)
      EXPECT_NE(PsLog(dir, i).find(ps == 2 ? "from its local restore point" : "re-partitioned"),
                std::string::npos)
          << PsLog(dir, i);
  }
}

// A damaged change log segment in the durable copy: the chief skips the delta for the previous
// checkpoint, naming the file, and the job still ends with the same model.
TEST_F(RestoreTest, DamagedChangeLogSkipsToThePreviousCheckpoint) {
  TempDir dir;
  CopyJob(*first_delta_, dir, "delta");
  std::string segment;
  const nlohmann::json part1 = LatestPart(dir, 1);
  for (const auto& f : part1["files"])
    if (f.value("log", false)) segment = f["path"].get<std::string>();
  ASSERT_FALSE(segment.empty()) << part1;
  const std::string path = dir.path() + "/ckpt/shards/shard-1/" + segment;
  FlipByte(path, fs::file_size(path) / 2);
  ContinueAndExpectTheReferenceModel(dir, 2);
  const std::string chief = ReadFile(dir.path() + "/out/logs/chief-0.log");
  EXPECT_NE(chief.find(segment), std::string::npos) << chief;
  EXPECT_NE(chief.find("resuming from the checkpoint of step " + std::to_string(kPreviousStep)),
            std::string::npos)
      << chief;
}

}  // namespace
}  // namespace tandem::testing
