#include "server/ps/change_log.h"

#include <gtest/gtest.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/write_batch.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/testing/test_util.h"
#include "server/ps/file_io.h"

namespace tandem::ps {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> Records(const std::string& path, Status* status = nullptr) {
  std::vector<std::string> out;
  Status s = ForEachChangeRecord(path, [&](std::string&& rep) {
    out.push_back(std::move(rep));
    return Status::Ok();
  });
  if (status != nullptr) *status = s;
  EXPECT_TRUE(status != nullptr || s.ok()) << s;
  return out;
}

TEST(ChangeLogTest, CutsSealSegmentsThatHoldTheAppendsInOrder) {
  testing::TempDir tmp;
  auto log = ChangeLog::Open(tmp.File("changes"));
  ASSERT_TRUE(log.ok()) << log.status();
  (*log)->Append("a");
  (*log)->Append(std::string(3 << 20, 'b'));  // larger than the write buffer
  const uint64_t first = (*log)->Cut();
  const uint64_t empty = (*log)->Cut();  // nothing appended: no segment
  (*log)->Append("c");
  const uint64_t third = (*log)->Cut();
  (*log)->Append("d");  // still open: not sealed
  EXPECT_LT(first, empty);
  EXPECT_LT(empty, third);

  auto all = (*log)->Sealed(0, third + 10);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].seq, first);
  EXPECT_EQ(all[1].seq, third);
  for (const ChangeSegment& s : all) {
    EXPECT_TRUE(s.complete);
    EXPECT_EQ(fs::file_size(s.path), s.size_bytes);
    const std::string bytes = testing::ReadFile(s.path);
    EXPECT_EQ(Crc32c(bytes.data(), bytes.size()), s.crc32c);
  }
  EXPECT_EQ(Records(all[0].path), (std::vector<std::string>{"a", std::string(3 << 20, 'b')}));
  EXPECT_EQ(Records(all[1].path), (std::vector<std::string>{"c"}));
  EXPECT_EQ((*log)->Sealed(first, third).size(), 1u);
  EXPECT_TRUE((*log)->Sealed(third, third + 10).empty());

  (*log)->DropThrough(first);
  EXPECT_FALSE(fs::exists(all[0].path));
  EXPECT_TRUE(fs::exists(all[1].path));
  ASSERT_EQ((*log)->Sealed(0, third).size(), 1u);
}

// A shard deletes what it detaches on a thread of its own: the files stay until then, and the
// log no longer lists them.
TEST(ChangeLogTest, DetachedSegmentsLeaveTheLogButNotTheDisk) {
  testing::TempDir tmp;
  auto log = ChangeLog::Open(tmp.File("changes"));
  ASSERT_TRUE(log.ok()) << log.status();
  (*log)->Append("a");
  const uint64_t first = (*log)->Cut();
  (*log)->Append("b");
  const uint64_t second = (*log)->Cut();
  const auto all = (*log)->Sealed(0, second);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ((*log)->DetachThrough(first), std::vector<std::string>{all[0].path});
  EXPECT_TRUE(fs::exists(all[0].path));
  ASSERT_EQ((*log)->Sealed(0, second).size(), 1u);
  EXPECT_EQ((*log)->Sealed(0, second)[0].seq, second);
  EXPECT_TRUE((*log)->DetachThrough(first).empty());  // taken once only
}

// The puts of the WriteBatch representations `reps`, as "key=value" strings.
std::vector<std::string> Puts(const std::vector<std::string>& reps) {
  struct Collect : rocksdb::WriteBatch::Handler {
    std::vector<std::string>* out;
    void Put(const rocksdb::Slice& k, const rocksdb::Slice& v) override {
      out->push_back(k.ToString() + "=" + v.ToString());
    }
  };
  std::vector<std::string> out;
  for (const std::string& rep : reps) {
    rocksdb::WriteBatch batch(rep);
    Collect c;
    c.out = &out;
    EXPECT_TRUE(batch.Iterate(&c).ok());
  }
  return out;
}

// An SST of `n` puts "k<i>" = 1 KiB values, written where `path` says.
std::vector<std::string> WriteSst(const std::string& path, int n) {
  rocksdb::SstFileWriter writer{rocksdb::EnvOptions(), rocksdb::Options()};
  EXPECT_TRUE(writer.Open(path).ok());
  std::vector<std::string> puts;
  for (int i = 0; i < n; ++i) {
    char key[16];
    std::snprintf(key, sizeof key, "k%08d", i);
    const std::string value(1024, static_cast<char>('a' + i % 26));
    EXPECT_TRUE(writer.Put(key, value).ok());
    puts.push_back(std::string(key) + "=" + value);
  }
  EXPECT_TRUE(writer.Finish().ok());
  return puts;
}

