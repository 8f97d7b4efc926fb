#include "server/chief/checkpoint_manifest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/crc32c.h"
#include "common/slot_map.h"
#include "common/testing/test_util.h"
#include "server/chief/checkpoint_coordinator.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tandem::chief {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

bool HasLineWith(const std::vector<std::string>& lines, const std::string& needle) {
  for (const std::string& l : lines) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// Writes `content` at checkpoint_dir/rel and returns its manifest entry.
ManifestFile MakeFile(const std::string& dir, const std::string& rel, const std::string& content) {
  fs::create_directories(fs::path(dir + "/" + rel).parent_path());
  WriteFile(dir + "/" + rel, content);
  return ManifestFile{rel, content.size(), Crc32c(content.data(), content.size())};
}

Manifest SampleManifest(int64_t step) {
  Manifest m;
  m.step = step;
  m.job_id = "0123456789abcdef0123456789abcdef";
  m.timeline = 2;
  m.term = 5;
  m.generation = 7;
  m.num_ps = 2;
  m.num_workers = 3;
  m.config_hash = "00112233aabbccdd";
  m.config_yaml = "train:\n  batch_size: 256\n  note: \"caf\xc3\xa9\"\n";
  m.determinism_class = "cpu=x86-64-v3;blas=openblas/Haswell;blas_threads=1;gpu=none";
  m.records_consumed = RecordsConsumedAfter(step, m.num_workers, 256);
  m.seed = 0xfedcba9876543210ull;
  ManifestPart shard{"shard-0",
                     {{"shards/shard-0/sst/000012-0badf00d.sst", 1234, 0x0badf00d},
                      {"shards/shard-0/step-000000000010/CURRENT", 16, 0xffffffff}},
                     {{"shard", 0}, {"step", step}, {"bytes_copied", 1250}}};
  ManifestPart dense{"dense", {{CheckpointDirName(step) + "/dense.ckpt", 99, 1}}, {}};
  m.parts = {shard, dense};
  return m;
}

// Commits a checkpoint at `step` whose single part has one real file.
Manifest CommitWithFile(const std::string& dir, int64_t step, bool durable = false) {
  Manifest m = SampleManifest(step);
  m.parts = {ManifestPart{
      "dense",
      {MakeFile(dir, CheckpointDirName(step) + "/dense.ckpt", "dense@" + std::to_string(step))},
      {}}};
  Status s = CommitCheckpoint(dir, m, durable);
  EXPECT_TRUE(s.ok()) << s;
  return m;
}

std::string ManifestPath(const std::string& dir, int64_t step) {
  return dir + "/" + CheckpointDirName(step) + "/MANIFEST";
}

// Flips one byte of `path` at `offset` (negative: from the end).
void FlipByte(const std::string& path, long offset) {
  std::string text = ReadFile(path);
  size_t at = offset >= 0 ? static_cast<size_t>(offset) : text.size() + offset;
  text[at] ^= 0x20;
  WriteFile(path, text);
}

// --- format ---------------------------------------------------------------------------------

TEST(CheckpointManifestTest, EncodeDecodeRoundTrips) {
  Manifest m = SampleManifest(10);
  EXPECT_EQ(m.records_consumed, 11 * 3 * 256);
  auto back = DecodeManifest(EncodeManifest(m), "MANIFEST");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, m);
  EXPECT_EQ(EncodeManifest(*back), EncodeManifest(m));
}

TEST(CheckpointManifestTest, DecodeRejectsUnknownFormatVersion) {
  Manifest m = SampleManifest(10);
  m.format_version = 2;
  auto back = DecodeManifest(EncodeManifest(m), "ckpt/MANIFEST");
  ASSERT_FALSE(back.ok());
  EXPECT_TRUE(back.status().IsInvalidArgument()) << back.status();
  EXPECT_NE(back.status().message().find("ckpt/MANIFEST"), std::string::npos);
}

