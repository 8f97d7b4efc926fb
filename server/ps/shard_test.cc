// The shard's rules (PROTOCOLS §2-§6 and the scenarios of §15) without sockets.
#include "server/ps/shard.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>

#include "common/testing/local_embedding_table.h"
#include "server/ps/compaction_priority.h"
#include "server/ps/restore_marker.h"
#include "server/ps/shard_test_util.h"

namespace tandem::ps {
namespace {

using namespace testing;  // NOLINT: test helpers
using ::tandem::testing::TempDir;

std::unique_ptr<Shard> OpenShard(const ShardOptions& o) {
  auto s = Shard::Open(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

TEST(ShardTest, AbsentRowsReadAsInitialValueAndPullsStoreNothing) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  auto shard = OpenShard(o);
  std::vector<uint64_t> ids = {1, 2, 3, 99};
  std::vector<float> out(ids.size() * 4);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(shard->Read(0, ids, out.data()).ok());
  std::vector<float> expect(4);
  embedding::InitialEmbedding(o.seed, o.tables[0], 99, expect.data());
  EXPECT_TRUE(std::equal(expect.begin(), expect.end(), out.begin() + 12));
  EXPECT_TRUE(Rows(shard.get()).empty());  // scenario 5: reads leave no trace
}

// Scenario 1: one push carries two tables; both apply.
TEST(ShardTest, OnePushWithTwoTablesAppliesBoth) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  auto shard = OpenShard(o);
  auto p = MakePush(0, 0, {{0, {5, 6}}, {1, {7}}}, o);
  auto ack = shard->Push(p.input());
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(ack->applied_step, 0);
  auto rows = Rows(shard.get());
  EXPECT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows.count({0, 5}) && rows.count({0, 6}) && rows.count({1, 7}));
  // SGD on table 1: w = init - lr * g.
  std::vector<float> init(8), now(8);
  embedding::InitialEmbedding(o.seed, o.tables[1], 7, init.data());
  uint64_t id7 = 7;
  ASSERT_TRUE(shard->Read(1, {&id7, 1}, now.data()).ok());
  auto g = Grad(0, 0, 1, 7, 8);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(now[j], init[j] - 0.1f * g[j]);
}

// Scenario 3: a worker with no rows on the shard still pushes (empty); the step completes.
TEST(ShardTest, EmptyPushCompletesTheStep) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 2);
  auto shard = OpenShard(o);
  ASSERT_TRUE(shard->Push(MakePush(0, 0, {{0, {1, 2}}}, o).input()).ok());
  EXPECT_EQ(shard->applied_step(), -1);
  OwnedPush empty;
  empty.step = 0;
  empty.rank = 1;
  auto ack = shard->Push(empty.input());
  ASSERT_TRUE(ack.ok());
  EXPECT_EQ(ack->applied_step, 0);
}

// k = 0: pushes arriving in every order give bit-identical rows (sum in rank order).
TEST(ShardTest, ArrivalOrderDoesNotChangeBits) {
  std::vector<uint32_t> perm = {0, 1, 2};
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> first;
  do {
    TempDir dir;
    auto o = SmallShard(dir.path(), 3);
    auto shard = OpenShard(o);
    for (int64_t step = 0; step < 4; ++step)
      for (uint32_t r : perm)
        ASSERT_TRUE(shard->Push(MakePush(step, r, {{0, {1, 2, 3}}, {1, {2, 4}}}, o).input()).ok());
    EXPECT_EQ(shard->applied_step(), 3);
    auto rows = Rows(shard.get());
    if (first.empty()) first = rows;
    EXPECT_EQ(rows, first);
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(ShardTest, DuplicatePushIsAcknowledgedAndAppliedOnce) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 2);
  auto shard = OpenShard(o);
  auto p0 = MakePush(0, 0, {{0, {1}}}, o);
  ASSERT_FALSE(shard->Push(p0.input())->duplicate);
  EXPECT_TRUE(shard->Push(p0.input())->duplicate);  // buffered, not yet applied
  ASSERT_TRUE(shard->Push(MakePush(0, 1, {{0, {1}}}, o).input()).ok());
  auto after = Rows(shard.get());
  EXPECT_TRUE(shard->Push(p0.input())->duplicate);  // already applied
  EXPECT_EQ(Rows(shard.get()), after);
  EXPECT_EQ(shard->stats().duplicates, 2u);
}

TEST(ShardTest, ResendWithDifferentPayloadIsADeterminismViolation) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 2);
  auto shard = OpenShard(o);
  ASSERT_TRUE(shard->Push(MakePush(0, 0, {{0, {1}}}, o).input()).ok());
  auto other = MakePush(0, 0, {{0, {2}}}, o);
  auto r = shard->Push(other.input());
  EXPECT_TRUE(r.status().IsDataLoss()) << r.status();
  EXPECT_NE(r.status().message().find("step 0 rank 0"), std::string::npos);
}

