#include "server/ps/shard_restore.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "common/checkpoint_layout.h"
#include "common/model_checksum.h"
#include "common/slot_map.h"
#include "server/chief/checkpoint_manifest.h"
#include "server/ps/durable_copy.h"
#include "server/ps/shard_resume.h"
#include "server/ps/shard_test_util.h"

namespace tandem::ps {
namespace {

namespace fs = std::filesystem;
using testing::MakePush;
using testing::SmallShard;

constexpr int64_t kStep = 5;      // S: the checkpoint's step
constexpr int64_t kPastStep = 8;  // the old job ran on to here before it "crashed"
constexpr uint64_t kIds = 300;

// One shard of a job with `n` shards under `root`: data in root/ps, durable copy in root/ckpt.
ShardOptions JobShard(const std::string& root, uint32_t index, uint32_t n) {
  ShardOptions o = SmallShard(root + "/ps/shard-" + std::to_string(index), /*workers=*/1);
  o.shard_index = index;
  o.num_shards = n;
  o.durable_dir = root + "/ckpt/" + ShardDurableDir(index);
  // Admission counters are part of the model, so they must survive a restore too.
  o.tables[1].admission_min_count = 3;
  return o;
}

// Step `step`'s ids: a window that moves, so rows and counters of every age exist.
std::map<uint32_t, std::vector<uint64_t>> IdsOf(int64_t step) {
  std::map<uint32_t, std::vector<uint64_t>> ids;
  for (uint64_t id = 0; id < kIds; ++id) {
    if ((id + static_cast<uint64_t>(step)) % 3 != 0) ids[0].push_back(id);
    if ((id * 7 + static_cast<uint64_t>(step)) % 5 < 2) ids[1].push_back(id);
  }
  return ids;
}

void PushSteps(Shard* shard, int64_t from, int64_t to) {
  for (int64_t step = from; step <= to; ++step) {
    auto push = MakePush(step, 0, IdsOf(step), shard->options());
    auto ack = shard->Push(push.input());
    ASSERT_TRUE(ack.ok()) << ack.status();
  }
}

std::string ChecksumOf(const std::vector<Shard*>& shards) {
  ModelChecksum sum;
  for (Shard* s : shards) {
    uint64_t rows = 0;
    EXPECT_TRUE(s->AddToChecksum(&sum, &rows).ok());
  }
  return sum.Hex();
}

// The old job: `n` shards trained to kStep and checkpointed there (the model's checksum at S
// is returned through `checksum`), then trained on to kPastStep and dropped without a clean
// stop, as after kill -9.
RestoreSource RunOldJob(const std::string& root, uint32_t n, std::string* checksum) {
  RestoreSource source;
  source.checkpoint_dir = root + "/ckpt";
  source.step = kStep;
  source.num_ps = n;
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<Shard*> raw;
  for (uint32_t i = 0; i < n; ++i) {
    auto opened = Shard::Open(JobShard(root, i, n));
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return source;
    shards.push_back(std::move(opened).value());
    raw.push_back(shards.back().get());
    PushSteps(raw.back(), 0, kStep);
    auto part = raw.back()->CheckpointPartAt(kStep, raw.back()->options().durable_dir);
    EXPECT_TRUE(part.ok()) << part.status();
    if (part.ok()) source.parts.push_back(*part);
  }
  *checksum = ChecksumOf(raw);
  for (Shard* s : raw) PushSteps(s, kStep + 1, kPastStep);
  return source;
}

// Prepares and opens every shard of a job with `n` shards under `root`; checks each is at kStep.
std::vector<std::unique_ptr<Shard>> Resume(const std::string& root, uint32_t n,
                                           const RestoreSource& source, RestoreKind kind) {
  std::vector<std::unique_ptr<Shard>> shards;
  for (uint32_t i = 0; i < n; ++i) {
    auto report = PrepareShardForResume(JobShard(root, i, n), source);
    EXPECT_TRUE(report.ok()) << report.status();
    if (!report.ok()) return {};
    EXPECT_EQ(report->kind, kind) << "shard " << i;
    auto opened = Shard::Open(JobShard(root, i, n));
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return {};
    EXPECT_EQ((*opened)->applied_step(), kStep) << "shard " << i;
    shards.push_back(std::move(opened).value());
  }
  return shards;
}

std::vector<Shard*> Raw(const std::vector<std::unique_ptr<Shard>>& shards) {
  std::vector<Shard*> out;
  for (const auto& s : shards) out.push_back(s.get());
  return out;
}

// The local restore point of shard `index` at the checkpoint's step (the one it copied).
std::string LocalAtStep(const std::string& root, uint32_t index) {
  const std::string dir = root + "/ps/shard-" + std::to_string(index);
  for (const RestoreMarker& m : ListRestorePoints(dir))
    if (m.step == kStep) return dir + "/restore/" + m.name;
  return "";
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// The first SST of the part, as (db_name, path in the durable copy).
const CheckpointFile& FirstSst(const CheckpointPart& part) {
  for (const CheckpointFile& f : part.files)
    if (f.is_sst) return f;
  ADD_FAILURE() << "the part has no SST";
  return part.files.front();
}

// A job start with nothing to resume from (a rollback before the first checkpoint): the shard
// opens empty, not at the step an earlier attempt reached; a shard held open is refused.
TEST(ShardRestoreTest, FreshStartClearsWhatAnEarlierAttemptLeft) {
  ::tandem::testing::TempDir dir;
  const ShardOptions options = JobShard(dir.path(), 0, 1);
  bool cleared = true;
  ASSERT_TRUE(ClearShardForFreshStart(options, &cleared).ok());  // no directory yet
  EXPECT_FALSE(cleared);
  {
    auto opened = Shard::Open(options);
    ASSERT_TRUE(opened.ok()) << opened.status();
    PushSteps(opened->get(), 0, kPastStep);
    EXPECT_TRUE(ClearShardForFreshStart(options).IsFailedPrecondition());  // it is open
  }
  ASSERT_TRUE(ClearShardForFreshStart(options, &cleared).ok());
  EXPECT_TRUE(cleared);
  auto opened = Shard::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->applied_step(), -1);
  ModelChecksum empty, now;
  uint64_t rows = 1;
  ASSERT_TRUE((*opened)->AddToChecksum(&now, &rows).ok());
  EXPECT_EQ(rows, 0u);
  EXPECT_EQ(now.Hex(), empty.Hex());
}

TEST(ShardRestoreTest, LocalRestorePointAfterACrashBeyondTheCheckpoint) {
  ::tandem::testing::TempDir dir;
  std::string expected;
  const RestoreSource source = RunOldJob(dir.path(), 2, &expected);
  ASSERT_EQ(source.parts.size(), 2u);
  auto shards = Resume(dir.path(), 2, source, RestoreKind::kLocal);
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(ChecksumOf(Raw(shards)), expected);
  // The abandoned steps are gone: step kStep + 1 is applied anew, from a log that restarted at
  // LSN 1, and a restart replays it (a marker pointing past LSN 1 would skip it).
  PushSteps(shards[0].get(), kStep + 1, kStep + 1);
  EXPECT_EQ(shards[0]->applied_step(), kStep + 1);
  shards[0].reset();
  auto reopened = Shard::Open(JobShard(dir.path(), 0, 2));
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->applied_step(), kStep + 1);
  EXPECT_EQ((*reopened)->stats().replayed_records, 1u);
}

TEST(ShardRestoreTest, LostDirectoryIsRestoredFromTheDurableCopy) {
  ::tandem::testing::TempDir dir;
  std::string expected;
  const RestoreSource source = RunOldJob(dir.path(), 2, &expected);
  ASSERT_EQ(source.parts.size(), 2u);
  fs::remove_all(dir.path() + "/ps/shard-1");
  auto report = PrepareShardForResume(JobShard(dir.path(), 1, 2), source);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->kind, RestoreKind::kDurable);
  ASSERT_TRUE(PrepareShardForResume(JobShard(dir.path(), 0, 2), source).ok());
  std::vector<std::unique_ptr<Shard>> shards;
  for (uint32_t i = 0; i < 2; ++i) {
    auto opened = Shard::Open(JobShard(dir.path(), i, 2));
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ((*opened)->applied_step(), kStep);
    shards.push_back(std::move(opened).value());
  }
  EXPECT_EQ(ChecksumOf(Raw(shards)), expected);
}