TEST(CheckpointManifestTest, DecodeRejectsMalformedInputNamingTheFile) {
  const std::string good = EncodeManifest(SampleManifest(10));
  std::string flipped = good;
  flipped[good.find("\"term\": 5") + 8] = '6';  // still valid JSON, wrong self-CRC
  Manifest escaping = SampleManifest(10);
  escaping.parts[0].files[0].path = "shards/../../etc/passwd";
  const std::string unsafe = EncodeManifest(escaping);  // self-CRC fine, path not
  for (const std::string& text : {good.substr(0, good.size() / 2), std::string("[1, 2]"), flipped,
                                  std::string("{\"format_version\": 1}"), unsafe}) {
    auto back = DecodeManifest(text, "dir/MANIFEST");
    ASSERT_FALSE(back.ok()) << text;
    EXPECT_TRUE(back.status().IsDataLoss()) << back.status();
    EXPECT_EQ(back.status().message().rfind("dir/MANIFEST", 0), 0u) << back.status();
  }
}

TEST(CheckpointManifestTest, SlotHashNameDescribesSlotOf) {
  EXPECT_EQ(Manifest{}.slots, kNumSlots);
  for (uint32_t table : {0u, 3u, 25u}) {
    for (uint64_t id : {uint64_t{0}, uint64_t{42}, ~uint64_t{0} - 7}) {
      unsigned char key[12];
      for (int i = 0; i < 4; ++i) key[i] = static_cast<unsigned char>(table >> (8 * i));
      for (int i = 0; i < 8; ++i) key[4 + i] = static_cast<unsigned char>(id >> (8 * i));
      EXPECT_EQ(SlotOf(table, id), XXH3_64bits_withSeed(key, 12, 0) % 4096);
    }
  }
}

// --- commit and load ------------------------------------------------------------------------

TEST(CheckpointManifestTest, CommitThenLoadLatest) {
  TempDir dir;
  EXPECT_TRUE(LoadLatest(dir.path(), false, nullptr).status().IsNotFound());
  Manifest first = SampleManifest(10);
  ASSERT_TRUE(CommitCheckpoint(dir.path(), first, /*durable=*/true).ok());
  Manifest second = SampleManifest(20);
  ASSERT_TRUE(CommitCheckpoint(dir.path(), second, /*durable=*/false).ok());
  std::vector<std::string> warnings;
  auto latest = LoadLatest(dir.path(), false, &warnings);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, second);
  auto durable = LoadLatest(dir.path(), true, &warnings);
  ASSERT_TRUE(durable.ok()) << durable.status();
  EXPECT_EQ(*durable, first);
  EXPECT_TRUE(warnings.empty()) << Joined(warnings);
  for (const char* tmp : {"LATEST.tmp", "LATEST_DURABLE.tmp", "ckpt-000000000020/MANIFEST.tmp"})
    EXPECT_FALSE(fs::exists(dir.File(tmp))) << tmp;
  EXPECT_NE(ReadFile(dir.File("LATEST")).find("ckpt-000000000020/MANIFEST"), std::string::npos);
}

TEST(CheckpointManifestTest, MarkDurableMovesLatestDurableForwardOnly) {
  TempDir dir;
  ASSERT_TRUE(CommitCheckpoint(dir.path(), SampleManifest(10), false).ok());
  ASSERT_TRUE(CommitCheckpoint(dir.path(), SampleManifest(20), false).ok());
  ASSERT_TRUE(MarkDurable(dir.path(), 20).ok());
  ASSERT_TRUE(MarkDurable(dir.path(), 10).ok());  // finished late: ignored
  auto durable = LoadLatest(dir.path(), true, nullptr);
  ASSERT_TRUE(durable.ok()) << durable.status();
  EXPECT_EQ(durable->step, 20);
  EXPECT_TRUE(MarkDurable(dir.path(), 30).IsNotFound());
}