TEST(ShardTest, InvalidPushesChangeNothing) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  o.num_shards = 2;
  auto shard = OpenShard(o);
  uint64_t mine = 0, theirs = 0;
  for (uint64_t id = 1; !mine || !theirs; ++id) (ShardOf(0, id, 2) == 0 ? mine : theirs) = id;
  auto good = [&] {
    OwnedPush p;
    p.tables.push_back({0, 4, {mine}, {0.1f, 0.2f, 0.3f, 0.4f}});
    return p;
  };
  std::vector<std::pair<std::string, OwnedPush>> bad;
  {
    auto p = good();
    p.tables[0].dim = 3;
    p.tables[0].grads.resize(3);
    bad.push_back({"dim 3", p});
  }
  {
    auto p = good();
    p.tables[0].table_id = 9;
    bad.push_back({"unknown", p});
  }
  {
    auto p = good();
    p.tables[0].grads.push_back(1);
    bad.push_back({"gradient values", p});
  }
  {
    auto p = good();
    p.tables[0].grads[2] = std::nanf("");
    bad.push_back({"NaN", p});
  }
  {
    auto p = good();
    p.tables[0].ids[0] = theirs;
    bad.push_back({"does not belong", p});
  }
  {
    auto p = good();
    p.rank = 5;
    bad.push_back({"rank 5", p});
  }
  {
    auto p = good();
    p.tables.push_back(p.tables[0]);
    bad.push_back({"twice in one push", p});
  }
  {
    auto p = good();
    p.tables[0].ids.push_back(mine);
    p.tables[0].grads.insert(p.tables[0].grads.end(), {0.1f, 0.2f, 0.3f, 0.4f});
    bad.push_back({"appears twice", p});
  }
  for (const auto& [what, p] : bad) {
    auto r = shard->Push(p.input());
    EXPECT_TRUE(r.status().IsInvalidArgument()) << what << ": " << r.status();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
  }
  EXPECT_TRUE(Rows(shard.get()).empty());
  EXPECT_EQ(shard->applied_step(), -1);
  EXPECT_EQ(shard->stats().pushes_logged, 0u);
  EXPECT_TRUE(shard->Push(good().input()).ok());  // and it still serves
}

TEST(ShardTest, NanSkipRowsDropsOnlyTheBadRows) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  o.nan_policy = NanPolicy::kSkipRows;
  auto shard = OpenShard(o);
  OwnedPush p;
  p.tables.push_back({0, 4, {1, 2}, {0.1f, 0.1f, 0.1f, 0.1f, INFINITY, 0.f, 0.f, 0.f}});
  ASSERT_TRUE(shard->Push(p.input()).ok());
  auto rows = Rows(shard.get());
  EXPECT_TRUE(rows.count({0, 1}));
  EXPECT_FALSE(rows.count({0, 2}));
  EXPECT_EQ(shard->stats().rows_nan_skipped, 1u);
}

TEST(ShardTest, PullVersioningAtK0) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  auto shard = OpenShard(o);
  EXPECT_EQ(shard->CheckPull(0, 0, false), PullVerdict::kReady);  // version -1
  EXPECT_EQ(shard->CheckPull(0, 1, false), PullVerdict::kPark);
  ASSERT_TRUE(shard->Push(MakePush(0, 0, {{0, {1}}}, o).input()).ok());
  EXPECT_EQ(shard->CheckPull(0, 0, false), PullVerdict::kStale);
  EXPECT_EQ(shard->CheckPull(0, 0, true), PullVerdict::kReady);  // recovery: pre-images
  EXPECT_EQ(shard->CheckPull(0, 1, false), PullVerdict::kReady);
  EXPECT_EQ(shard->CheckPull(7, 1, false), PullVerdict::kStale);  // another timeline
}

TEST(ShardTest, PreImagesAreTheRowsBeforeTheLastApply) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  auto shard = OpenShard(o);
  ASSERT_TRUE(shard->Push(MakePush(0, 0, {{0, {1, 2}}}, o).input()).ok());
  std::vector<uint64_t> ids = {1, 2};
  std::vector<float> after0(8), pre(8), after1(8);
  ASSERT_TRUE(shard->Read(0, ids, after0.data()).ok());
  ASSERT_TRUE(shard->Push(MakePush(1, 0, {{0, {1}}}, o).input()).ok());
  ASSERT_TRUE(shard->ReadPreImages(0, ids, pre.data()).ok());
  ASSERT_TRUE(shard->Read(0, ids, after1.data()).ok());
  EXPECT_EQ(pre, after0);  // id 1 as before step 1, id 2 untouched by step 1
  EXPECT_NE(after1, after0);
}

// A recovery pull for step s reads version s - 1 whether or not the shard has applied s yet:
// before, the current rows (not the pre-images of s - 1); after, the pre-images of s.
TEST(ShardTest, RecoveryPullReadsTheVersionBeforeItsStepEitherSideOfTheApply) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  auto shard = OpenShard(o);
  std::vector<uint64_t> ids = {1, 2};
  ASSERT_TRUE(shard->Push(MakePush(0, 0, {{0, {1, 2}}}, o).input()).ok());
  std::vector<float> v0(8), got(8);
  ASSERT_TRUE(shard->Read(0, ids, v0.data()).ok());
  TableRead read{0, ids, got.data()};
  ASSERT_TRUE(shard->ReadTablesForRecovery({&read, 1}, 1).ok());  // step 1 not applied yet
  EXPECT_EQ(got, v0);
  ASSERT_TRUE(shard->Push(MakePush(1, 0, {{0, {1}}}, o).input()).ok());
  std::fill(got.begin(), got.end(), 0.0f);
  ASSERT_TRUE(shard->ReadTablesForRecovery({&read, 1}, 1).ok());  // applied: pre-images of 1
  EXPECT_EQ(got, v0);
  EXPECT_TRUE(shard->ReadTablesForRecovery({&read, 1}, 3).IsFailedPrecondition());
}

