// Checkpoint cuts in the apply path (PROTOCOLS §3, §7) and the scenarios of §15 about them:
// 8 (a restore point taken but never committed, then a crash: every step kept) and 11 (a k >= 1
// checkpoint holds no part of the next step).
#include <gtest/gtest.h>

#include <filesystem>

#include "common/checkpoint_layout.h"
#include "server/ps/shard.h"
#include "server/ps/shard_restore.h"
#include "server/ps/shard_test_util.h"

namespace tandem::ps {
namespace {

using namespace testing;  // NOLINT: test helpers
using ::tandem::testing::TempDir;
namespace fs = std::filesystem;

std::unique_ptr<Shard> OpenShard(const ShardOptions& o) {
  auto s = Shard::Open(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

const std::map<uint32_t, std::vector<uint64_t>> kIds = {{0, {1, 2, 3, 9}}, {1, {2, 5}}};

Status PushOf(Shard* shard, int64_t step, uint32_t rank, bool checkpoint) {
  auto p = MakePush(step, rank, kIds, shard->options());
  PushInput in = p.input();
  in.checkpoint = checkpoint;
  return shard->Push(in).status();
}

// The rows of a checkpoint part, read back through a restore into a fresh directory.
// `root`/ckpt holds the durable copy; the restore goes to `into`.
std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> RowsOfPart(const ShardOptions& like,
                                                                         const std::string& root,
                                                                         const CheckpointPart& part,
                                                                         const std::string& into) {
  ShardOptions o = like;
  o.dir = into;
  RestoreSource source;
  source.checkpoint_dir = root + "/ckpt";
  source.step = part.step;
  source.num_ps = 1;
  source.parts = {part};
  auto report = PrepareShardForResume(o, source);
  EXPECT_TRUE(report.ok()) << report.status();
  auto shard = OpenShard(o);
  EXPECT_EQ(shard->applied_step(), part.step);
  return Rows(shard.get());
}

// Scenario 11: worker 0 is fast and pushes step 2 before worker 1 pushed step 1, the checkpoint
// step. The shard logs that push but holds it back, so the checkpoint is steps 0-1 exactly;
// afterwards it is applied, and a replay reproduces the order.
TEST(ShardCheckpointTest, KOneCheckpointHoldsNoPartOfTheNextStep) {
  TempDir dir, ref_dir;
  ShardOptions o = SmallShard(dir.path() + "/ps", /*workers=*/2, /*k=*/1);
  o.durable_dir = dir.path() + "/ckpt/" + ShardDurableDir(0);
  auto ref = OpenShard(SmallShard(ref_dir.path(), 2, 1));
  for (int64_t step = 0; step <= 1; ++step)
    for (uint32_t rank = 0; rank < 2; ++rank)
      ASSERT_TRUE(PushOf(ref.get(), step, rank, false).ok());
  const auto at_cut = Rows(ref.get());

  auto shard = OpenShard(o);
  ASSERT_TRUE(PushOf(shard.get(), 0, 0, false).ok());
  ASSERT_TRUE(PushOf(shard.get(), 0, 1, false).ok());
  ASSERT_TRUE(PushOf(shard.get(), 1, 0, true).ok());
  ASSERT_TRUE(PushOf(shard.get(), 2, 0, false).ok());  // held back behind the cut at 1
  EXPECT_EQ(shard->applied_step(), 0);
  EXPECT_EQ(PushOf(shard.get(), 2, 0, false), Status::Ok()) << "a resent held push";
  EXPECT_EQ(shard->stats().duplicates, 1u);
  ASSERT_TRUE(PushOf(shard.get(), 1, 1, true).ok());  // completes step 1: cut, then release
  EXPECT_EQ(shard->applied_step(), 1);
  ASSERT_TRUE(PushOf(shard.get(), 2, 1, false).ok());
  EXPECT_EQ(shard->applied_step(), 2);

  auto part = shard->CheckpointPartAt(1, o.durable_dir);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(RowsOfPart(o, dir.path(), *part, dir.path() + "/restored"), at_cut);
  EXPECT_NE(Rows(shard.get()), at_cut) << "step 2 was applied after the cut";

  // Replay from the cut's restore point, and from the very start, gives the same bits.
  const auto final_rows = Rows(shard.get());
  shard.reset();
  shard = OpenShard(o);
  EXPECT_EQ(Rows(shard.get()), final_rows);
  EXPECT_EQ(shard->applied_step(), 2);
  shard.reset();
  for (const auto& m : ListRestorePoints(o.dir)) {
    if (m.step < 0) continue;
    fs::remove(o.dir + "/restore/" + m.name + ".done");
  }
  shard = OpenShard(o);
  EXPECT_EQ(shard->stats().replayed_records, 6u);
  EXPECT_EQ(Rows(shard.get()), final_rows);
}

// A k = 0 shard of one worker under `dir` (its durable copy there too), and the rows a shard fed
// the same pushes holds after step 1, where the tests below cut.
struct CutAtStepOne {
  explicit CutAtStepOne(const TempDir& dir) : o(SmallShard(dir.path() + "/ps", 1)) {
    o.durable_dir = dir.path() + "/ckpt/" + ShardDurableDir(0);
    TempDir ref_dir;
    auto ref = OpenShard(SmallShard(ref_dir.path(), 1));
    for (int64_t step = 0; step <= 1; ++step) EXPECT_TRUE(PushOf(ref.get(), step, 0, false).ok());
    at_cut = Rows(ref.get());
  }
  ShardOptions o;
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> at_cut;
};

// At k = 0 the cut is taken right after the announced step is applied, so its part can be
// asked for later while training goes on; a step nobody announced can be taken only while it
// is the applied one.
TEST(ShardCheckpointTest, KZeroCutIsTakenInTheApplyPathAndTheTrainingGoesOn) {
  TempDir dir;
  const CutAtStepOne cut(dir);
  const ShardOptions& o = cut.o;
  const auto& at_cut = cut.at_cut;
  auto shard = OpenShard(o);
  for (int64_t step = 0; step <= 3; ++step)
    ASSERT_TRUE(PushOf(shard.get(), step, 0, step == 1).ok());
  auto part = shard->CheckpointPartAt(1, o.durable_dir);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(RowsOfPart(o, dir.path(), *part, dir.path() + "/restored"), at_cut);
  EXPECT_TRUE(shard->CheckpointPartAt(2, o.durable_dir).status().IsFailedPrecondition());
  EXPECT_TRUE(shard->CheckpointPartAt(4, o.durable_dir).status().IsUnavailable());
  auto last = shard->CheckpointPartAt(3, o.durable_dir);  // the last step: taken on request
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(RowsOfPart(o, dir.path(), *last, dir.path() + "/again"), Rows(shard.get()));
}

// A shard that dies inside a cut's restore point (drill: `die-in-restore-point`) leaves the cut
// in its log and the restore point without its marker; one that dies right after the cut leaves
// the restore point whole. Either way the new process gets the part request once training has
// moved on: it copies the cut's rows, from the restore point Recover took at the cut (the replay
// ends there at k = 0: the next step's pushes wait for the cut) or from the whole one on disk.
TEST(ShardCheckpointTest, ACutsPartIsCopiedAfterACrashInOrAfterItsRestorePoint) {
  for (const bool marker_lost : {true, false}) {
    SCOPED_TRACE(marker_lost ? "died inside the restore point" : "died after it");
    TempDir dir;
    const CutAtStepOne cut(dir);
    const ShardOptions& o = cut.o;
    {
      auto shard = OpenShard(o);
      for (int64_t step = 0; step <= 1; ++step)
        ASSERT_TRUE(PushOf(shard.get(), step, 0, step == 1).ok());
    }  // kill -9 right after the cut of step 1
    bool unmarked = false;
    for (const auto& m : ListRestorePoints(o.dir))
      if (m.step == 1 && marker_lost) unmarked = fs::remove(o.dir + "/restore/" + m.name + ".done");
    ASSERT_EQ(unmarked, marker_lost);
    auto shard = OpenShard(o);
    ASSERT_EQ(shard->applied_step(), 1);
    EXPECT_EQ(shard->stats().replayed_records, marker_lost ? 2u : 0u);
    for (int64_t step = 2; step <= 3; ++step) ASSERT_TRUE(PushOf(shard.get(), step, 0, false).ok());
    auto part = shard->CheckpointPartAt(1, o.durable_dir);
    ASSERT_TRUE(part.ok()) << part.status();
    EXPECT_EQ(RowsOfPart(o, dir.path(), *part, dir.path() + "/restored"), cut.at_cut);
    // A step that never had a restore point of its own is still refused.
    EXPECT_TRUE(shard->CheckpointPartAt(2, o.durable_dir).status().IsFailedPrecondition());
  }
}

// Scenario 8: shard 0 cuts its step-200 restore point, the checkpoint is never committed (no
// part is asked for), and the shard dies at step 212: every step survives, from the newest
// restore point and also from the one before it (the log behind it is kept).
TEST(ShardCheckpointTest, UncommittedCutThenCrashKeepsEveryStep) {
  TempDir dir, ref_dir;
  ShardOptions o = SmallShard(dir.path(), 1);
  auto ref_o = SmallShard(ref_dir.path(), 1);
  ref_o.memory_only = true;
  auto ref = OpenShard(ref_o);
  {
    auto shard = OpenShard(o);
    for (int64_t step = 0; step <= 212; ++step) {
      ASSERT_TRUE(PushOf(shard.get(), step, 0, step == 175 || step == 200).ok());
      ASSERT_TRUE(PushOf(ref.get(), step, 0, false).ok());
    }
    auto committed = shard->CheckpointPartAt(175, dir.path() + "/durable");
    ASSERT_TRUE(committed.ok()) << committed.status();
  }  // kill -9 at 212
  const auto expected = Rows(ref.get());
  // The same crashed directory, without the uncommitted restore point: recovery starts from
  // step 175's and replays 176-212.
  ShardOptions older = o;
  older.dir = dir.path() + "-older";
  fs::copy(o.dir, older.dir, fs::copy_options::recursive);
  for (const auto& m : ListRestorePoints(older.dir))
    if (m.step >= 200) fs::remove(older.dir + "/restore/" + m.name + ".done");
  auto shard = OpenShard(o);
  EXPECT_EQ(shard->applied_step(), 212);
  EXPECT_EQ(shard->stats().replayed_records, 12u);
  EXPECT_EQ(Rows(shard.get()), expected);
  auto from_older = OpenShard(older);
  EXPECT_EQ(from_older->applied_step(), 212);
  EXPECT_EQ(from_older->stats().replayed_records, 37u);
  EXPECT_EQ(Rows(from_older.get()), expected);
  from_older.reset();
  fs::remove_all(older.dir);
}

}  // namespace
}  // namespace tandem::ps
