#include "server/ps/push_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/test_util.h"

namespace tandem::ps {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

// A push that owns its arrays; content is a pure function of `seed`, so a replayed record can
// be checked against the push it must equal.
struct OwnedPush {
  PushHeader header;
  std::vector<PushTable> tables;
  std::vector<PushTableView> Views() const {
    std::vector<PushTableView> views;
    for (const PushTable& t : tables) views.push_back({t.table_id, t.dim, t.ids, t.grads});
    return views;
  }
};

PushTable MakeTable(uint32_t id, uint32_t dim, uint32_t rows, uint64_t seed) {
  PushTable t{id, dim, {}, {}};
  for (uint32_t r = 0; r < rows; ++r) t.ids.push_back(seed * 1000003 + r * 7 + id);
  for (uint32_t i = 0; i < rows * dim; ++i) t.grads.push_back(static_cast<float>(seed) * 0.25f + i);
  return t;
}

// 0..3 tables, some with zero rows, dims 1..5.
OwnedPush MakePush(uint64_t seed) {
  OwnedPush p;
  p.header.timeline = 2;
  p.header.step = static_cast<int64_t>(seed) * 3 - 1;
  p.header.rank = static_cast<uint32_t>(seed % 8);
  p.header.shard = 5;
  p.header.incarnation = 40 + seed;
  p.header.flags = static_cast<uint32_t>(seed & 1);
  for (uint32_t t = 0; t < seed % 4; ++t)
    p.tables.push_back(MakeTable(t, 1 + (seed + t) % 5, (seed * 7 + t) % 6, seed));
  return p;
}

void ExpectSame(const PushRecord& got, const OwnedPush& want, uint64_t lsn) {
  SCOPED_TRACE("lsn " + std::to_string(lsn));
  EXPECT_EQ(got.header.lsn, lsn);
  EXPECT_EQ(got.header.timeline, want.header.timeline);
  EXPECT_EQ(got.header.step, want.header.step);
  EXPECT_EQ(got.header.rank, want.header.rank);
  EXPECT_EQ(got.header.shard, want.header.shard);
  EXPECT_EQ(got.header.incarnation, want.header.incarnation);
  EXPECT_EQ(got.header.flags, want.header.flags);
  ASSERT_EQ(got.tables.size(), want.tables.size());
  for (size_t i = 0; i < got.tables.size(); ++i) {
    EXPECT_EQ(got.tables[i].table_id, want.tables[i].table_id);
    EXPECT_EQ(got.tables[i].dim, want.tables[i].dim);
    EXPECT_EQ(got.tables[i].ids, want.tables[i].ids);
    EXPECT_EQ(got.tables[i].grads, want.tables[i].grads);
  }
}

PushLogOptions Options(const std::string& dir) {
  PushLogOptions o;
  o.dir = dir;
  return o;
}

std::unique_ptr<PushLog> OpenOrDie(const PushLogOptions& o) {
  auto log = PushLog::Open(o);
  EXPECT_TRUE(log.ok()) << log.status();
  return log.ok() ? std::move(log).value() : nullptr;
}

// Appends MakePush(seed) and returns the assigned lsn (0 on failure).
uint64_t AppendSeed(PushLog* log, uint64_t seed) {
  OwnedPush p = MakePush(seed);
  auto views = p.Views();
  Status s = log->Append(&p.header, views);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? p.header.lsn : 0;
}

std::vector<PushRecord> ReplayAll(const PushLog& log, uint64_t after_lsn = 0) {
  std::vector<PushRecord> out;
  Status s = log.Replay(after_lsn, [&](const PushRecord& r) {
    out.push_back(r);
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// Checks that replay yields exactly lsns first..last, record lsn i equal to MakePush(seed_of(i)).
template <typename SeedOf>
void ExpectReplay(const PushLog& log, uint64_t after, uint64_t last, SeedOf seed_of) {
  std::vector<PushRecord> got = ReplayAll(log, after);
  ASSERT_EQ(got.size(), last - after);
  for (uint64_t lsn = after + 1; lsn <= last; ++lsn)
    ExpectSame(got[lsn - after - 1], MakePush(seed_of(lsn)), lsn);
}
void ExpectReplay(const PushLog& log, uint64_t after, uint64_t last) {
  ExpectReplay(log, after, last, [](uint64_t lsn) { return lsn; });
}

std::string SegmentPath(const std::string& dir, uint64_t first_lsn) {
  std::string digits = std::to_string(first_lsn);
  return dir + "/" + std::string(20 - digits.size(), '0') + digits + ".log";
}

std::vector<std::string> LogFiles(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// Appends seeds 1..n to a fresh log and returns the file offset where each record starts
// (offsets[i] is where lsn i + 1 begins), plus the final size as the last element.
std::vector<uint64_t> WriteRecords(const std::string& dir, uint64_t n) {
  auto log = OpenOrDie(Options(dir));
  std::vector<uint64_t> offsets{0};
  for (uint64_t i = 1; i <= n; ++i) {
    AppendSeed(log.get(), i);
    offsets.push_back(log->total_bytes());
  }
  return offsets;
}

TEST(PushLogTest, RoundTripsSeveralTablesAndEmptyPushes) {
  TempDir dir;
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  std::vector<OwnedPush> pushes(3);
  pushes[0].header.step = 7;                          // no tables at all
  pushes[1].tables.push_back(MakeTable(4, 8, 0, 1));  // a table with no rows
  pushes[2].header.flags = 1;
  pushes[2].tables = {MakeTable(0, 16, 5, 2), MakeTable(3, 1, 0, 3), MakeTable(9, 3, 100, 4)};
  for (size_t i = 0; i < pushes.size(); ++i) {
    OwnedPush copy = pushes[i];
    auto views = copy.Views();
    ASSERT_TRUE(log->Append(&copy.header, views).ok());
    EXPECT_EQ(copy.header.lsn, i + 1);
  }
  std::vector<PushRecord> got = ReplayAll(*log);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) ExpectSame(got[i], pushes[i], i + 1);
  const uint64_t bytes = log->total_bytes();
  log.reset();
  EXPECT_EQ(bytes, fs::file_size(SegmentPath(dir.path(), 1)));
}

TEST(PushLogTest, LsnsIncreaseFromOneAndContinueAfterReopen) {
  TempDir dir;
  {
    auto log = OpenOrDie(Options(dir.path()));
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(log->last_lsn(), 0u);
    for (uint64_t i = 1; i <= 5; ++i) EXPECT_EQ(AppendSeed(log.get(), i), i);
  }
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->last_lsn(), 5u);
  EXPECT_EQ(AppendSeed(log.get(), 6), 6u);
  ExpectReplay(*log, 0, 6);
}

TEST(PushLogTest, ReplayStartsAfterTheGivenLsn) {
  TempDir dir;
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  for (uint64_t i = 1; i <= 10; ++i) AppendSeed(log.get(), i);
  ExpectReplay(*log, 6, 10);
  EXPECT_TRUE(ReplayAll(*log, 10).empty());
  EXPECT_TRUE(ReplayAll(*log, 99).empty());
}

TEST(PushLogTest, ReplayStopsAtTheCallbacksFirstError) {
  TempDir dir;
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  for (uint64_t i = 1; i <= 4; ++i) AppendSeed(log.get(), i);
  int calls = 0;
  Status s = log->Replay(0, [&](const PushRecord& r) {
    ++calls;
    return r.header.lsn == 2 ? Status::Aborted("stop") : Status::Ok();
  });
  EXPECT_TRUE(s.IsAborted()) << s;
  EXPECT_EQ(calls, 2);
}

TEST(PushLogTest, RejectsGradientsThatDoNotMatchIds) {
  TempDir dir;
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  PushTable t = MakeTable(1, 4, 3, 1);
  t.grads.pop_back();
  PushHeader h;
  std::vector<PushTableView> views{{t.table_id, t.dim, t.ids, t.grads}};
  EXPECT_TRUE(log->Append(&h, views).IsInvalidArgument());
  EXPECT_EQ(log->last_lsn(), 0u);
  EXPECT_EQ(fs::file_size(SegmentPath(dir.path(), 1)), 0u);
}

TEST(PushLogTest, TruncatedTailIsDroppedOnOpen) {
  TempDir dir;
  std::vector<uint64_t> offsets = WriteRecords(dir.path(), 5);
  const std::string path = SegmentPath(dir.path(), 1);
  fs::resize_file(path, offsets[4] + (offsets[5] - offsets[4]) / 2);  // lsn 5 half written
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->last_lsn(), 4u);
  EXPECT_EQ(fs::file_size(path), offsets[4]);
  EXPECT_EQ(AppendSeed(log.get(), 50), 5u);
  ExpectReplay(*log, 0, 5, [](uint64_t lsn) { return lsn == 5 ? 50 : lsn; });
}

TEST(PushLogTest, TornRecordHeaderIsDroppedOnOpen) {
  TempDir dir;
  std::vector<uint64_t> offsets = WriteRecords(dir.path(), 3);
  fs::resize_file(SegmentPath(dir.path(), 1), offsets[2] + 3);  // part of lsn 3's length
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->last_lsn(), 2u);
  ExpectReplay(*log, 0, 2);
}

TEST(PushLogTest, CorruptLastRecordIsDroppedOnOpen) {
  TempDir dir;
  std::vector<uint64_t> offsets = WriteRecords(dir.path(), 5);
  const std::string path = SegmentPath(dir.path(), 1);
  FlipByte(path, offsets[5] - 3);  // inside lsn 5's payload
  {
    auto log = OpenOrDie(Options(dir.path()));
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(log->last_lsn(), 4u);
    EXPECT_EQ(fs::file_size(path), offsets[4]);
    EXPECT_EQ(AppendSeed(log.get(), 77), 5u);
    EXPECT_EQ(AppendSeed(log.get(), 78), 6u);
  }
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  ExpectReplay(*log, 0, 6, [](uint64_t lsn) { return lsn > 4 ? lsn + 72 : lsn; });
}

TEST(PushLogTest, CorruptMiddleRecordIsDataLoss) {
  TempDir dir;
  std::vector<uint64_t> offsets = WriteRecords(dir.path(), 5);
  const std::string path = SegmentPath(dir.path(), 1);
  FlipByte(path, offsets[2] + 20);  // inside lsn 3's payload
  auto log = PushLog::Open(Options(dir.path()));
  ASSERT_FALSE(log.ok());
  EXPECT_TRUE(log.status().IsDataLoss()) << log.status();
  EXPECT_NE(log.status().message().find(path), std::string::npos) << log.status();
  EXPECT_NE(log.status().message().find("offset " + std::to_string(offsets[2])), std::string::npos)
      << log.status();
  EXPECT_EQ(fs::file_size(path), offsets[5]);  // nothing was cut
}

TEST(PushLogTest, CorruptLengthInMiddleRecordIsDataLoss) {
  TempDir dir;
  std::vector<uint64_t> offsets = WriteRecords(dir.path(), 4);
  FlipByte(SegmentPath(dir.path(), 1), offsets[1] + 1);  // lsn 2's length field
  auto log = PushLog::Open(Options(dir.path()));
  ASSERT_FALSE(log.ok());
  EXPECT_TRUE(log.status().IsDataLoss()) << log.status();
}

// Seeds 1..3 in a rolled segment, 4..5 in the newest; the log is closed again.
void WriteTwoSegments(const std::string& dir) {
  auto log = OpenOrDie(Options(dir));
  ASSERT_NE(log, nullptr);
  for (uint64_t i = 1; i <= 3; ++i) AppendSeed(log.get(), i);
  ASSERT_TRUE(log->Roll().ok());
  for (uint64_t i = 4; i <= 5; ++i) AppendSeed(log.get(), i);
}

TEST(PushLogTest, CorruptOlderSegmentIsDataLoss) {
  TempDir dir;
  WriteTwoSegments(dir.path());
  const std::string older = SegmentPath(dir.path(), 1);
  FlipByte(older, fs::file_size(older) - 2);  // the older segment's last record
  auto log = PushLog::Open(Options(dir.path()));
  ASSERT_FALSE(log.ok());
  EXPECT_TRUE(log.status().IsDataLoss()) << log.status();
  EXPECT_NE(log.status().message().find(older), std::string::npos) << log.status();
}

TEST(PushLogTest, RollAndDeleteThroughKeepSegmentsNotFullyCovered) {
  TempDir dir;
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  for (uint64_t i = 1; i <= 3; ++i) AppendSeed(log.get(), i);
  ASSERT_TRUE(log->Roll().ok());
  for (uint64_t i = 4; i <= 6; ++i) AppendSeed(log.get(), i);
  ASSERT_TRUE(log->Roll().ok());
  ASSERT_TRUE(log->Roll().ok());  // no-op: the open segment is still empty
  for (uint64_t i = 7; i <= 8; ++i) AppendSeed(log.get(), i);
  const std::string s1 = SegmentPath(dir.path(), 1), s4 = SegmentPath(dir.path(), 4),
                    s7 = SegmentPath(dir.path(), 7);
  EXPECT_EQ(LogFiles(dir.path()), (std::vector<std::string>{fs::path(s1).filename().string(),
                                                            fs::path(s4).filename().string(),
                                                            fs::path(s7).filename().string()}));
  // Rolled segments end at their last record; the open one may end in a direct write's padding.
  const uint64_t s1_bytes = fs::file_size(s1);
  const uint64_t before = log->total_bytes();
  const uint64_t s7_bytes = before - s1_bytes - fs::file_size(s4);
  EXPECT_LE(s7_bytes, fs::file_size(s7));
  EXPECT_LT(fs::file_size(s7) - s7_bytes, 4096u);

  ASSERT_TRUE(log->DeleteThrough(5).ok());  // 4..6 is not fully covered
  EXPECT_FALSE(fs::exists(s1));
  EXPECT_TRUE(fs::exists(s4));
  EXPECT_EQ(log->total_bytes(), before - s1_bytes);
  ExpectReplay(*log, 3, 8);
  EXPECT_EQ(log->Replay(0, [](const PushRecord&) { return Status::Ok(); }).code(),
            StatusCode::kOutOfRange);

  ASSERT_TRUE(log->DeleteThrough(100).ok());  // never the open segment
  EXPECT_FALSE(fs::exists(s4));
  EXPECT_TRUE(fs::exists(s7));
  ExpectReplay(*log, 6, 8);
  log.reset();

  log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->last_lsn(), 8u);
  EXPECT_EQ(AppendSeed(log.get(), 9), 9u);
  ExpectReplay(*log, 6, 9);
}