TEST(ShardTest, AdmissionNeedsMinCountStepsAndLeavesPullsAlone) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  o.tables[0].admission_min_count = 3;
  auto shard = OpenShard(o);
  std::vector<uint64_t> id = {42};
  std::vector<float> out(4), init(4);
  embedding::InitialEmbedding(o.seed, o.tables[0], 42, init.data());
  for (int64_t step = 0; step < 2; ++step) {
    ASSERT_TRUE(shard->Push(MakePush(step, 0, {{0, {42}}}, o).input()).ok());
    // Scenario 6: retried pulls do not change admission counts.
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(shard->Read(0, id, out.data()).ok());
    EXPECT_EQ(out, init) << "not admitted yet at step " << step;
  }
  uint64_t count = 0;
  ASSERT_TRUE(shard->store()
                  ->ForEachAdmissionCount([&](uint32_t, uint64_t, uint64_t c) { count = c; })
                  .ok());
  EXPECT_EQ(count, 2u);
  ASSERT_TRUE(shard->Push(MakePush(2, 0, {{0, {42}}}, o).input()).ok());
  ASSERT_TRUE(shard->Read(0, id, out.data()).ok());
  EXPECT_NE(out, init);
  EXPECT_EQ(shard->stats().rows_admitted, 1u);
  EXPECT_EQ(shard->stats().rows_not_admitted, 2u);
}

TEST(ShardTest, TtlTreatsStaleRowsAsAbsentAtTheirNextApply) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  o.tables[1].ttl_steps = 2;
  auto shard = OpenShard(o);
  ASSERT_TRUE(shard->Push(MakePush(0, 0, {{1, {9}}}, o).input()).ok());
  for (int64_t step = 1; step < 5; ++step)
    ASSERT_TRUE(shard->Push(MakePush(step, 0, {}, o).input()).ok());
  ASSERT_TRUE(shard->Push(MakePush(5, 0, {{1, {9}}}, o).input()).ok());
  // Expired at step 5 (last update 0 < 5 - 2): reset to its initial value, then one update.
  std::vector<float> init(8), now(8);
  embedding::InitialEmbedding(o.seed, o.tables[1], 9, init.data());
  uint64_t id = 9;
  ASSERT_TRUE(shard->Read(1, {&id, 1}, now.data()).ok());
  auto g = Grad(5, 0, 1, 9, 8);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(now[j], init[j] - 0.1f * g[j]);
  EXPECT_EQ(shard->stats().rows_expired, 1u);
}

TEST(ShardTest, KGreaterThanZeroAppliesOnArrivalAndGatesPulls) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 2, /*k=*/1);
  auto shard = OpenShard(o);
  ASSERT_TRUE(shard->Push(MakePush(0, 0, {{0, {1}}}, o).input()).ok());
  EXPECT_EQ(Rows(shard.get()).size(), 1u);  // applied without waiting for rank 1
  EXPECT_EQ(shard->applied_step(), -1);     // step 0 is not complete yet
  EXPECT_EQ(shard->CheckPull(0, 1, false), PullVerdict::kReady);  // needs step -1
  EXPECT_EQ(shard->CheckPull(0, 2, false), PullVerdict::kPark);   // needs step 0
  ASSERT_TRUE(shard->Push(MakePush(0, 1, {{0, {1}}}, o).input()).ok());
  EXPECT_EQ(shard->applied_step(), 0);
  EXPECT_EQ(shard->CheckPull(0, 2, false), PullVerdict::kReady);
}

// Issue 21, end of job: compactions keep their priority while the job trains, and drop to the
// lowest once its last step is applied (before that step's restore point, which they slow);
// from then no new one starts, and the final restore point is written all the same.
TEST(ShardTest, CompactionsYieldTheCpuOnceTheLastStepIsApplied) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 2);
  o.last_step = 1;
  auto shard = OpenShard(o);
  const std::vector<int> threads = CompactionThreads();
  ASSERT_FALSE(threads.empty()) << "the store started no RocksDB compaction thread";
  const auto nice_of = [](int tid) { return getpriority(PRIO_PROCESS, static_cast<id_t>(tid)); };
  std::vector<int> before;
  for (int tid : threads) before.push_back(nice_of(tid));
  ASSERT_TRUE(shard->Push(MakePush(0, 0, {{0, {1}}}, o).input()).ok());
  ASSERT_TRUE(shard->Push(MakePush(0, 1, {{0, {1}}}, o).input()).ok());
  ASSERT_EQ(shard->applied_step(), 0);
  for (size_t i = 0; i < threads.size(); ++i)
    EXPECT_EQ(nice_of(threads[i]), before[i]) << "thread " << threads[i] << " after step 0";
  ASSERT_TRUE(shard->Push(MakePush(1, 1, {{0, {2}}}, o).input()).ok());
  for (size_t i = 0; i < threads.size(); ++i)  // half of the last step changes nothing
    EXPECT_EQ(nice_of(threads[i]), before[i]) << "thread " << threads[i] << " with step 1 half in";
  EXPECT_TRUE(shard->store()->compacting());
  ASSERT_TRUE(shard->Push(MakePush(1, 0, {{0, {2}}}, o).input()).ok());
  ASSERT_EQ(shard->applied_step(), 1);
  for (int tid : CompactionThreads()) EXPECT_EQ(nice_of(tid), 19) << "thread " << tid;
  EXPECT_FALSE(shard->store()->compacting());
  ASSERT_TRUE(shard->TakeRestorePoint().ok());
  const auto points = ListRestorePoints(o.dir);
  ASSERT_FALSE(points.empty());
  EXPECT_EQ(points.back().step, 1);
}