TEST(ShardRestoreTest, DamagedLocalFileIsRepairedFromTheDurableCopyAndNamed) {
  ::tandem::testing::TempDir dir;
  std::string expected;
  const RestoreSource source = RunOldJob(dir.path(), 2, &expected);
  ASSERT_EQ(source.parts.size(), 2u);
  // The restore point the checkpoint copied: its SST is a hard link shared with live/.
  const std::string local = LocalAtStep(dir.path(), 0);
  ASSERT_FALSE(local.empty());
  const CheckpointFile& sst = FirstSst(source.parts[0]);
  FlipByte(local + "/" + sst.db_name, sst.size_bytes / 2);
  auto report = PrepareShardForResume(JobShard(dir.path(), 0, 2), source);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->kind, RestoreKind::kLocal);
  ASSERT_EQ(report->repaired.size(), 1u);
  EXPECT_NE(report->repaired[0].find(sst.db_name), std::string::npos) << report->repaired[0];
  ASSERT_TRUE(PrepareShardForResume(JobShard(dir.path(), 1, 2), source).ok());
  std::vector<std::unique_ptr<Shard>> shards;
  for (uint32_t i = 0; i < 2; ++i) {
    auto opened = Shard::Open(JobShard(dir.path(), i, 2));
    ASSERT_TRUE(opened.ok()) << opened.status();
    shards.push_back(std::move(opened).value());
  }
  EXPECT_EQ(ChecksumOf(Raw(shards)), expected);
}