TEST(PushLogTest, NextLsnSurvivesDeletingEveryClosedSegment) {
  TempDir dir;
  {
    auto log = OpenOrDie(Options(dir.path()));
    ASSERT_NE(log, nullptr);
    for (uint64_t i = 1; i <= 4; ++i) AppendSeed(log.get(), i);
    ASSERT_TRUE(log->Roll().ok());
    ASSERT_TRUE(log->DeleteThrough(4).ok());
    EXPECT_EQ(log->total_bytes(), 0u);
  }
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->last_lsn(), 4u);
  EXPECT_EQ(AppendSeed(log.get(), 5), 5u);
  ExpectReplay(*log, 4, 5);
}

TEST(PushLogTest, AlarmRaisedPastMaxBytes) {
  TempDir dir;
  PushLogOptions o = Options(dir.path());
  o.max_bytes = 200;
  auto log = OpenOrDie(o);
  ASSERT_NE(log, nullptr);
  EXPECT_FALSE(log->alarm());
  while (log->total_bytes() <= 200) AppendSeed(log.get(), 3);
  EXPECT_TRUE(log->alarm());
  EXPECT_GT(AppendSeed(log.get(), 3), 0u);  // still accepted
}

TEST(PushLogTest, MachineModeGroupsConcurrentAppends) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 60;
  TempDir dir;
  PushLogOptions o = Options(dir.path());
  o.durability = Durability::kMachine;
  o.group = std::chrono::milliseconds(2);
  std::map<uint64_t, uint64_t> seed_of_lsn;
  {
    auto log = OpenOrDie(o);
    ASSERT_NE(log, nullptr);
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> acked(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          const uint64_t seed = 1000 * (t + 1) + i;
          const uint64_t lsn = AppendSeed(log.get(), seed);
          // Acknowledged means synced: the flusher has covered it.
          EXPECT_GE(log->sync_count(), 1u);
          acked[t].emplace_back(lsn, seed);
        }
      });
    }
    for (auto& th : threads) th.join();
    for (const auto& per_thread : acked)
      for (const auto& [lsn, seed] : per_thread) seed_of_lsn[lsn] = seed;
    EXPECT_EQ(log->last_lsn(), uint64_t{kThreads * kPerThread});
    EXPECT_GE(log->sync_count(), 1u);
    EXPECT_LT(log->sync_count(), uint64_t{kThreads * kPerThread}) << "appends did not share syncs";
  }
  ASSERT_EQ(seed_of_lsn.size(), size_t{kThreads * kPerThread});
  EXPECT_EQ(seed_of_lsn.begin()->first, 1u);
  auto log = OpenOrDie(o);
  ASSERT_NE(log, nullptr);
  ExpectReplay(*log, 0, kThreads * kPerThread, [&](uint64_t lsn) { return seed_of_lsn[lsn]; });
}