TEST(ShardTest, SecondProcessOnTheSameDirectoryIsRefused) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  auto shard = OpenShard(o);
  auto second = Shard::Open(o);
  EXPECT_TRUE(second.status().IsFailedPrecondition()) << second.status();
}

// Scenario 2: a push logged before a crash is not lost, and its resend is a duplicate.
TEST(ShardTest, LoggedPushSurvivesRestartAndItsResendIsADuplicate) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 2);
  auto p0 = MakePush(0, 0, {{0, {1, 2}}}, o);
  {
    auto shard = OpenShard(o);
    ASSERT_TRUE(shard->Push(p0.input()).ok());
  }  // dies with rank 0's push logged but step 0 not applied (no restore point taken after it)
  auto shard = OpenShard(o);
  EXPECT_TRUE(shard->Push(p0.input())->duplicate);
  auto ack = shard->Push(MakePush(0, 1, {{0, {2}}}, o).input());
  ASSERT_TRUE(ack.ok());
  EXPECT_EQ(ack->applied_step, 0);
  EXPECT_EQ(Rows(shard.get()).size(), 2u);
}

// After the last step nothing is deleted beside the final restore point: older restore points
// stay until a job with more steps cuts its next restore point.
TEST(ShardTest, TheLastStepsRestorePointRemovesNoOlderOnes) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  o.restore_point_every_bytes = 1000;  // a push here is 120 bytes: one every ~9 steps
  o.last_step = 39;
  const auto markers = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/restore"))
      n += e.path().extension() == ".done";
    return n;
  };
  {
    auto shard = OpenShard(o);
    for (int64_t step = 0; step < 39; ++step)
      ASSERT_TRUE(shard->Push(MakePush(step, 0, {{0, {1, 2, 3, 4, 5}}}, o).input()).ok());
    EXPECT_EQ(markers(), 2);
    ASSERT_TRUE(shard->Push(MakePush(39, 0, {{0, {1, 2, 3, 4, 5}}}, o).input()).ok());
    ASSERT_TRUE(shard->TakeRestorePoint().ok());  // the final one, as a checkpoint part cuts it
    EXPECT_EQ(markers(), 3);
  }
  o.last_step = 79;  // the job goes on (train.steps raised): its next restore point prunes
  auto shard = OpenShard(o);
  EXPECT_EQ(shard->applied_step(), 39);
  for (int64_t step = 40; step < 50; ++step)
    ASSERT_TRUE(shard->Push(MakePush(step, 0, {{0, {1, 2, 3, 4, 5}}}, o).input()).ok());
  EXPECT_EQ(markers(), 2);
}

// A pwritev that fails with ENOSPC while *fail is set (the space was reserved, so only a
// device error could do this; ENOSPC stands in for it).
PwritevFn FailingWrites(const bool* fail) {
  return [fail](int fd, const iovec* iov, int n, off_t offset) -> ssize_t {
    if (*fail) {
      errno = ENOSPC;
      return -1;
    }
    return offset < 0 ? ::writev(fd, iov, n) : ::pwritev(fd, iov, n, offset);
  };
}

// At k = 0 a push's record is written while the push is applied. A write that fails after the
// apply leaves the step applied; the rank's resend writes the record before it is acknowledged,
// and a restart replays it: the rows are those of a run without the failure.
TEST(ShardTest, ARecordThatFailsBesideItsApplyIsWrittenByTheResend) {
  TempDir ref_dir, dir;
  auto ref_o = SmallShard(ref_dir.path(), 1);
  auto o = SmallShard(dir.path(), 1);
  bool fail = false;
  o.push_log_write_for_test = FailingWrites(&fail);
  auto p0 = MakePush(0, 0, {{0, {1, 2}}, {1, {3}}}, o);
  auto p1 = MakePush(1, 0, {{0, {2, 4}}}, o);
  {
    auto ref = OpenShard(ref_o);
    ASSERT_TRUE(ref->Push(p0.input()).ok());
    ASSERT_TRUE(ref->Push(p1.input()).ok());
  }
  {
    auto shard = OpenShard(o);
    fail = true;
    auto refused = shard->Push(p0.input());
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status();
    // Applied beside the failed write; where nothing can be reserved (buffered writes, no
    // fallocate) the record is written first and the refused push changed nothing.
    const bool beside = shard->applied_step() == 0;
    if (!beside) {
      EXPECT_EQ(shard->applied_step(), -1);
    }
    fail = false;
    auto ack = shard->Push(p0.input());
    ASSERT_TRUE(ack.ok()) << ack.status();
    EXPECT_EQ(ack->duplicate, beside);
    EXPECT_EQ(shard->stats().pushes_logged, 1u);
    ASSERT_TRUE(shard->Push(p1.input()).ok());
  }  // dies without a restore point after step 0: the restart replays both records
  auto shard = OpenShard(o);
  EXPECT_EQ(shard->applied_step(), 1);
  auto ref = OpenShard(ref_o);
  EXPECT_EQ(Rows(shard.get()), Rows(ref.get()));
}