TEST(ShardRestoreTest, DamagedDurableFileIsDataLossNamingIt) {
  ::tandem::testing::TempDir dir;
  std::string expected;
  const RestoreSource source = RunOldJob(dir.path(), 2, &expected);
  ASSERT_EQ(source.parts.size(), 2u);
  const CheckpointFile& sst = FirstSst(source.parts[1]);
  FlipByte(source.checkpoint_dir + "/" + ShardDurableDir(1) + "/" + sst.path, 10);
  // From the durable copy (no local restore point): refused, naming the durable file.
  fs::remove_all(dir.path() + "/ps/shard-1");
  auto report = PrepareShardForResume(JobShard(dir.path(), 1, 2), source);
  ASSERT_FALSE(report.ok());
  EXPECT_TRUE(report.status().IsDataLoss()) << report.status();
  EXPECT_NE(report.status().message().find(sst.path), std::string::npos) << report.status();
  // Re-partitioning reads every old part, so it is refused too.
  report = PrepareShardForResume(JobShard(dir.path() + "/three", 0, 3), source);
  ASSERT_FALSE(report.ok());
  EXPECT_TRUE(report.status().IsDataLoss()) << report.status();
  EXPECT_NE(report.status().message().find(sst.path), std::string::npos) << report.status();
}