TEST(PushLogTest, MachineModeRollSyncsTheOldSegment) {
  TempDir dir;
  PushLogOptions o = Options(dir.path());
  o.durability = Durability::kMachine;
  auto log = OpenOrDie(o);
  ASSERT_NE(log, nullptr);
  for (uint64_t i = 1; i <= 3; ++i) AppendSeed(log.get(), i);
  ASSERT_TRUE(log->Roll().ok());
  EXPECT_EQ(AppendSeed(log.get(), 4), 4u);
  ExpectReplay(*log, 0, 4);
}

// Short write followed by ENOSPC (or another errno), as a full disk produces them. Direct writes
// (offset >= 0) are cut at a block boundary, as the kernel cuts them.
class FailingWriter {
 public:
  void FailNext(int err) { fail_errno_ = err; }
  ssize_t operator()(int fd, const iovec* iov, int iovcnt, off_t offset) {
    const int err = fail_errno_.exchange(0);
    if (err == 0)
      return offset < 0 ? ::writev(fd, iov, iovcnt) : ::pwritev(fd, iov, iovcnt, offset);
    const size_t half = offset < 0 ? iov[0].iov_len / 2 : iov[0].iov_len / 2 / 4096 * 4096;
    if (half > 0) {
      ssize_t n = offset < 0 ? ::write(fd, iov[0].iov_base, half)
                             : ::pwrite(fd, iov[0].iov_base, half, offset);
      if (n > 0) {
        fail_errno_ = err;  // the write after the short one fails
        shorts_++;
        return n;
      }
    }
    errno = err;
    return -1;
  }
  int shorts() const { return shorts_; }