TEST(CheckpointManifestTest, CorruptLatestFallsBackWithAWarningNamingIt) {
  TempDir dir;
  CommitWithFile(dir.path(), 10);
  CommitWithFile(dir.path(), 20);
  WriteFile(dir.File("LATEST"), "{\"manifest\": \"ckpt-0000");
  std::vector<std::string> warnings;
  auto latest = LoadLatest(dir.path(), false, &warnings);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 20);  // the newest manifest is intact
  EXPECT_TRUE(HasLineWith(warnings, dir.File("LATEST") + ": corrupt")) << Joined(warnings);
}

TEST(CheckpointManifestTest, LatestWhoseCrcDisagreesPrefersItsIntactManifest) {
  TempDir dir;
  CommitWithFile(dir.path(), 20);
  CommitWithFile(dir.path(), 10);  // LATEST moved back, as after a rollback
  std::string latest_text = ReadFile(dir.File("LATEST"));
  const size_t crc_at = latest_text.find("\"crc32c\": \"") + 11;
  latest_text[crc_at] = latest_text[crc_at] == '0' ? '1' : '0';
  WriteFile(dir.File("LATEST"), latest_text);
  std::vector<std::string> warnings;
  auto latest = LoadLatest(dir.path(), false, &warnings);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 10);
  EXPECT_TRUE(HasLineWith(warnings, dir.File("LATEST") + ": records CRC32C")) << Joined(warnings);
}

TEST(CheckpointManifestTest, CorruptNewestManifestFallsBackToThePreviousCheckpoint) {
  TempDir dir;
  CommitWithFile(dir.path(), 10);
  CommitWithFile(dir.path(), 20);
  FlipByte(ManifestPath(dir.path(), 20), 40);
  std::vector<std::string> warnings;
  auto latest = LoadLatest(dir.path(), false, &warnings);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 10);
  EXPECT_TRUE(HasLineWith(warnings, ManifestPath(dir.path(), 20))) << Joined(warnings);
  EXPECT_TRUE(HasLineWith(warnings, "falling back to " + ManifestPath(dir.path(), 10)))
      << Joined(warnings);
}

TEST(CheckpointManifestTest, MissingLatestUsesTheNewestIntactManifest) {
  TempDir dir;
  CommitWithFile(dir.path(), 10);
  CommitWithFile(dir.path(), 20);
  fs::remove(dir.File("LATEST"));
  std::vector<std::string> warnings;
  auto latest = LoadLatest(dir.path(), false, &warnings);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 20);
  EXPECT_TRUE(HasLineWith(warnings, dir.File("LATEST") + ": missing")) << Joined(warnings);
}

TEST(CheckpointManifestTest, DurableFallbackSkipsCheckpointsWithMissingFiles) {
  TempDir dir;
  CommitWithFile(dir.path(), 10, /*durable=*/true);
  CommitWithFile(dir.path(), 20, /*durable=*/false);
  fs::remove(dir.File("ckpt-000000000020/dense.ckpt"));  // its copy never completed
  WriteFile(dir.File("LATEST_DURABLE"), "garbage");
  std::vector<std::string> warnings;
  auto durable = LoadLatest(dir.path(), true, &warnings);
  ASSERT_TRUE(durable.ok()) << durable.status();
  EXPECT_EQ(durable->step, 10);
  EXPECT_TRUE(HasLineWith(warnings, dir.File("ckpt-000000000020/dense.ckpt"))) << Joined(warnings);
}

TEST(CheckpointManifestTest, NoIntactCheckpointIsDataLoss) {
  TempDir dir;
  CommitWithFile(dir.path(), 10);
  FlipByte(ManifestPath(dir.path(), 10), -10);
  auto latest = LoadLatest(dir.path(), false, nullptr);
  ASSERT_FALSE(latest.ok());
  EXPECT_TRUE(latest.status().IsDataLoss()) << latest.status();
}

// --- verification ---------------------------------------------------------------------------