TEST(ShardRestoreTest, DamagedLocalAndDurableFileIsDataLossNamingBoth) {
  ::tandem::testing::TempDir dir;
  std::string expected;
  const RestoreSource source = RunOldJob(dir.path(), 1, &expected);
  ASSERT_EQ(source.parts.size(), 1u);
  const CheckpointFile& sst = FirstSst(source.parts[0]);
  FlipByte(source.checkpoint_dir + "/" + ShardDurableDir(0) + "/" + sst.path, 10);
  const std::string local = LocalAtStep(dir.path(), 0);
  ASSERT_FALSE(local.empty());
  FlipByte(local + "/" + sst.db_name, 10);
  auto report = PrepareShardForResume(JobShard(dir.path(), 0, 1), source);
  ASSERT_FALSE(report.ok());
  EXPECT_TRUE(report.status().IsDataLoss()) << report.status();
  EXPECT_NE(report.status().message().find(sst.path), std::string::npos) << report.status();
  EXPECT_NE(report.status().message().find(sst.db_name), std::string::npos) << report.status();
}

// 2 -> 3 and 2 -> 1 shards: every row lands on the shard the slot map names, and the model is
// exactly the old one.
TEST(ShardRestoreTest, RepartitionedOntoThreeAndOntoOneShardKeepsTheModel) {
  ::tandem::testing::TempDir dir;
  std::string expected;
  const RestoreSource source = RunOldJob(dir.path(), 2, &expected);
  ASSERT_EQ(source.parts.size(), 2u);
  for (uint32_t n : {3u, 1u}) {
    const std::string root = dir.path() + "/onto-" + std::to_string(n);
    auto shards = Resume(root, n, source, RestoreKind::kRepartitioned);
    ASSERT_EQ(shards.size(), n);
    EXPECT_EQ(ChecksumOf(Raw(shards)), expected) << n << " shards";
    for (uint32_t i = 0; i < n; ++i) {
      auto rows = testing::Rows(shards[i].get());
      EXPECT_FALSE(rows.empty());
      for (const auto& [key, row] : rows)
        EXPECT_EQ(tandem::ShardOf(key.first, key.second, n), i) << key.first << "/" << key.second;
    }
    // The re-partitioned shard trains on: a push of the next step applies.
    PushSteps(shards[0].get(), kStep + 1, kStep + 1);
    EXPECT_EQ(shards[0]->applied_step(), kStep + 1);
  }
}