 private:
  std::atomic<int> fail_errno_{0};
  std::atomic<int> shorts_{0};
};

// Both ways of writing (direct where the file system takes it, and buffered).
class PushLogIoTest : public ::testing::TestWithParam<bool> {
 protected:
  PushLogOptions IoOptions(const std::string& dir) const {
    PushLogOptions o = Options(dir);
    o.direct_io = GetParam();
    return o;
  }
};
INSTANTIATE_TEST_SUITE_P(Io, PushLogIoTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "direct" : "buffered"; });

// Reserve allocates what the next direct write covers and names the LSN it takes; a reservation
// never followed by its write (a crash) leaves zeros that the next open cuts off.
TEST_P(PushLogIoTest, ReserveNamesTheNextLsnAndLeavesNothingBehind) {
  TempDir dir;
  auto log = OpenOrDie(IoOptions(dir.path()));
  ASSERT_NE(log, nullptr);
  ASSERT_EQ(AppendSeed(log.get(), 1), 1u);
  OwnedPush p = MakePush(3);
  p.tables.push_back(MakeTable(7, 16, 300, 3));  // ~20 KB: several blocks
  auto views = p.Views();
  StatusOr<uint64_t> next = log->Reserve(views);
  if (!log->direct_io()) {
    EXPECT_EQ(next.status().code(), StatusCode::kUnimplemented) << next.status();
    return;
  }
  ASSERT_TRUE(next.ok()) << next.status();  // every file system that takes O_DIRECT here
  EXPECT_EQ(*next, 2u);
  const std::string path = SegmentPath(dir.path(), 1);
  const uint64_t reserved = fs::file_size(path);
  ASSERT_TRUE(log->Append(&p.header, views).ok());
  EXPECT_EQ(p.header.lsn, 2u);
  EXPECT_EQ(fs::file_size(path), reserved);  // the write covered exactly the reserved blocks
  // A reservation without its write, then a crash (no clean close): the zeros go at open.
  ASSERT_TRUE(log->Reserve(views).ok());
  EXPECT_GT(fs::file_size(path), reserved);
  log.reset();
  log = OpenOrDie(IoOptions(dir.path()));
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->last_lsn(), 2u);
  EXPECT_EQ(AppendSeed(log.get(), 4), 3u);
  ASSERT_EQ(ReplayAll(*log).size(), 3u);
  ExpectSame(ReplayAll(*log)[1], p, 2);
}