// With two ranks the first push of a step is only buffered: a record that fails beside it takes
// the push back, as a write first would have.
TEST(ShardTest, ABufferedPushWhoseRecordFailsIsTakenBack) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 2);
  bool fail = true;
  o.push_log_write_for_test = FailingWrites(&fail);
  auto shard = OpenShard(o);
  auto p0 = MakePush(0, 0, {{0, {1, 2}}}, o);
  ASSERT_FALSE(shard->Push(p0.input()).ok());
  fail = false;
  auto ack = shard->Push(MakePush(0, 1, {{0, {2}}}, o).input());
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(ack->applied_step, -1);  // rank 0's push is not in: the step waits for it
  ack = shard->Push(p0.input());
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_FALSE(ack->duplicate);
  EXPECT_EQ(ack->applied_step, 0);
  EXPECT_EQ(shard->stats().pushes_logged, 2u);
}

// Scenarios 7 and 8: whatever the cache wrote back before a crash, recovery rebuilds from the
// restore point and replays the log: every logged push applied exactly once.
TEST(ShardTest, RecoveryAfterEvictionAndCrashAppliesEveryPushOnce) {
  TempDir ref_dir, dir;
  auto o = SmallShard(dir.path(), 1);
  o.cache_bytes = 4096;  // tiny: rows are evicted (written back) all the time
  auto ref_o = SmallShard(ref_dir.path(), 1);
  ref_o.memory_only = true;
  auto ref = OpenShard(ref_o);
  std::map<uint32_t, std::vector<uint64_t>> ids;
  for (uint64_t i = 0; i < 200; ++i) ids[i % 2].push_back(i * 31 + 7);
  {
    auto shard = OpenShard(o);
    for (int64_t step = 0; step < 30; ++step) {
      auto p = MakePush(step, 0, ids, o);
      ASSERT_TRUE(shard->Push(p.input()).ok());
      ASSERT_TRUE(ref->Push(p.input()).ok());
      if (step == 12) {
        ASSERT_TRUE(shard->TakeRestorePoint().ok());
      }
    }
  }  // crash: the live DB holds an arbitrary mix of written-back rows
  auto shard = OpenShard(o);
  EXPECT_EQ(shard->applied_step(), 29);
  EXPECT_GT(shard->stats().replayed_records, 0u);
  EXPECT_EQ(Rows(shard.get()), Rows(ref.get()));
}

// Scenario 10: at k >= 1, pushes from many threads touching the same rows replay to the same
// bits, because they are applied in log order.
TEST(ShardTest, ConcurrentPushesAtK1ReplayToTheSameBits) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 4, /*k=*/2);
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> before;
  {
    auto shard = OpenShard(o);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 4; ++r) {
      threads.emplace_back([&, r] {
        for (int64_t step = 0; step < 20; ++step) {
          auto p = MakePush(step, r, {{0, {1, 2, 3}}, {1, {1}}}, o);
          ASSERT_TRUE(shard->Push(p.input()).ok());
        }
      });
    }
    for (auto& t : threads) t.join();
    before = Rows(shard.get());
  }
  auto shard = OpenShard(o);
  EXPECT_EQ(Rows(shard.get()), before);
  EXPECT_EQ(shard->applied_step(), 19);
}

TEST(ShardTest, RestorePointsBoundReplayAndOldOnesAreDeleted) {
  TempDir dir;
  auto o = SmallShard(dir.path(), 1);
  o.restore_point_every_bytes = 1000;  // a push here is 120 bytes
  auto shard = OpenShard(o);
  for (int64_t step = 0; step < 40; ++step)
    ASSERT_TRUE(shard->Push(MakePush(step, 0, {{0, {1, 2, 3, 4, 5}}}, o).input()).ok());
  EXPECT_GT(shard->stats().restore_points, 3u);
  int markers = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/restore"))
    markers += e.path().extension() == ".done";
  EXPECT_EQ(markers, 2);
  // The log behind the older kept restore point goes too, on the shard's own thread: at most
  // the segments begun by the two kept restore points and the one before them remain.
  const auto segments = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/log"))
      n += e.path().extension() == ".log";
    return n;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (segments() > 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_LE(segments(), 3) << "of " << shard->stats().restore_points << " restore points";
  // The folders of removed restore points are deleted on that thread too, after a rename that
  // takes them out of every listing at once.
  const auto folders = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/restore"))
      if (e.is_directory()) names.push_back(e.path().filename().string());
    return names;
  };
  while (folders().size() > 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(folders().size(), 2u) << ::testing::PrintToString(folders());
  auto before = Rows(shard.get());
  shard.reset();
  // A stop in the middle of such a deletion leaves a *.doomed folder: the next start removes it.
  const std::string doomed = dir.path() + "/restore/t0-s3-l1.doomed";
  std::filesystem::create_directories(doomed + "/sub");
  ::tandem::testing::WriteFile(doomed + "/sub/000001.sst", "x");
  shard = OpenShard(o);
  EXPECT_FALSE(std::filesystem::exists(doomed));
  EXPECT_EQ(Rows(shard.get()), before);
  EXPECT_LT(shard->stats().replayed_records, 40u);
}

}  // namespace
}  // namespace tandem::ps