TEST(CheckpointManifestTest, VerifyDetectsMissingTruncatedAndFlippedFiles) {
  TempDir dir;
  Manifest m = SampleManifest(10);
  m.parts = {ManifestPart{"shard-0",
                          {MakeFile(dir.path(), "shards/shard-0/a.sst", std::string(3 << 20, 'a')),
                           MakeFile(dir.path(), "shards/shard-0/b.sst", "bbbbbbbb"),
                           MakeFile(dir.path(), "shards/shard-0/c.sst", "cccccccc")},
                          {}}};
  ASSERT_TRUE(VerifyManifestFiles(dir.path(), m, true, nullptr).ok());

  FlipByte(dir.File("shards/shard-0/a.sst"), (2 << 20) + 5);  // past the first read chunk
  std::vector<std::string> bad;
  EXPECT_TRUE(VerifyManifestFiles(dir.path(), m, /*full=*/false, &bad).ok());  // sizes only
  Status s = VerifyManifestFiles(dir.path(), m, /*full=*/true, &bad);
  EXPECT_TRUE(s.IsDataLoss()) << s;
  EXPECT_NE(s.message().find(dir.File("shards/shard-0/a.sst")), std::string::npos) << s;
  EXPECT_EQ(bad, std::vector<std::string>{"shards/shard-0/a.sst"});

  fs::remove(dir.File("shards/shard-0/b.sst"));
  WriteFile(dir.File("shards/shard-0/c.sst"), "cccc");
  bad.clear();
  s = VerifyManifestFiles(dir.path(), m, /*full=*/false, &bad);
  EXPECT_TRUE(s.IsDataLoss()) << s;
  EXPECT_NE(s.message().find(dir.File("shards/shard-0/b.sst") + " (part shard-0): missing"),
            std::string::npos)
      << s;
  EXPECT_EQ(bad, (std::vector<std::string>{"shards/shard-0/b.sst", "shards/shard-0/c.sst"}));
}

// --- cleanup and retention ------------------------------------------------------------------

TEST(CheckpointManifestTest, CleanPartialRemovesUncommittedDirsBelowTheStepAndTmpFiles) {
  TempDir dir;
  CommitWithFile(dir.path(), 10);
  MakeFile(dir.path(), "ckpt-000000000005/dense.ckpt", "abandoned");  // older than LATEST
  MakeFile(dir.path(), "ckpt-000000000020/dense.ckpt", "half");       // never committed
  MakeFile(dir.path(), "ckpt-000000000010/MANIFEST.tmp", "x");
  MakeFile(dir.path(), "LATEST.tmp", "x");
  MakeFile(dir.path(), "shards/shard-0/sst/1.sst.tmp", "x");  // the shard's own business
  MakeFile(dir.path(), "notes", "x");
  ASSERT_TRUE(CleanPartial(dir.path(), 10).ok());
  EXPECT_FALSE(fs::exists(dir.File("ckpt-000000000005")));
  EXPECT_FALSE(fs::exists(dir.File("ckpt-000000000010/MANIFEST.tmp")));
  EXPECT_FALSE(fs::exists(dir.File("LATEST.tmp")));
  EXPECT_TRUE(fs::exists(dir.File("ckpt-000000000010/dense.ckpt")));
  EXPECT_TRUE(fs::exists(dir.File("shards/shard-0/sst/1.sst.tmp")));
  EXPECT_TRUE(fs::exists(dir.File("notes")));
  auto latest = LoadLatest(dir.path(), false, nullptr);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 10);
  EXPECT_TRUE(CleanPartial(dir.File("absent"), 10).ok());
}