TEST_P(PushLogIoTest, FailedWriteLeavesFileUnchangedAndLogUsable) {
  TempDir dir;
  auto writer = std::make_shared<FailingWriter>();
  PushLogOptions o = IoOptions(dir.path());
  o.write_for_test = [writer](int fd, const iovec* iov, int n, off_t offset) {
    return (*writer)(fd, iov, n, offset);
  };
  auto log = OpenOrDie(o);
  ASSERT_NE(log, nullptr);
  for (uint64_t i = 1; i <= 3; ++i) AppendSeed(log.get(), i);
  const std::string path = SegmentPath(dir.path(), 1);
  const uint64_t size = log->total_bytes();

  writer->FailNext(ENOSPC);
  OwnedPush p = MakePush(11);
  p.tables.push_back(MakeTable(7, 16, 4096, 11));  // 288 KiB: a short write comes before ENOSPC
  auto views = p.Views();
  Status s = log->Append(&p.header, views);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(p.header.lsn, 0u);
  EXPECT_GE(writer->shorts(), 1);
  EXPECT_EQ(fs::file_size(path), size);
  EXPECT_EQ(log->last_lsn(), 3u);
  EXPECT_EQ(log->total_bytes(), size);

  // A file-size limit (RLIMIT_FSIZE) is a full disk too: refuse until it is lifted.
  writer->FailNext(EFBIG);
  EXPECT_EQ(log->Append(&p.header, views).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(fs::file_size(path), size);

  writer->FailNext(EIO);
  EXPECT_TRUE(log->Append(&p.header, views).IsUnavailable());
  EXPECT_EQ(fs::file_size(path), size);

  EXPECT_EQ(AppendSeed(log.get(), 4), 4u);
  ExpectReplay(*log, 0, 4);
  log.reset();
  log = OpenOrDie(IoOptions(dir.path()));
  ASSERT_NE(log, nullptr);
  ExpectReplay(*log, 0, 4);
}

// Records from a few bytes to past the direct I/O chunk (1 MiB), appended across reopens and
// rolls, read back whole; closed segments end at their last record.
TEST_P(PushLogIoTest, RecordsOfEverySizeRoundTripAcrossReopenAndRoll) {
  TempDir dir;
  auto push_of = [](uint64_t lsn) {
    OwnedPush p = MakePush(lsn);
    if (lsn % 3 == 0) p.tables.push_back(MakeTable(8, 1 + lsn % 7, 1000 + 97 * lsn, lsn));
    if (lsn % 5 == 0) p.tables.push_back(MakeTable(9, 16, 17000 + lsn, lsn));  // > 1 MiB
    return p;
  };
  auto append = [&](PushLog* log, uint64_t lsn) {
    OwnedPush p = push_of(lsn);
    auto views = p.Views();
    ASSERT_TRUE(log->Append(&p.header, views).ok());
    ASSERT_EQ(p.header.lsn, lsn);
  };
  uint64_t lsn = 0;
  for (int round = 0; round < 3; ++round) {
    auto log = OpenOrDie(IoOptions(dir.path()));
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(log->direct_io(), GetParam() && testing::TakesODirect(dir.path()));
    for (int i = 0; i < 6; ++i) append(log.get(), ++lsn);
    if (round == 1) {
      ASSERT_TRUE(log->Roll().ok());
    }
    for (int i = 0; i < 5; ++i) append(log.get(), ++lsn);
  }
  auto log = OpenOrDie(IoOptions(dir.path()));
  ASSERT_NE(log, nullptr);
  std::vector<PushRecord> got = ReplayAll(*log);
  ASSERT_EQ(got.size(), lsn);
  for (uint64_t i = 1; i <= lsn; ++i) ExpectSame(got[i - 1], push_of(i), i);
  uint64_t on_disk = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) on_disk += fs::file_size(e.path());
  EXPECT_EQ(on_disk, log->total_bytes());
}