namespace tandem::ps {
namespace {

// The in-process table a single-process trainer uses computes what a shard computes.
TEST(LocalEmbeddingTableTest, MatchesAShardBitForBit) {
  ::tandem::testing::TempDir dir;
  auto o = testing::SmallShard(dir.path(), 1);
  auto shard = std::move(Shard::Open(o)).value();
  LocalEmbeddingTable local(o.tables, o.seed);
  std::vector<uint64_t> ids = {4, 8, 15, 16, 23, 42};
  for (int64_t step = 0; step < 20; ++step) {
    auto p = testing::MakePush(step, 0, {{0, ids}, {1, {8, 42}}}, o);
    ASSERT_TRUE(shard->Push(p.input()).ok());
    std::vector<TableGrads> g;
    for (const auto& t : p.tables) g.push_back({t.table_id, t.ids, t.grads});
    ASSERT_TRUE(local.Push(step, g).ok());
  }
  for (uint32_t table = 0; table < 2; ++table) {
    std::vector<uint64_t> probe = {4, 8, 42, 999};
    std::vector<float> want(probe.size() * o.tables[table].dim);
    ASSERT_TRUE(shard->Read(table, probe, want.data()).ok());
    std::vector<std::vector<float>> got;
    TableIds t{table, probe};
    ASSERT_TRUE(local.Pull(20, {&t, 1}, &got).ok());
    EXPECT_EQ(0, std::memcmp(got[0].data(), want.data(), want.size() * 4)) << "table " << table;
  }
  EXPECT_EQ(local.rows_stored(), 8u);
}

}  // namespace
}  // namespace tandem::ps

namespace tandem::ps {
namespace {

using ::tandem::testing::TempDir;

// Every sparse optimizer, so that each one's state layout is covered by the comparison.
ShardOptions ChecksumShard(const std::string& dir) {
  auto o = testing::SmallShard(dir, 1);
  o.tables.push_back(testing::Spec(2, 4, embedding::OptimizerKind::kAdam));
  o.tables.push_back(testing::Spec(3, 4, embedding::OptimizerKind::kFtrl));
  o.tables.push_back(testing::Spec(4, 4, embedding::OptimizerKind::kRowwiseAdagrad));
  return o;
}

// Pushes steps [from, to) to the shard and, when given, the same gradients to `local`.
void PushSteps(Shard* shard, LocalEmbeddingTable* local, int64_t from, int64_t to) {
  const auto& o = shard->options();
  for (int64_t step = from; step < to; ++step) {
    std::map<uint32_t, std::vector<uint64_t>> ids;
    for (uint32_t table = 0; table < o.tables.size(); ++table)
      ids[table] = {uint64_t(step % 5), 7, 100 + uint64_t(step), 1000 * (table + 1)};
    auto p = testing::MakePush(step, 0, ids, o);
    ASSERT_TRUE(shard->Push(p.input()).ok());
    if (local == nullptr) continue;
    std::vector<TableGrads> g;
    for (const auto& t : p.tables) g.push_back({t.table_id, t.ids, t.grads});
    ASSERT_TRUE(local->Push(step, g).ok());
  }
}

ModelChecksum ShardChecksum(Shard* shard, uint64_t* rows = nullptr) {
  ModelChecksum sum;
  uint64_t n = 0;
  Status s = shard->AddToChecksum(&sum, &n);
  EXPECT_TRUE(s.ok()) << s;
  if (rows != nullptr) *rows = n;
  return sum;
}

// The PS path and the in-process path give the same model_checksum. The cache is too small to
// hold the rows, so the scan has to find rows in RocksDB as well as in memory.
TEST(ShardChecksumTest, EqualsLocalEmbeddingTableAfterTheSamePushes) {
  TempDir dir;
  auto o = ChecksumShard(dir.path());
  o.cache_bytes = 4096;
  auto shard = std::move(Shard::Open(o)).value();
  LocalEmbeddingTable local(o.tables, o.seed);
  PushSteps(shard.get(), &local, 0, 30);
  uint64_t rows = 0;
  ModelChecksum got = ShardChecksum(shard.get(), &rows);
  ModelChecksum want;
  local.AddToChecksum(&want);
  EXPECT_EQ(got.Hex(), want.Hex());
  EXPECT_EQ(rows, local.rows_stored());
  EXPECT_GT(shard->store()->stats().evictions, 0u) << "every row stayed cached";
  EXPECT_NE(got.Hex(), ModelChecksum().Hex());
}

TEST(ShardChecksumTest, ChangesWithEveryAppliedStepOnly) {
  TempDir dir;
  auto o = testing::SmallShard(dir.path(), 2);
  auto shard = std::move(Shard::Open(o)).value();
  ASSERT_TRUE(shard->Push(testing::MakePush(0, 0, {{0, {1, 2}}}, o).input()).ok());
  ASSERT_TRUE(shard->Push(testing::MakePush(0, 1, {{0, {2, 3}}}, o).input()).ok());
  const std::string at0 = ShardChecksum(shard.get()).Hex();
  // Reads and the scan itself change nothing.
  std::vector<uint64_t> ids = {1, 9};
  std::vector<float> out(8);
  ASSERT_TRUE(shard->Read(0, ids, out.data()).ok());
  EXPECT_EQ(ShardChecksum(shard.get()).Hex(), at0);
  // Half of step 1 is logged but not applied: not part of the model yet.
  ASSERT_TRUE(shard->Push(testing::MakePush(1, 0, {{0, {1}}}, o).input()).ok());
  EXPECT_EQ(ShardChecksum(shard.get()).Hex(), at0);
  ASSERT_TRUE(shard->Push(testing::MakePush(1, 1, {{1, {5}}}, o).input()).ok());
  ASSERT_EQ(shard->applied_step(), 1);
  uint64_t rows = 0;
  EXPECT_NE(ShardChecksum(shard.get(), &rows).Hex(), at0);
  EXPECT_EQ(rows, 4u);
}

// Counters of ids not admitted yet are shard state, so they are part of the sum.
TEST(ShardChecksumTest, IncludesAdmissionCounters) {
  TempDir dir;
  auto o = testing::SmallShard(dir.path(), 1);
  o.tables[0].admission_min_count = 3;
  auto shard = std::move(Shard::Open(o)).value();
  ASSERT_TRUE(shard->Push(testing::MakePush(0, 0, {{0, {42}}}, o).input()).ok());
  ASSERT_TRUE(shard->Push(testing::MakePush(1, 0, {{0, {42}}}, o).input()).ok());
  uint64_t rows = 7;
  ModelChecksum got = ShardChecksum(shard.get(), &rows);
  ModelChecksum want;
  want.AddAdmissionCounter(0, 42, 2);
  EXPECT_EQ(got.Hex(), want.Hex());
  EXPECT_EQ(rows, 0u);
}

// Recovery (restore point + log replay) rebuilds the same model, so the sum of a stopped job's
// shard can be taken by reopening its directory.
TEST(ShardChecksumTest, SameAfterReopen) {
  TempDir dir;
  auto o = ChecksumShard(dir.path());
  std::string before;
  {
    auto shard = std::move(Shard::Open(o)).value();
    PushSteps(shard.get(), nullptr, 0, 5);
    ASSERT_TRUE(shard->TakeRestorePoint().ok());
    PushSteps(shard.get(), nullptr, 5, 9);  // only in the log
    before = ShardChecksum(shard.get()).Hex();
  }
  auto shard = std::move(Shard::Open(o)).value();
  EXPECT_EQ(shard->applied_step(), 8);
  EXPECT_EQ(ShardChecksum(shard.get()).Hex(), before);
}

}  // namespace
}  // namespace tandem::ps