// A restarted chief cannot tell a checkpoint worker 0 is taking while it was away from an
// abandoned one: every partial directory after LATEST stays, with its files.
TEST(CheckpointManifestTest, CleanPartialKeepsPartialDirsAtOrAfterTheStep) {
  TempDir dir;
  CommitWithFile(dir.path(), 10);
  MakeFile(dir.path(), "ckpt-000000000020/dense.ckpt", "being written");
  MakeFile(dir.path(), "ckpt-000000000020/dense.ckpt.tmp", "being written");
  MakeFile(dir.path(), "ckpt-000000000030/dense.ckpt", "being written");
  ASSERT_TRUE(CleanPartial(dir.path(), 20).ok());
  EXPECT_TRUE(fs::exists(dir.File("ckpt-000000000020/dense.ckpt")));
  EXPECT_TRUE(fs::exists(dir.File("ckpt-000000000020/dense.ckpt.tmp")));
  EXPECT_TRUE(fs::exists(dir.File("ckpt-000000000030/dense.ckpt")));
  // Without any committed checkpoint (below -1) nothing partial goes.
  TempDir fresh;
  MakeFile(fresh.path(), "ckpt-000000000000/dense.ckpt", "being written");
  ASSERT_TRUE(CleanPartial(fresh.path(), -1).ok());
  EXPECT_TRUE(fs::exists(fresh.File("ckpt-000000000000/dense.ckpt")));
}

// Committing step S removes the partial directories below S (worker 0 moved past them for good)
// and never a committed one, which Retain alone decides about.
TEST(CheckpointManifestTest, CleanPartialAtACommitRemovesOlderPartialsOnly) {
  TempDir dir;
  CommitWithFile(dir.path(), 10);
  MakeFile(dir.path(), "ckpt-000000000020/dense.ckpt", "abandoned while the chief was away");
  MakeFile(dir.path(), "ckpt-000000000040/dense.ckpt", "the next one, in progress");
  CommitWithFile(dir.path(), 30);
  ASSERT_TRUE(CleanPartial(dir.path(), 30).ok());
  EXPECT_FALSE(fs::exists(dir.File("ckpt-000000000020")));
  EXPECT_TRUE(fs::exists(dir.File("ckpt-000000000010/MANIFEST")));
  EXPECT_TRUE(fs::exists(dir.File("ckpt-000000000030/MANIFEST")));
  EXPECT_TRUE(fs::exists(dir.File("ckpt-000000000040/dense.ckpt")));
}

TEST(CheckpointManifestTest, RetainKeepsTheNewestAndWhatLatestNames) {
  TempDir dir;
  CommitWithFile(dir.path(), 10, /*durable=*/true);
  for (int64_t step : {20, 30, 40, 50}) CommitWithFile(dir.path(), step);
  MakeFile(dir.path(), "ckpt-000000000005/dense.ckpt", "in progress");  // no MANIFEST
  EXPECT_TRUE(Retain(dir.path(), 1).status().IsInvalidArgument());
  auto kept = Retain(dir.path(), 2);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, (std::vector<int64_t>{10, 40, 50}));  // 10 is LATEST_DURABLE's
  EXPECT_FALSE(fs::exists(dir.File("ckpt-000000000020")));
  EXPECT_FALSE(fs::exists(dir.File("ckpt-000000000030")));
  EXPECT_TRUE(fs::exists(dir.File("ckpt-000000000005")));

  // LATEST moved back (a rollback): its target stays even when older than the newest two.
  ASSERT_TRUE(CommitCheckpoint(dir.path(), SampleManifest(60), false).ok());
  ASSERT_TRUE(CommitCheckpoint(dir.path(), SampleManifest(70), false).ok());
  ASSERT_TRUE(CommitCheckpoint(dir.path(), SampleManifest(40), false).ok());
  kept = Retain(dir.path(), 2);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, (std::vector<int64_t>{10, 40, 60, 70}));
  EXPECT_FALSE(fs::exists(dir.File("ckpt-000000000050")));
}

// --- resume compatibility -------------------------------------------------------------------

config::JobConfig Config(const std::vector<std::string>& sets) {
  std::vector<config::Override> overrides;
  for (const std::string& s : sets) overrides.push_back(config::Override{s});
  auto c = config::ParseJobConfig("", "job.yaml", overrides);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : config::JobConfig{};
}