// A file system that takes O_DIRECT at open but refuses 4 KiB-aligned writes (EINVAL): the
// record goes out buffered, and so does everything after it, in this segment and the next.
TEST(PushLogTest, DirectWritesRefusedWithEinvalFallBackToBuffered) {
  TempDir dir;
  // Where O_DIRECT is refused at open already, no direct write is even tried.
  const int want_direct_calls = testing::TakesODirect(dir.path()) ? 1 : 0;
  int direct_calls = 0, buffered_calls = 0;
  PushLogOptions o = Options(dir.path());
  o.write_for_test = [&](int fd, const iovec* iov, int n, off_t offset) -> ssize_t {
    if (offset >= 0) {
      ++direct_calls;
      errno = EINVAL;
      return -1;
    }
    ++buffered_calls;
    return ::writev(fd, iov, n);
  };
  {
    auto log = OpenOrDie(o);
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(AppendSeed(log.get(), 1), 1u);
    EXPECT_FALSE(log->direct_io());
    EXPECT_EQ(AppendSeed(log.get(), 2), 2u);
    ASSERT_TRUE(log->Roll().ok());
    EXPECT_EQ(AppendSeed(log.get(), 3), 3u);
    EXPECT_FALSE(log->direct_io());
    ExpectReplay(*log, 0, 3);
  }
  EXPECT_EQ(direct_calls, want_direct_calls);
  EXPECT_EQ(buffered_calls, 3);
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  ExpectReplay(*log, 0, 3);
}