namespace tandem::ps {
namespace {

// Reopening a directory with another job's shape must fail, not rebuild a different model.
TEST(ShardTest, RecoveryRefusesOptionsThatDoNotMatchTheLog) {
  ::tandem::testing::TempDir dir;
  auto o = testing::SmallShard(dir.path(), 2);
  {
    auto shard = std::move(Shard::Open(o)).value();
    ASSERT_TRUE(shard->Push(testing::MakePush(0, 0, {{0, {1}}}, o).input()).ok());
    ASSERT_TRUE(shard->Push(testing::MakePush(0, 1, {{0, {2}}}, o).input()).ok());
  }
  auto fewer_workers = o;
  fewer_workers.num_workers = 1;
  auto s = Shard::Open(fewer_workers);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.status().IsFailedPrecondition()) << s.status();
  EXPECT_NE(s.status().message().find("does not match"), std::string::npos) << s.status();
  auto other_index = o;
  other_index.shard_index = 1;
  other_index.num_shards = 2;
  EXPECT_TRUE(Shard::Open(other_index).status().IsFailedPrecondition());
  // Nothing was lost: the right options still recover both pushes.
  auto shard = Shard::Open(o);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ((*shard)->applied_step(), 0);
  EXPECT_EQ(testing::Rows(shard->get()).size(), 2u);
}

}  // namespace
}  // namespace tandem::ps