TEST(CheckpointManifestTest, DifferingComputationKeysIgnoresPerHostKeys) {
  config::JobConfig a = Config({});
  config::JobConfig b = Config({"train.steps=5000", "cluster.ps=[127.0.0.1:1, 127.0.0.1:2]",
                                "cluster.workers=[h1:1, h2:2]", "output.dir=/elsewhere",
                                "ps.data_dir=/ssd/ps", "metrics.port=9100", "checkpoint.keep=5",
                                "ps.cache_bytes=1024", "collective.timeout_ms=60000"});
  EXPECT_EQ(DifferingComputationKeys(a, b), std::vector<std::string>{});
  EXPECT_EQ(DifferingComputationKeys(a, a), std::vector<std::string>{});
}

TEST(CheckpointManifestTest, DifferingComputationKeysNamesExactlyTheDifferingKeys) {
  config::JobConfig a = Config({"tables.C3.lr=0.2"});
  config::JobConfig b =
      Config({"train.batch_size=512", "model.embedding_dim=8", "model.bottom_mlp=[64, 8]",
              "data.synthetic.vocab=7", "tables.default.optimizer=sgd", "tables.C3.lr=0.3",
              "tables.C5.init.scale=0.5", "train.steps=9", "output.dir=x"});
  EXPECT_EQ(DifferingComputationKeys(a, b),
            (std::vector<std::string>{
                "model.embedding_dim: 16 -> 8", "model.bottom_mlp: [64, 16] -> [64, 8]",
                "data.synthetic.vocab: 100000 -> 7", "train.batch_size: 256 -> 512",
                "tables.default.optimizer: adagrad -> sgd", "tables.C3.lr: 0.2 -> 0.3",
                "tables.C5.init.scale: 0.05 -> 0.5"}));
}

// The wire precision rounds every row and gradient: a resume may not change it.
TEST(CheckpointManifestTest, DifferingComputationKeysNamesTheWirePrecision) {
  EXPECT_EQ(DifferingComputationKeys(Config({}), Config({"ps.wire_precision=bf16"})),
            std::vector<std::string>{"ps.wire_precision: fp32 -> bf16"});
  EXPECT_NE(Config({}).ComputationHash(), Config({"ps.wire_precision=fp16"}).ComputationHash());
}

TEST(CheckpointManifestTest, DifferingComputationKeysComparesEffectiveTableValues) {
  // The same effective lr for C1 reached two ways is no difference; the default's change
  // matters through the tables that follow it.
  config::JobConfig a = Config({"tables.C1.lr=0.1"});
  config::JobConfig b = Config({"tables.default.lr=0.1"});
  EXPECT_EQ(DifferingComputationKeys(a, b),
            std::vector<std::string>{"tables.default.lr: 0.05 -> 0.1"});
  config::JobConfig c = Config({"data.num_categorical=27"});
  EXPECT_EQ(DifferingComputationKeys(Config({}), c),
            (std::vector<std::string>{"data.num_categorical: 26 -> 27",
                                      "tables.C27: (absent) -> present"}));
}

// --- the coordinator at a job start and at a chief restart --------------------------------

TEST(CheckpointCoordinatorTest, RejoinKeepsTheRunsResumeStepAndDoesNotRefuseAFinishedJob) {
  TempDir dir;
  config::JobConfig job = Config({"train.steps=40", "checkpoint.dir=" + dir.path()});
  auto started = CheckpointCoordinator::Open(job);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(started->resume_step(), -1);
  const std::string part =
      R"({"name": "dense", "files": [{"path": "x", "size": 1, "crc32c": "a93c5f93"}]})";
  MakeFile(dir.path(), "x", "x");  // a job start reads it back
  ASSERT_TRUE(started->Commit(20, {part}, "cpu", CommitContext{"ab", 0, 1, 1}).ok());
  MakeFile(dir.path(), "ckpt-000000000030/dense.ckpt", "worker 0's, while the chief was away");
  ASSERT_TRUE(started->Commit(39, {part}, "cpu", CommitContext{"ab", 0, 2, 1}).ok());
  EXPECT_TRUE(started->Commit(39, {part}, "cpu", CommitContext{"ab", 0, 2, 1}).ok()) << "re-sent";
  EXPECT_TRUE(started->Commit(20, {part}, "cpu", CommitContext{"ab", 0, 2, 1}).IsInvalidArgument());
  EXPECT_FALSE(fs::exists(dir.File("ckpt-000000000030"))) << "below the commit: abandoned";

  // A job start on a finished job is refused; a restarted chief of that job is not.
  auto again = CheckpointCoordinator::Open(job);
  EXPECT_TRUE(again.status().IsInvalidArgument()) << again.status();
  auto rejoined = CheckpointCoordinator::Rejoin(job, -1);
  ASSERT_TRUE(rejoined.ok()) << rejoined.status();
  EXPECT_EQ(rejoined->resume_step(), -1) << "the run's, not LATEST";
  EXPECT_EQ(rejoined->latest_step(), 39);
}