// A direct write pads the open segment with zeros to a whole block; a process killed then leaves
// the padding behind. It is cut without complaint, in the newest segment and in an older one
// (machine crash before Roll's cut reached the disk), but a whole block of zeros is damage.
TEST(PushLogTest, ZeroPaddingShorterThanABlockIsNotDamage) {
  TempDir dir;
  WriteTwoSegments(dir.path());
  const std::string older = SegmentPath(dir.path(), 1), newest = SegmentPath(dir.path(), 4);
  const uint64_t older_bytes = fs::file_size(older), newest_bytes = fs::file_size(newest);
  fs::resize_file(older, older_bytes + 4095);  // resize_file extends with zeros
  fs::resize_file(newest, newest_bytes + 1000);
  {
    auto log = OpenOrDie(Options(dir.path()));
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(log->last_lsn(), 5u);
    EXPECT_EQ(log->total_bytes(), older_bytes + newest_bytes);
    EXPECT_EQ(fs::file_size(newest), newest_bytes);
    ExpectReplay(*log, 0, 5);
    EXPECT_EQ(AppendSeed(log.get(), 6), 6u);
  }
  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  ExpectReplay(*log, 0, 6);
  log.reset();
  fs::resize_file(older, older_bytes + 4096);
  auto damaged = PushLog::Open(Options(dir.path()));
  ASSERT_FALSE(damaged.ok());
  EXPECT_TRUE(damaged.status().IsDataLoss()) << damaged.status();
}