namespace tandem::ps {
namespace {

// Many tables of every optimizer, some with admission or TTL, in a cache that evicts.
ShardOptions ManyTables(const std::string& dir, uint32_t workers, int64_t k, int apply_threads) {
  auto o = testing::SmallShard(dir, workers, k);
  o.tables.clear();
  const embedding::OptimizerKind kinds[] = {
      embedding::OptimizerKind::kSgd, embedding::OptimizerKind::kAdagrad,
      embedding::OptimizerKind::kRowwiseAdagrad, embedding::OptimizerKind::kAdam,
      embedding::OptimizerKind::kFtrl};
  for (uint32_t t = 0; t < 24; ++t) {
    o.tables.push_back(testing::Spec(t, 4 + 4 * (t % 3), kinds[t % 5]));
    if (t % 7 == 3) o.tables.back().admission_min_count = 2;
    if (t % 5 == 2) o.tables.back().ttl_steps = 2;
  }
  o.cache_bytes = 64 << 10;
  o.apply_threads = apply_threads;
  return o;
}

struct ManyTablesRun {
  std::string checksum;
  ShardStats stats;
  std::vector<float> pre_images;  // of every table's ids of the last step
  std::vector<float> reads;       // ReadTables of the same ids
};

// Steps of pushes from every rank: tables of very different sizes, ids shared across ranks
// (summed) and across steps (updated again, expired, admitted).
// With `large`, tables 1 and 9 get 10-12k ids per rank and step (about 20k merged), so that one
// table's rows are applied and read in parts at once (Shard::ApplyParts).
ManyTablesRun RunManyTables(uint32_t workers, int64_t k, int apply_threads, bool large = false) {
  ::tandem::testing::TempDir dir;
  const auto o = ManyTables(dir.path(), workers, k, apply_threads);
  auto shard = std::move(Shard::Open(o)).value();
  std::map<uint32_t, std::vector<uint64_t>> last;
  for (int64_t step = 0; step < 8; ++step) {
    for (uint32_t rank = 0; rank < workers; ++rank) {
      std::map<uint32_t, std::vector<uint64_t>> ids;
      for (uint32_t t = 0; t < o.tables.size(); ++t) {
        if ((t + step + rank) % 6 == 0) continue;  // some tables without rows from this rank
        const bool big = large && (t == 1 || t == 9);
        const uint64_t n = big ? 10000 + step * 300 : 1 + (t * 37 + step * 11) % 200;
        const uint64_t space = big ? 30000 : 400;
        for (uint64_t i = 0; i < n; ++i) ids[t].push_back((i * (rank + 1) + step * 3) % space);
        std::sort(ids[t].begin(), ids[t].end());
        ids[t].erase(std::unique(ids[t].begin(), ids[t].end()), ids[t].end());
        if (step == 7) last[t].insert(last[t].end(), ids[t].begin(), ids[t].end());
      }
      EXPECT_TRUE(shard->Push(testing::MakePush(step, rank, ids, o).input()).ok());
    }
  }
  ManyTablesRun run;
  ModelChecksum sum;
  EXPECT_TRUE(shard->AddToChecksum(&sum, nullptr).ok());
  run.checksum = sum.Hex();
  run.stats = shard->stats();
  std::vector<TableRead> reads;
  std::vector<std::vector<float>> out(o.tables.size());
  for (auto& [t, ids] : last) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    out[t].resize(ids.size() * o.tables[t].dim);
    reads.push_back({t, ids, out[t].data()});
  }
  EXPECT_TRUE(shard->ReadTables(reads, /*from_pre_images=*/k == 0).ok());
  for (const auto& v : out) run.pre_images.insert(run.pre_images.end(), v.begin(), v.end());
  EXPECT_TRUE(shard->ReadTables(reads, /*from_pre_images=*/false).ok());
  for (const auto& v : out) run.reads.insert(run.reads.end(), v.begin(), v.end());
  // ReadTables is Read per table.
  for (const TableRead& r : reads) {
    std::vector<float> one(r.ids.size() * o.tables[r.table].dim);
    EXPECT_TRUE(shard->Read(r.table, r.ids, one.data()).ok());
    EXPECT_EQ(std::memcmp(one.data(), r.out, one.size() * sizeof(float)), 0) << r.table;
  }
  return run;
}

void ExpectSameRun(const ManyTablesRun& a, const ManyTablesRun& b) {
  EXPECT_EQ(a.checksum, b.checksum);
  EXPECT_EQ(a.stats.rows_applied, b.stats.rows_applied);
  EXPECT_EQ(a.stats.rows_admitted, b.stats.rows_admitted);
  EXPECT_EQ(a.stats.rows_not_admitted, b.stats.rows_not_admitted);
  EXPECT_EQ(a.stats.rows_expired, b.stats.rows_expired);
  EXPECT_EQ(a.stats.steps_applied, b.stats.steps_applied);
  ASSERT_EQ(a.pre_images.size(), b.pre_images.size());
  EXPECT_EQ(std::memcmp(a.pre_images.data(), b.pre_images.data(), a.pre_images.size() * 4), 0);
  ASSERT_EQ(a.reads.size(), b.reads.size());
  EXPECT_EQ(std::memcmp(a.reads.data(), b.reads.data(), a.reads.size() * 4), 0);
}

// Tables are applied (and read) in parallel; the model must not depend on how many threads do
// it (PROTOCOLS §5).
TEST(ShardApplyThreadsTest, ModelIsTheSameWithOneOrFourThreadsAtK0) {
  const ManyTablesRun one = RunManyTables(/*workers=*/3, /*k=*/0, /*apply_threads=*/1);
  const ManyTablesRun four = RunManyTables(3, 0, 4);
  ExpectSameRun(one, four);
  EXPECT_GT(one.stats.rows_not_admitted, 0u);
  EXPECT_GT(one.stats.rows_expired, 0u);
  EXPECT_NE(one.pre_images, one.reads);
}

// One table's ~20k merged ids are applied in two parts at once, each adding its rows'
// changes into the kept sum: the same model, sum and pre-images as one thread.
TEST(ShardApplyThreadsTest, LargeTablesAppliedInPartsGiveTheSameModel) {
  const ManyTablesRun one = RunManyTables(/*workers=*/3, /*k=*/0, /*apply_threads=*/1, true);
  const ManyTablesRun four = RunManyTables(3, 0, 4, true);
  ExpectSameRun(one, four);
  EXPECT_GT(one.stats.rows_applied, 8u * 2 * 16384);
  EXPECT_NE(one.pre_images, one.reads);
}

TEST(ShardApplyThreadsTest, ModelIsTheSameWithOneOrFourThreadsAtK1) {
  ExpectSameRun(RunManyTables(2, 1, 1), RunManyTables(2, 1, 4));
}

}  // namespace
}  // namespace tandem::ps