// A job's final checkpoint after a full one (issue 21): each shard sends the full part's files
// plus its change log since, and a resume — onto the same shards or re-partitioned — rebuilds
// exactly the model of the final step.
TEST(ShardRestoreTest, FinalDeltaPartRestoresTheModelOnAnyShardCount) {
  ::tandem::testing::TempDir dir;
  constexpr int64_t kBase = 2;
  // A table much larger than what the steps after the full part touch, as at scale.
  const auto ids_of = [](int64_t step) {
    std::map<uint32_t, std::vector<uint64_t>> ids;
    const uint64_t from = step <= kBase ? 0 : 40 * static_cast<uint64_t>(step);
    const uint64_t to = step <= kBase ? 3000 : from + 60;
    for (uint64_t id = from; id < to; ++id) {
      ids[0].push_back(id);
      if (id % 2 == 0) ids[1].push_back(id);
    }
    return ids;
  };
  RestoreSource source;
  source.checkpoint_dir = dir.path() + "/ckpt";
  source.step = kStep;
  source.num_ps = 2;
  std::string expected;
  {
    std::vector<std::unique_ptr<Shard>> shards;
    for (uint32_t i = 0; i < 2; ++i) {
      ShardOptions o = JobShard(dir.path(), i, 2);
      o.change_log_segment_bytes = 4 << 10;  // several segments, some sealed before the end
      auto opened = Shard::Open(o);
      ASSERT_TRUE(opened.ok()) << opened.status();
      shards.push_back(std::move(opened).value());
      Shard* shard = shards.back().get();
      for (int64_t step = 0; step <= kStep; ++step) {
        auto push = MakePush(step, 0, ids_of(step), shard->options());
        ASSERT_TRUE(shard->Push(push.input()).ok());
        // An extra restore point after the full part writes rows, and seals their segments.
        if (step == kBase + 1) {
          ASSERT_TRUE(shard->TakeRestorePoint().ok());
        }
        if (step != kBase) continue;
        auto full = shard->CheckpointPartAt(kBase, shard->options().durable_dir, {kBase});
        ASSERT_TRUE(full.ok()) << full.status();
        EXPECT_EQ(full->base_step, -1);
      }
      // The segments sealed so far are copied ahead of the part (by this call, or by the
      // shard's own thread before it).
      ASSERT_TRUE(shard->UploadSealedSegments().ok());
      auto part = shard->CheckpointPartAt(kStep, shard->options().durable_dir, {kBase, kStep},
                                          nullptr, PartKind::kDeltaIfCheaper);
      ASSERT_TRUE(part.ok()) << part.status();
      EXPECT_EQ(part->base_step, kBase) << "shard " << i;
      uint64_t log_bytes = 0, logs = 0;
      for (const CheckpointFile& f : part->files) {
        if (!f.is_log) continue;
        log_bytes += f.size_bytes;
        ++logs;
      }
      EXPECT_GT(logs, 2u);
      EXPECT_GT(part->bytes_copied, 0u) << "the segments sealed by the part's own cut";
      EXPECT_LT(part->bytes_copied, log_bytes) << "the earlier ones were copied ahead";
      source.parts.push_back(*part);
    }
    expected = ChecksumOf(Raw(shards));
  }
  // The same shards: shard 1 resumes from its own restore point, checked against the part's
  // local_files; shard 0's is damaged, and a delta's files are in no durable copy, so it is
  // rebuilt from the base and the change log instead.
  {
    const std::string local = LocalAtStep(dir.path(), 0);
    ASSERT_FALSE(local.empty());
    const CheckpointFile* sst = nullptr;
    for (const CheckpointFile& f : source.parts[0].local_files)
      if (f.is_sst) sst = &f;
    ASSERT_NE(sst, nullptr);
    FlipByte(local + "/" + sst->db_name, sst->size_bytes / 2);
    std::vector<std::unique_ptr<Shard>> shards;
    for (uint32_t i = 0; i < 2; ++i) {
      auto report = PrepareShardForResume(JobShard(dir.path(), i, 2), source);
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_EQ(report->kind, i == 0 ? RestoreKind::kDurable : RestoreKind::kLocal) << i;
      auto opened = Shard::Open(JobShard(dir.path(), i, 2));
      ASSERT_TRUE(opened.ok()) << opened.status();
      EXPECT_EQ((*opened)->applied_step(), kStep);
      shards.push_back(std::move(opened).value());
    }
    EXPECT_EQ(ChecksumOf(Raw(shards)), expected);
  }
  for (uint32_t n : {3u, 1u}) {
    auto shards =
        Resume(dir.path() + "/onto-" + std::to_string(n), n, source, RestoreKind::kRepartitioned);
    ASSERT_EQ(shards.size(), n);
    EXPECT_EQ(ChecksumOf(Raw(shards)), expected) << n << " shards";
  }
}

TEST(ShardRestoreTest, SourceThatDoesNotDescribeTheJobIsRefused) {
  ::tandem::testing::TempDir dir;
  RestoreSource source;
  source.checkpoint_dir = dir.path() + "/ckpt";
  source.step = 3;
  source.num_ps = 2;
  source.parts.resize(1);
  auto report = PrepareShardForResume(JobShard(dir.path(), 0, 2), source);
  ASSERT_FALSE(report.ok());
  EXPECT_TRUE(report.status().IsInvalidArgument()) << report.status();
}