// A flush RocksDB ingested as an SST is logged by moving the file in as a segment of its own,
// between the records appended before and after it; readers get its puts as WriteBatches.
TEST(ChangeLogTest, AnAdoptedSstIsASegmentBetweenTheAppendsAroundIt) {
  testing::TempDir tmp;
  auto log = ChangeLog::Open(tmp.File("changes"));
  ASSERT_TRUE(log.ok()) << log.status();
  rocksdb::WriteBatch before, after;
  ASSERT_TRUE(before.Put("a", "1").ok());
  ASSERT_TRUE(after.Put("k00000001", "newer").ok());
  (*log)->Append(before.Data());
  // 10,000 puts of 1 KiB: several of the ~4 MiB batches a reader is given.
  const std::vector<std::string> puts = WriteSst(tmp.File("flush.sst"), 10000);
  const std::string bytes = testing::ReadFile(tmp.File("flush.sst"));
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  ASSERT_TRUE((*log)->AdoptSst(tmp.File("flush.sst"), bytes.size(), crc));
  EXPECT_FALSE(fs::exists(tmp.File("flush.sst"))) << "moved, not copied";
  (*log)->Append(after.Data());
  const uint64_t cut = (*log)->Cut();

  auto sealed = (*log)->Sealed(0, cut);
  ASSERT_EQ(sealed.size(), 3u);
  EXPECT_FALSE(sealed[0].sst);
  EXPECT_TRUE(sealed[1].sst);
  EXPECT_FALSE(sealed[2].sst);
  EXPECT_LT(sealed[0].seq, sealed[1].seq);
  EXPECT_LT(sealed[1].seq, sealed[2].seq);
  EXPECT_TRUE(sealed[1].complete);
  EXPECT_EQ(sealed[1].size_bytes, bytes.size());
  EXPECT_EQ(sealed[1].crc32c, crc);
  EXPECT_EQ(testing::ReadFile(sealed[1].path), bytes);
  EXPECT_EQ(Puts(Records(sealed[0].path)), (std::vector<std::string>{"a=1"}));
  const std::vector<std::string> reps = Records(sealed[1].path);
  EXPECT_GE(reps.size(), 2u);
  for (const std::string& rep : reps) EXPECT_LE(rep.size(), (5u << 20));
  EXPECT_EQ(Puts(reps), puts);
  EXPECT_EQ(Puts(Records(sealed[2].path)), (std::vector<std::string>{"k00000001=newer"}));

  // Nothing to move: refused, and the log goes on as before.
  EXPECT_FALSE((*log)->AdoptSst(tmp.File("absent.sst"), 10, 0));
  (*log)->Append(before.Data());
  const uint64_t next = (*log)->Cut();
  ASSERT_EQ((*log)->Sealed(cut, next).size(), 1u);
  EXPECT_FALSE((*log)->Sealed(cut, next)[0].sst);

  // A damaged SST segment is data loss, not a short replay.
  std::string damaged = bytes;
  damaged[damaged.size() / 3] ^= 0x5A;
  { std::ofstream(tmp.File("damaged.sst"), std::ios::binary) << damaged; }
  Status s;
  Records(tmp.File("damaged.sst"), &s);
  EXPECT_TRUE(s.IsDataLoss()) << s;
  (*log)->DropThrough(next);
  EXPECT_FALSE(fs::exists(sealed[1].path));
}

// Records around the 4 KiB block and the 1 MiB buffer, in one segment: the sealed file holds
// exactly the records (no padding left behind by direct writes), with its size and CRC.
TEST(ChangeLogTest, RecordsRoundTripAtEverySizeAroundBlocksAndTheBuffer) {
  testing::TempDir tmp;
  auto log = ChangeLog::Open(tmp.File("changes"));
  ASSERT_TRUE(log.ok()) << log.status();
  std::vector<std::string> want;
  char c = 'a';
  for (size_t size : {size_t{0}, size_t{1}, size_t{4087}, size_t{4088}, size_t{4089},
                      (size_t{1} << 20) - 8, size_t{1} << 20, size_t{7}, (size_t{3} << 20) + 5}) {
    want.push_back(std::string(size, c++));
    (*log)->Append(want.back());
  }
  const uint64_t seq = (*log)->Cut();
  auto sealed = (*log)->Sealed(0, seq);
  ASSERT_EQ(sealed.size(), 1u);
  const ChangeSegment& s = sealed[0];
  EXPECT_TRUE(s.complete);
  EXPECT_EQ(fs::file_size(s.path), s.size_bytes);
  const std::string bytes = testing::ReadFile(s.path);
  EXPECT_EQ(Crc32c(bytes.data(), bytes.size()), s.crc32c);
  EXPECT_EQ(Records(s.path), want);
}