// Content for the kill test: every fifth record is large, so the kill often lands mid-write.
OwnedPush KillTestPush(uint64_t lsn) {
  OwnedPush p = MakePush(lsn);
  if (lsn % 5 == 0) p.tables.push_back(MakeTable(7, 16, 4096, lsn));
  return p;
}

// Child: appends forever, reporting each acknowledged lsn on `fd`. Never returns.
[[noreturn]] void AppendUntilKilled(const std::string& dir, int fd) {
  auto log = PushLog::Open(Options(dir));
  if (!log.ok()) ::_exit(2);
  for (uint64_t i = 1;; ++i) {
    OwnedPush p = KillTestPush(i);
    auto views = p.Views();
    if (!(*log)->Append(&p.header, views).ok() || p.header.lsn != i) ::_exit(3);
    if (::write(fd, &p.header.lsn, sizeof p.header.lsn) != sizeof p.header.lsn) ::_exit(4);
  }
}

TEST(PushLogTest, AcknowledgedPushesSurviveKill9) {
  TempDir dir;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const uint64_t kill_after = std::uniform_int_distribution<uint64_t>(20, 400)(rng);
  const int extra_us = std::uniform_int_distribution<int>(0, 3000)(rng);

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    AppendUntilKilled(dir.path(), fds[1]);
  }
  ::close(fds[1]);
  uint64_t acked = 0, lsn = 0;
  while (acked < kill_after && ::read(fds[0], &lsn, sizeof lsn) == sizeof lsn) acked = lsn;
  std::this_thread::sleep_for(std::chrono::microseconds(extra_us));
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
  // Acks still in the pipe were given before the kill, so they count too.
  while (::read(fds[0], &lsn, sizeof lsn) == sizeof lsn) acked = lsn;
  ::close(fds[0]);
  ASSERT_GE(acked, kill_after);

  auto log = OpenOrDie(Options(dir.path()));
  ASSERT_NE(log, nullptr);
  ASSERT_GE(log->last_lsn(), acked);
  std::vector<PushRecord> got = ReplayAll(*log);
  ASSERT_EQ(got.size(), log->last_lsn());
  for (uint64_t i = 1; i <= got.size(); ++i) ExpectSame(got[i - 1], KillTestPush(i), i);
  EXPECT_EQ(AppendSeed(log.get(), 1), got.size() + 1);
}

}  // namespace
}  // namespace tandem::ps