// The PS's resume decision (shard_resume.h) from the chief's view, over a committed manifest.
namespace resume {

// Commits the old job's checkpoint as the chief would: a MANIFEST naming every shard's part.
void CommitManifest(const RestoreSource& source) {
  chief::Manifest m;
  m.step = source.step;
  m.job_id = std::string(32, 'a');
  m.num_ps = source.num_ps;
  m.num_workers = 1;
  for (const CheckpointPart& part : source.parts) {
    chief::ManifestPart p;
    p.name = "shard-" + std::to_string(part.shard);
    p.detail = CheckpointPartToJson(part);
    m.parts.push_back(std::move(p));
  }
  const std::string dir = source.checkpoint_dir + "/" + CheckpointDirName(source.step);
  fs::create_directories(dir);
  std::ofstream(dir + "/MANIFEST") << chief::EncodeManifest(m);
}

ClusterView View(JobState state, int64_t resume_step, int64_t elapsed_ms = 0) {
  ClusterView v;
  v.job_state = state;
  v.resume_step = resume_step;
  v.elapsed_ms = elapsed_ms;
  return v;
}

TEST(ShardResumeTest, StartingJobRestoresTheNamedCheckpointOnEveryShard) {
  ::tandem::testing::TempDir dir;
  std::string expected;
  const RestoreSource source = RunOldJob(dir.path(), 2, &expected);
  CommitManifest(source);
  std::vector<std::unique_ptr<Shard>> shards;
  for (uint32_t i = 0; i < 2; ++i) {
    auto step = PrepareShardFromView(dir.path() + "/ckpt", JobShard(dir.path(), i, 2),
                                     View(JobState::kStarting, kStep));
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(*step, kStep);
    auto opened = Shard::Open(JobShard(dir.path(), i, 2));
    ASSERT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ((*opened)->applied_step(), kStep);
    shards.push_back(std::move(opened).value());
  }
  EXPECT_EQ(ChecksumOf(Raw(shards)), expected);
}

TEST(ShardResumeTest, TrainingJobOrRejoiningChiefKeepsWhatTheShardApplied) {
  ::tandem::testing::TempDir dir;
  std::string expected;
  const RestoreSource source = RunOldJob(dir.path(), 1, &expected);
  CommitManifest(source);
  for (const ClusterView& view :
       {View(JobState::kTraining, kStep), View(JobState::kStarting, kStep, 1500)}) {
    auto step = PrepareShardFromView(dir.path() + "/ckpt", JobShard(dir.path(), 0, 1), view);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(*step, -1) << Name(view.job_state);
  }
  // It recovers from its own log: the steps after the checkpoint are still there.
  auto opened = Shard::Open(JobShard(dir.path(), 0, 1));
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->applied_step(), kPastStep);
}

TEST(ShardResumeTest, NothingToResumeFromStartsEmpty) {
  ::tandem::testing::TempDir dir;
  std::string expected;
  RunOldJob(dir.path(), 1, &expected);
  auto step = PrepareShardFromView(dir.path() + "/ckpt", JobShard(dir.path(), 0, 1),
                                   View(JobState::kStarting, -1));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, -1);
  auto opened = Shard::Open(JobShard(dir.path(), 0, 1));
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->applied_step(), -1);
}

TEST(ShardResumeTest, MissingOrDamagedManifestIsDataLossNamingIt) {
  ::tandem::testing::TempDir dir;
  std::string expected;
  const RestoreSource source = RunOldJob(dir.path(), 1, &expected);
  auto missing = PrepareShardFromView(dir.path() + "/ckpt", JobShard(dir.path(), 0, 1),
                                      View(JobState::kStarting, kStep));
  ASSERT_TRUE(missing.status().IsDataLoss()) << missing.status();
  EXPECT_NE(missing.status().message().find("MANIFEST"), std::string::npos);
  CommitManifest(source);
  const std::string manifest = dir.path() + "/ckpt/" + CheckpointDirName(kStep) + "/MANIFEST";
  FlipByte(manifest, 40);
  auto damaged = PrepareShardFromView(dir.path() + "/ckpt", JobShard(dir.path(), 0, 1),
                                      View(JobState::kStarting, kStep));
  ASSERT_TRUE(damaged.status().IsDataLoss()) << damaged.status();
  EXPECT_NE(damaged.status().message().find("MANIFEST"), std::string::npos) << damaged.status();
}

}  // namespace resume

}  // namespace
}  // namespace tandem::ps