// Where the file system takes O_DIRECT, a segment's bytes never enter the page cache, neither
// when written nor when its upload reads it (StreamFile with read_direct); a buffered read
// would put them there (which also shows that the check sees cached pages).
TEST(ChangeLogTest, SegmentsBypassThePageCacheWhereDirectIoWorks) {
  testing::TempDir tmp;
  // Elsewhere (tmpfs, overlay) the segment is written and read buffered: the sums still hold.
  const bool direct_fs = testing::CopiesGoDirect(tmp.path());
  if (!direct_fs) std::cout << "[ note ] " << tmp.path() << " takes no O_DIRECT: sums only\n";
  auto log = ChangeLog::Open(tmp.File("changes"));
  ASSERT_TRUE(log.ok()) << log.status();
  for (int i = 0; i < 300; ++i) (*log)->Append(std::string(10000 + i, static_cast<char>(i)));
  const uint64_t seq = (*log)->Cut();
  const ChangeSegment s = (*log)->Sealed(0, seq).at(0);
  if (direct_fs) {
    EXPECT_EQ(testing::PageCachePages(s.path), 0);
  }
  StatusOr<FileSum> direct = StreamFile(s.path, -1, "", /*read_direct=*/true);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(direct->size_bytes, s.size_bytes);
  EXPECT_EQ(direct->crc32c, s.crc32c);
  if (direct_fs) {
    EXPECT_EQ(testing::PageCachePages(s.path), 0);
  }
  StatusOr<FileSum> buffered = StreamFile(s.path);
  ASSERT_TRUE(buffered.ok()) << buffered.status();
  EXPECT_EQ(buffered->crc32c, s.crc32c);
  if (direct_fs) {
    EXPECT_GT(testing::PageCachePages(s.path), 0);
  }
}

TEST(ChangeLogTest, ASegmentEndsAtItsSizeAndTheCutSealsTheRest) {
  testing::TempDir tmp;
  auto log = ChangeLog::Open(tmp.File("changes"), /*segment_bytes=*/100);
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 5; ++i) (*log)->Append(std::string(60, static_cast<char>('a' + i)));
  // 68 bytes a record: segments of two records each, the fifth still open.
  auto sealed = (*log)->Sealed(0, UINT64_MAX);
  ASSERT_EQ(sealed.size(), 2u);
  const uint64_t cut = (*log)->Cut();
  sealed = (*log)->Sealed(0, cut);
  ASSERT_EQ(sealed.size(), 3u);
  std::string all;
  for (const ChangeSegment& s : sealed)
    for (const std::string& r : Records(s.path)) all += r.substr(0, 1);
  EXPECT_EQ(all, "abcde") << "in order across segments";
  EXPECT_TRUE((*log)->Sealed(cut, UINT64_MAX).empty());
}

TEST(ChangeLogTest, ANewProcessStartsWithoutTheOldSegments) {
  testing::TempDir tmp;
  std::string old_path;
  {
    auto log = ChangeLog::Open(tmp.File("changes"));
    ASSERT_TRUE(log.ok());
    (*log)->Append("x");
    (*log)->Cut();
    old_path = (*log)->Sealed(0, 100).at(0).path;
  }
  ASSERT_TRUE(fs::exists(old_path));
  auto log = ChangeLog::Open(tmp.File("changes"));
  ASSERT_TRUE(log.ok());
  EXPECT_FALSE(fs::exists(old_path));
  EXPECT_TRUE((*log)->Sealed(0, 100).empty());
}

TEST(ChangeLogTest, TornOrDamagedRecordsAreDataLoss) {
  testing::TempDir tmp;
  auto log = ChangeLog::Open(tmp.File("changes"));
  ASSERT_TRUE(log.ok());
  (*log)->Append("first record");
  (*log)->Append("second record");
  (*log)->Cut();
  const std::string path = (*log)->Sealed(0, 100).at(0).path;
  const std::string bytes = testing::ReadFile(path);

  testing::WriteFile(tmp.File("torn"), bytes.substr(0, bytes.size() - 3));
  Status s;
  EXPECT_EQ(Records(tmp.File("torn"), &s).size(), 1u);
  EXPECT_TRUE(s.IsDataLoss()) << s;

  std::string flipped = bytes;
  flipped[10] ^= 0x40;  // inside the first payload
  testing::WriteFile(tmp.File("flipped"), flipped);
  EXPECT_TRUE(Records(tmp.File("flipped"), &s).empty());
  EXPECT_TRUE(s.IsDataLoss()) << s;

  std::string huge = bytes;
  huge[3] = static_cast<char>(0x7f);  // a size no batch has
  testing::WriteFile(tmp.File("huge"), huge);
  Records(tmp.File("huge"), &s);
  EXPECT_TRUE(s.IsDataLoss()) << s;

  EXPECT_TRUE(ForEachChangeRecord(tmp.File("absent"), [](std::string&&) {
                return Status::Ok();
              }).IsNotFound());
}

TEST(ChangeLogTest, AnUnwritableSegmentIsMarkedIncomplete) {
  testing::TempDir tmp;
  auto log = ChangeLog::Open(tmp.File("changes"));
  ASSERT_TRUE(log.ok());
  fs::remove_all(tmp.File("changes"));  // its directory is gone: the segment cannot be made
  (*log)->Append("lost");
  const uint64_t seq = (*log)->Cut();
  auto sealed = (*log)->Sealed(0, seq);
  ASSERT_EQ(sealed.size(), 1u);
  EXPECT_FALSE(sealed[0].complete);
}

}  // namespace
}  // namespace tandem::ps