TEST(CheckpointCoordinatorTest, RejoinKeepsAPartialCheckpointAfterLatest) {
  TempDir dir;
  config::JobConfig job = Config({"train.steps=100", "checkpoint.dir=" + dir.path()});
  CommitWithFile(dir.path(), 10);
  MakeFile(dir.path(), "ckpt-000000000005/dense.ckpt", "abandoned");
  MakeFile(dir.path(), "ckpt-000000000020/dense.ckpt", "in progress");
  auto rejoined = CheckpointCoordinator::Rejoin(job, 10);
  ASSERT_TRUE(rejoined.ok()) << rejoined.status();
  EXPECT_EQ(rejoined->resume_step(), 10);
  EXPECT_FALSE(fs::exists(dir.File("ckpt-000000000005")));
  EXPECT_TRUE(fs::exists(dir.File("ckpt-000000000020/dense.ckpt")));
}

}  // namespace
}  // namespace tandem::chief

namespace tandem::chief {
namespace {

// A job start reads every file: a checkpoint whose durable copy has a damaged file (same size,
// a flipped byte) is skipped for the previous one, the file named; newer checkpoints it fell
// back past are set aside so the run's own checkpoints replace them.
TEST(CheckpointManifestTest, DamagedFileSkipsTheCheckpointWhenFilesAreVerified) {
  TempDir dir;
  CommitWithFile(dir.path(), 10);
  CommitWithFile(dir.path(), 20);
  const std::string victim = dir.path() + "/" + CheckpointDirName(20) + "/dense.ckpt";
  std::string bytes = ReadFile(victim);
  bytes[0] ^= 0x01;
  WriteFile(victim, bytes);
  // Without reading the files the damage is invisible (sizes match).
  auto unverified = LoadLatest(dir.path(), false, nullptr);
  ASSERT_TRUE(unverified.ok()) << unverified.status();
  EXPECT_EQ(unverified->step, 20);
  std::vector<std::string> warnings;
  auto latest = LoadLatest(dir.path(), false, &warnings, /*verify_files=*/true);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 10);
  EXPECT_TRUE(HasLineWith(warnings, victim)) << Joined(warnings);
  EXPECT_TRUE(HasLineWith(warnings, "checkpoint of step 20 skipped")) << Joined(warnings);

  auto aside = SetAsideNewer(dir.path(), latest->step);
  ASSERT_TRUE(aside.ok()) << aside.status();
  ASSERT_EQ(aside->size(), 1u);
  EXPECT_TRUE(fs::exists(dir.path() + "/damaged-" + CheckpointDirName(20)));
  EXPECT_FALSE(fs::exists(dir.path() + "/" + CheckpointDirName(20)));
  warnings.clear();
  latest = LoadLatest(dir.path(), false, &warnings, true);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->step, 10);

  // Every checkpoint damaged: an error naming the files, never a silent start from scratch.
  const std::string older = dir.path() + "/" + CheckpointDirName(10) + "/dense.ckpt";
  WriteFile(older, "dense@1X");
  auto none = LoadLatest(dir.path(), false, nullptr, true);
  EXPECT_TRUE(none.status().IsDataLoss()) << none.status();
  EXPECT_NE(none.status().message().find(older), std::string::npos) << none.status();
}

}  // namespace
}  // namespace tandem::chief
