#include "server/ps/durable_copy.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>

#include <algorithm>
#include <cstdarg>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "common/crc32c.h"
#include "common/testing/full_disk.h"
#include "common/testing/test_util.h"
#include "server/ps/embedding_store.h"

namespace tandem::ps {
namespace {

namespace fs = std::filesystem;
using embedding::OptimizerKind;
using embedding::RowRef;
using embedding::TableSpec;
using Rows = std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>>;

constexpr uint64_t kSeed = 7;
constexpr uint64_t kRows = 3000;

TableSpec MakeTable(uint32_t id, uint32_t dim, OptimizerKind optimizer) {
  TableSpec spec;
  spec.table_id = id;
  spec.name = "C" + std::to_string(id + 1);
  spec.dim = dim;
  spec.optimizer = optimizer;
  return spec;
}

std::vector<TableSpec> Tables() {
  return {MakeTable(0, 4, OptimizerKind::kAdagrad), MakeTable(1, 8, OptimizerKind::kSgd)};
}

StoreOptions Options(const std::string& dir) {
  StoreOptions o;
  o.db_dir = dir;
  o.tables = Tables();
  o.seed = kSeed;
  o.cache_bytes = 1 << 20;
  return o;
}

std::unique_ptr<EmbeddingStore> OpenOrDie(const std::string& dir) {
  auto store = EmbeddingStore::Open(Options(dir));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Sets every embedding value of `ids` (both tables) to a function of (id, round).
void Write(EmbeddingStore* store, const std::vector<uint64_t>& ids, int round) {
  for (const TableSpec& t : Tables()) {
    Status s = store->Update(t.table_id, ids, [&](size_t i, RowRef row, bool) {
      for (uint32_t j = 0; j < t.dim; ++j)
        row.embedding()[j] = static_cast<float>(ids[i] * 10 + j) + 0.5f * static_cast<float>(round);
    });
    ASSERT_TRUE(s.ok()) << s;
  }
}

Rows Dump(EmbeddingStore* store) {
  Rows rows;
  const auto tables = Tables();
  Status s = store->ForEachRow([&](uint32_t table, uint64_t id, const uint8_t* row) {
    rows[{table, id}] = std::vector<uint8_t>(row, row + tables[table].row_bytes());
  });
  EXPECT_TRUE(s.ok()) << s;
  return rows;
}

std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> ids;
  for (uint64_t id = from; id < to; ++id) ids.push_back(id);
  return ids;
}

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

size_t CountSsts(const CheckpointPart& part) {
  size_t n = 0;
  for (const CheckpointFile& f : part.files) n += f.is_sst;
  return n;
}

const CheckpointFile* FindFile(const CheckpointPart& part, const std::string& path) {
  for (const CheckpointFile& f : part.files)
    if (f.path == path) return &f;
  return nullptr;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5A);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f.good()) << path;
}

// A store on a live DB rebuilt from `part` of the durable copy at `root`, materialized under
// `tmp` as "mat-<name>" (null, with a failure recorded, when that fails).
std::unique_ptr<EmbeddingStore> OpenMaterialized(const testing::TempDir& tmp,
                                                 const std::string& root,
                                                 const CheckpointPart& part,
                                                 const std::string& name) {
  const std::string out = tmp.File("mat-" + name), live = tmp.File("live-" + name);
  Status s = MaterializePart(root, part, out);
  EXPECT_TRUE(s.ok()) << s;
  s = RebuildLiveDb(out, live);
  EXPECT_TRUE(s.ok()) << s;
  return OpenOrDie(live);
}

class QuietLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

// Two restore points of one store: `first` after writing kRows rows, `second` after updating
// ten of them; rows_* are the store's contents at each.
class DurableCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenOrDie(tmp_.File("live"));
    ASSERT_NE(store_, nullptr);
    Write(store_.get(), Range(0, kRows), 1);
    ASSERT_TRUE(store_->CreateCheckpoint(first_).ok());
    rows_first_ = Dump(store_.get());
    Write(store_.get(), Range(100, 110), 2);
    ASSERT_TRUE(store_->FlushDirty().ok());
    ASSERT_TRUE(store_->CreateCheckpoint(second_).ok());
    rows_second_ = Dump(store_.get());
    ASSERT_NE(rows_first_, rows_second_);
  }

  CheckpointPart Copy(const std::string& restore_point, int64_t step,
                      const CheckpointPart* previous) {
    auto part = CopyToDurable(restore_point, root_, /*shard=*/3, step, previous);
    EXPECT_TRUE(part.ok()) << part.status();
    return part.ok() ? *part : CheckpointPart{};
  }

  // Opens a live DB rebuilt from the materialized part and returns its rows.
  Rows Restore(const CheckpointPart& part, const std::string& name) {
    auto store = OpenMaterialized(tmp_, root_, part, name);
    return store ? Dump(store.get()) : Rows{};
  }

  testing::TempDir tmp_;
  const std::string first_ = tmp_.File("restore-1"), second_ = tmp_.File("restore-2");
  const std::string root_ = tmp_.File("ckpt/shards/shard-3");
  std::unique_ptr<EmbeddingStore> store_;
  Rows rows_first_, rows_second_;
};

// RocksDB's CRC32C file checksum (read straight from RocksDB here) is the plain CRC32C of the
// file, which RocksFileCrc32c decodes; any other checksum is not taken for one.
TEST_F(DurableCopyTest, RocksSstChecksumIsCrc32cOfTheFile) {
  rocksdb::Options options;
  options.info_log = std::make_shared<QuietLogger>();
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(options, first_, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::vector<rocksdb::LiveFileMetaData> files;
  db->GetLiveFilesMetaData(&files);
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {
    EXPECT_EQ(f.file_checksum_func_name, "FileChecksumCrc32c");
    const std::optional<uint32_t> recorded =
        RocksFileCrc32c(f.file_checksum_func_name, f.file_checksum);
    ASSERT_TRUE(recorded.has_value()) << f.relative_filename;
    const std::string bytes = testing::ReadFile(first_ + "/" + f.relative_filename);
    EXPECT_EQ(Crc32c(bytes.data(), bytes.size()), *recorded) << f.relative_filename;
    EXPECT_FALSE(RocksFileCrc32c("FileChecksumCrc32", f.file_checksum).has_value());
    EXPECT_FALSE(RocksFileCrc32c(f.file_checksum_func_name, f.file_checksum.substr(1)).has_value());
  }
  EXPECT_EQ(RocksFileCrc32c("FileChecksumCrc32c", std::string_view("\x01\x02\x03\x04", 4)),
            0x01020304u);
}

TEST_F(DurableCopyTest, FirstCopyHoldsEveryFileWithItsChecksum) {
  const std::set<std::string> before = Names(first_);
  CheckpointPart part = Copy(first_, 1, nullptr);
  EXPECT_EQ(part.shard, 3u);
  EXPECT_EQ(part.step, 1);
  EXPECT_EQ(Names(first_), before) << "the restore point must be left unchanged";
  ASSERT_EQ(part.files.size(), before.size());
  EXPECT_EQ(part.files_copied, before.size());
  uint64_t total = 0;
  for (const CheckpointFile& f : part.files) {
    EXPECT_TRUE(before.count(f.db_name)) << f.db_name;
    EXPECT_EQ(f.is_sst, f.db_name.ends_with(".sst"));
    EXPECT_EQ(f.path.starts_with(f.is_sst ? "sst/" : "step-000000000001/"), true) << f.path;
    const std::string bytes = testing::ReadFile(root_ + "/" + f.path);
    EXPECT_EQ(bytes, testing::ReadFile(first_ + "/" + f.db_name)) << f.path;
    EXPECT_EQ(f.size_bytes, bytes.size());
    EXPECT_EQ(f.crc32c, Crc32c(bytes.data(), bytes.size())) << f.path;
    total += bytes.size();
  }
  EXPECT_EQ(part.bytes_copied, total);
  EXPECT_GE(CountSsts(part), 1u);
  EXPECT_TRUE(VerifyPart(root_, part, /*full=*/true).ok());
}

// A copy that meets a full disk (here the file-size limit, in whole blocks for the direct writes)
// fails as a full disk
// (kResourceExhausted: the PS answers OVERLOADED, and the part is asked for again) and leaves
// nothing behind: no .tmp, no file of the part. The same copy succeeds once there is space.
TEST_F(DurableCopyTest, ACopyOnAFullDiskLeavesNothingAndSucceedsOnceThereIsSpace) {
  {
    testing::FullDisk disk(4096);
    auto refused = CopyToDurable(first_, root_, /*shard=*/3, 1, nullptr);
    EXPECT_TRUE(refused.status().IsResourceExhausted()) << refused.status();
  }
  if (fs::exists(root_)) {
    for (const auto& e : fs::recursive_directory_iterator(root_))
      EXPECT_FALSE(e.is_regular_file()) << "left behind: " << e.path();
  }
  CheckpointPart part = Copy(first_, 1, nullptr);
  EXPECT_TRUE(VerifyPart(root_, part, /*full=*/true).ok());
  EXPECT_EQ(Restore(part, "after-full"), rows_first_);
}

TEST_F(DurableCopyTest, SecondCopyCopiesOnlyNewSsts) {
  CheckpointPart first = Copy(first_, 1, nullptr);
  CheckpointPart second = Copy(second_, 2, &first);
  size_t shared = 0, new_ssts = 0;
  for (const CheckpointFile& f : second.files) {
    if (!f.is_sst) continue;
    if (const CheckpointFile* old = FindFile(first, f.path)) {
      EXPECT_EQ(*old, f) << "a shared SST keeps its recorded checksum";
      ++shared;
    } else {
      ++new_ssts;
    }
  }
  EXPECT_GE(shared, 1u);
  EXPECT_GE(new_ssts, 1u);
  // Small files identical to the first part's (OPTIONS, CURRENT) are hard links to them.
  size_t changed = 0, linked = 0;
  for (const CheckpointFile& f : second.files) {
    if (f.is_sst) continue;
    const CheckpointFile* old = nullptr;
    for (const CheckpointFile& g : first.files)
      if (g.db_name == f.db_name) old = &g;
    if (old != nullptr && old->crc32c == f.crc32c && old->size_bytes == f.size_bytes) {
      EXPECT_TRUE(fs::equivalent(root_ + "/" + f.path, root_ + "/" + old->path)) << f.path;
      ++linked;
    } else {
      ++changed;
    }
  }
  EXPECT_GE(linked, 1u);
  EXPECT_EQ(second.files_copied, new_ssts + changed);
  EXPECT_LT(second.files_copied, first.files_copied + new_ssts);
  EXPECT_LT(second.bytes_copied, first.bytes_copied / 2);
  EXPECT_TRUE(VerifyPart(root_, second, /*full=*/true).ok());
}

// Without `previous`, an SST already in the pool is re-read and reused when it checks out.
TEST_F(DurableCopyTest, PoolFileIsReusedWithoutPreviousWhenItsCrcMatches) {
  CheckpointPart first = Copy(first_, 1, nullptr);
  CheckpointPart again = Copy(first_, 1, nullptr);
  EXPECT_EQ(again.files, first.files);
  EXPECT_EQ(again.files_copied, first.files.size() - CountSsts(first));
}

// A pool file that is damaged is copied again rather than reused: when it is re-read (no
// previous part vouches for it), and when its size is wrong (even with one).
TEST_F(DurableCopyTest, DamagedPoolFileIsCopiedAgain) {
  CheckpointPart first = Copy(first_, 1, nullptr);
  const CheckpointFile* sst = nullptr;
  for (const CheckpointFile& f : first.files)
    if (f.is_sst) sst = &f;
  ASSERT_NE(sst, nullptr);
  FlipByte(root_ + "/" + sst->path, sst->size_bytes / 2);
  CheckpointPart again = Copy(first_, 1, nullptr);
  EXPECT_EQ(again.files_copied, first.files_copied);
  EXPECT_TRUE(VerifyPart(root_, again, /*full=*/true).ok());
  fs::resize_file(root_ + "/" + sst->path, sst->size_bytes - 1);
  CheckpointPart third = Copy(first_, 1, &first);
  EXPECT_EQ(third.files_copied, 1u);  // the SST; the step's own small files are still right
  EXPECT_TRUE(VerifyPart(root_, third, /*full=*/true).ok());
}

// A restore point whose SST no longer matches RocksDB's recorded checksum is refused.
TEST_F(DurableCopyTest, CorruptRestorePointIsRefused) {
  // The restore point's SSTs are hard links into the live DB: corrupt a private copy.
  const std::string copy = tmp_.File("restore-copy");
  fs::copy(first_, copy);
  std::string sst;
  for (const std::string& name : Names(copy))
    if (name.ends_with(".sst")) sst = name;
  ASSERT_FALSE(sst.empty());
  FlipByte(copy + "/" + sst, 100);
  auto part = CopyToDurable(copy, root_, 3, 1, nullptr);
  ASSERT_FALSE(part.ok());
  EXPECT_TRUE(part.status().IsDataLoss()) << part.status();
  EXPECT_NE(part.status().message().find(sst), std::string::npos) << part.status();
}

TEST_F(DurableCopyTest, VerifyFullFindsCorruptedPoolSst) {
  CheckpointPart part = Copy(first_, 1, nullptr);
  const CheckpointFile* sst = nullptr;
  for (const CheckpointFile& f : part.files)
    if (f.is_sst) sst = &f;
  ASSERT_NE(sst, nullptr);
  FlipByte(root_ + "/" + sst->path, sst->size_bytes / 3);
  EXPECT_TRUE(VerifyPart(root_, part, /*full=*/false).ok()) << "same size: only full sees it";
  Status s = VerifyPart(root_, part, /*full=*/true);
  EXPECT_TRUE(s.IsDataLoss()) << s;
  EXPECT_NE(s.message().find(sst->path), std::string::npos) << s;
  // A part that shares the file with an already verified one skips its checksum.
  EXPECT_TRUE(VerifyPart(root_, part, /*full=*/true, &part).ok());
}

TEST_F(DurableCopyTest, VerifyFindsTruncatedOrMissingFileWithoutFull) {
  CheckpointPart part = Copy(first_, 1, nullptr);
  const CheckpointFile& manifest =
      *std::find_if(part.files.begin(), part.files.end(),
                    [](const CheckpointFile& f) { return f.db_name.starts_with("MANIFEST-"); });
  fs::resize_file(root_ + "/" + manifest.path, manifest.size_bytes - 1);
  Status s = VerifyPart(root_, part, /*full=*/false);
  EXPECT_TRUE(s.IsDataLoss()) << s;
  EXPECT_NE(s.message().find(manifest.path), std::string::npos) << s;
  fs::remove(root_ + "/" + manifest.path);
  s = VerifyPart(root_, part, /*full=*/false);
  EXPECT_TRUE(s.IsDataLoss()) << s;
  EXPECT_NE(s.message().find(manifest.path), std::string::npos) << s;
}

TEST_F(DurableCopyTest, MaterializedPartsRestoreTheirRows) {
  CheckpointPart first = Copy(first_, 1, nullptr);
  CheckpointPart second = Copy(second_, 2, &first);
  store_.reset();  // the live DB is gone; only the durable copy remains
  fs::remove_all(tmp_.File("live"));
  fs::remove_all(first_);
  fs::remove_all(second_);
  EXPECT_EQ(Restore(first, "1"), rows_first_);
  EXPECT_EQ(Restore(second, "2"), rows_second_);
  EXPECT_TRUE(VerifyPart(root_, first, /*full=*/true).ok()) << "restoring leaves the copy intact";
  EXPECT_TRUE(VerifyPart(root_, second, /*full=*/true).ok());
}

TEST_F(DurableCopyTest, MaterializeRefusesAnExistingDirAndAMissingFile) {
  CheckpointPart part = Copy(first_, 1, nullptr);
  fs::create_directories(tmp_.File("taken"));
  EXPECT_EQ(MaterializePart(root_, part, tmp_.File("taken")).code(), StatusCode::kAlreadyExists);
  fs::remove(root_ + "/" + part.files.back().path);
  Status s = MaterializePart(root_, part, tmp_.File("out"));
  EXPECT_TRUE(s.IsDataLoss()) << s;
  EXPECT_FALSE(fs::exists(tmp_.File("out"))) << "an incomplete directory is removed";
}

// What a crash between the phases of a copy leaves (files written but not renamed: .tmp in
// the pool and in the step directory) is named by no part, does not disturb the next copy of
// that step, and is removed by garbage collection.
TEST_F(DurableCopyTest, CopyInterruptedBeforeItsRenamesLeavesNothingVisible) {
  CheckpointPart first = Copy(first_, 1, nullptr);
  std::vector<std::string> leftovers;
  for (const CheckpointFile& f : first.files) {
    if (f.is_sst) continue;
    leftovers.push_back(root_ + "/" + StepDirName(2) + "/" + f.db_name + ".tmp");
  }
  fs::create_directories(root_ + "/" + StepDirName(2));
  leftovers.push_back(root_ + "/sst/000777-0badf00d.sst.tmp");
  for (const std::string& path : leftovers) testing::WriteFile(path, "torn");
  CheckpointPart second = Copy(second_, 2, &first);
  for (const CheckpointFile& f : second.files) EXPECT_FALSE(f.path.ends_with(".tmp")) << f.path;
  EXPECT_TRUE(VerifyPart(root_, second, /*full=*/true).ok());
  ASSERT_TRUE(CollectGarbage(root_, {first, second}).ok());
  for (const std::string& path : leftovers) EXPECT_FALSE(fs::exists(path)) << path;
  EXPECT_EQ(Restore(second, "after-crash"), rows_second_);
}

TEST_F(DurableCopyTest, CollectGarbageKeepsWhatRetainedPartsNeed) {
  CheckpointPart first = Copy(first_, 1, nullptr);
  CheckpointPart second = Copy(second_, 2, &first);
  testing::WriteFile(root_ + "/sst/000999-00000000.sst.tmp", "torn");
  testing::WriteFile(root_ + "/unrelated.txt", "not ours");
  ASSERT_TRUE(CollectGarbage(root_, {first, second}).ok());
  EXPECT_FALSE(fs::exists(root_ + "/sst/000999-00000000.sst.tmp"));
  EXPECT_TRUE(VerifyPart(root_, first, true).ok());
  EXPECT_TRUE(VerifyPart(root_, second, true).ok());

  ASSERT_TRUE(CollectGarbage(root_, {second}).ok());
  EXPECT_TRUE(VerifyPart(root_, second, true).ok());
  EXPECT_FALSE(fs::exists(root_ + "/" + StepDirName(1)));
  EXPECT_TRUE(fs::exists(root_ + "/unrelated.txt"));
  std::set<std::string> pool;
  for (const std::string& name : Names(root_ + "/sst")) pool.insert("sst/" + name);
  std::set<std::string> wanted;
  for (const CheckpointFile& f : second.files)
    if (f.is_sst) wanted.insert(f.path);
  EXPECT_EQ(pool, wanted);
  EXPECT_EQ(Restore(second, "after-gc"), rows_second_);
}

// A store with a change log: a full part at step 1, then updates, erasures and new rows, and a
// delta part at step 2 made of step 1's files and the log written since. The parameter: every
// flush of dirty rows ingested as an SST (which the log adopts as a segment), or none.
class DeltaPartTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    StoreOptions o = Options(tmp_.File("live"));
    o.change_log_dir = tmp_.File("changes");
    o.ingest_bytes = GetParam() ? 1 : UINT64_MAX;
    o.ingest_piece_bytes = 16 << 10;  // several SST segments
    auto store = EmbeddingStore::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(store).value();
    Write(store_.get(), Range(0, kRows), 1);
    uint64_t seq1 = 0, seq2 = 0;
    ASSERT_TRUE(store_->CreateCheckpoint(tmp_.File("rp-1"), &seq1).ok());
    auto base = CopyToDurable(tmp_.File("rp-1"), root_, 0, 1, nullptr);
    ASSERT_TRUE(base.ok()) << base.status();
    base_ = *base;
    Write(store_.get(), Range(100, 110), 2);
    const std::vector<uint64_t> erased = {5, 6, 7};
    ASSERT_TRUE(store_->Erase(0, erased).ok());
    Write(store_.get(), Range(kRows, kRows + 50), 3);
    ASSERT_TRUE(store_->SetAdmissionCount(1, 77, 4).ok());
    ASSERT_TRUE(store_->CreateCheckpoint(tmp_.File("rp-2"), &seq2).ok());
    ASSERT_GT(seq2, seq1);
    want_ = Dump(store_.get());
    ASSERT_TRUE(store_->Checksum(&want_sum_).ok());
    segments_ = store_->change_log()->Sealed(seq1, seq2);
    ASSERT_FALSE(segments_.empty());
    size_t ssts = 0;
    for (const ChangeSegment& seg : segments_) ssts += seg.sst;
    EXPECT_EQ(ssts > 0, GetParam()) << "the flush at step 2, ingested and adopted";
    auto delta = CopyDeltaToDurable(tmp_.File("rp-2"), base_, segments_, root_, 0, 2);
    ASSERT_TRUE(delta.ok()) << delta.status();
    delta_ = *delta;
  }

  // The rows and checksum of a store opened on the materialized part.
  std::pair<Rows, ModelChecksum> Restore(const CheckpointPart& part, const std::string& name) {
    auto store = OpenMaterialized(tmp_, root_, part, name);
    ModelChecksum sum;
    if (store == nullptr) return {};
    bool scanned = true;
    EXPECT_TRUE(store->Checksum(&sum, nullptr, nullptr, &scanned).ok());
    EXPECT_FALSE(scanned) << "the replayed log carries the stored sum";
    return {Dump(store.get()), sum};
  }

  testing::TempDir tmp_;
  const std::string root_ = tmp_.File("ckpt/shards/shard-0");
  std::unique_ptr<EmbeddingStore> store_;
  CheckpointPart base_, delta_;
  std::vector<ChangeSegment> segments_;
  Rows want_;
  ModelChecksum want_sum_;
};

TEST_P(DeltaPartTest, CopiesOnlyTheLogAndRestoresTheNewerRows) {
  EXPECT_EQ(delta_.base_step, 1);
  EXPECT_EQ(delta_.step, 2);
  uint64_t log_bytes = 0;
  for (const ChangeSegment& s : segments_) log_bytes += s.size_bytes;
  EXPECT_EQ(delta_.bytes_copied, log_bytes);
  EXPECT_EQ(delta_.files_copied, segments_.size());
  size_t logs = 0;
  for (const CheckpointFile& f : delta_.files) {
    logs += f.is_log;
    if (!f.is_log) {
      EXPECT_NE(FindFile(base_, f.path), nullptr) << f.path;
    }
  }
  EXPECT_EQ(logs, segments_.size());
  auto back = CheckpointPartFromJson(nlohmann::json::parse(CheckpointPartToJson(delta_).dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, delta_);

  // Only the durable copy remains.
  store_.reset();
  for (const char* dir : {"live", "rp-1", "rp-2", "changes"}) fs::remove_all(tmp_.File(dir));
  EXPECT_TRUE(VerifyPart(root_, delta_, /*full=*/true).ok());
  auto [rows, sum] = Restore(delta_, "delta");
  EXPECT_EQ(rows, want_);
  EXPECT_EQ(sum, want_sum_);
  EXPECT_EQ(rows.count({0, 5}), 0u) << "an erasure is replayed";
  EXPECT_TRUE(VerifyPart(root_, delta_, /*full=*/true).ok()) << "restoring leaves it intact";
}

TEST_P(DeltaPartTest, GarbageCollectionKeepsTheBaseFilesADeltaNeeds) {
  testing::WriteFile(root_ + "/log/0000000000000099-00000000.log.tmp", "torn");
  ASSERT_TRUE(CollectGarbage(root_, {delta_}).ok());
  EXPECT_FALSE(fs::exists(root_ + "/log/0000000000000099-00000000.log.tmp"));
  EXPECT_TRUE(fs::exists(root_ + "/" + StepDirName(1))) << "the base's step directory";
  EXPECT_TRUE(VerifyPart(root_, delta_, /*full=*/true).ok());
  EXPECT_EQ(Restore(delta_, "after-gc").first, want_);
  // Once no kept part is a delta, its segments go.
  ASSERT_TRUE(CollectGarbage(root_, {base_}).ok());
  EXPECT_TRUE(Names(root_ + "/log").empty());
}

TEST_P(DeltaPartTest, DamagedSegmentIsDataLossAndIncompleteOneIsRefused) {
  const CheckpointFile* log = nullptr;
  for (const CheckpointFile& f : delta_.files)
    if (f.is_log) log = &f;
  ASSERT_NE(log, nullptr);
  FlipByte(root_ + "/" + log->path, log->size_bytes / 2);
  EXPECT_TRUE(VerifyPart(root_, delta_, /*full=*/true).IsDataLoss());
  Status s = MaterializePart(root_, delta_, tmp_.File("mat-damaged"));
  EXPECT_TRUE(s.IsDataLoss()) << s;
  EXPECT_FALSE(fs::exists(tmp_.File("mat-damaged"))) << "nothing half-made is left";

  std::vector<ChangeSegment> incomplete = segments_;
  incomplete.back().complete = false;
  EXPECT_TRUE(CopyDeltaToDurable(tmp_.File("rp-2"), base_, incomplete, root_, 0, 3)
                  .status()
                  .IsInvalidArgument());
  EXPECT_TRUE(CopyDeltaToDurable(tmp_.File("rp-2"), delta_, segments_, root_, 0, 3)
                  .status()
                  .IsInvalidArgument())
      << "a delta of a delta";
}

INSTANTIATE_TEST_SUITE_P(Flush, DeltaPartTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Ingested" : "Memtable";
                         });

TEST(DurableCopyJsonTest, PartRoundTrips) {
  CheckpointPart part;
  part.shard = 2;
  part.step = 1234567;
  part.files = {{"sst/000012-0a0b0c0d.sst", "000012.sst", 1 << 20, 0x0a0b0c0du, true},
                {"step-000001234567/CURRENT", "CURRENT", 16, 0xfffffffeu, false}};
  part.bytes_copied = 99;
  part.files_copied = 1;
  const nlohmann::json j = CheckpointPartToJson(part);
  EXPECT_EQ(j["files"][0]["crc32c"], "0a0b0c0d");
  auto back = CheckpointPartFromJson(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, part);
}

TEST(DurableCopyJsonTest, MalformedPartsAreRefused) {
  CheckpointPart part;
  part.files = {{"sst/000012-0a0b0c0d.sst", "000012.sst", 10, 1, true}};
  const nlohmann::json good = CheckpointPartToJson(part);
  std::vector<nlohmann::json> bad(8, good);
  bad[0] = nlohmann::json::array();
  bad[1]["shard"] = -1;
  bad[2]["files"][0]["path"] = "../../etc/passwd";
  bad[3]["files"][0]["db_name"] = "../x";
  bad[4]["files"][0]["crc32c"] = "xyz";
  bad[5]["files"][0]["size"] = "10";
  bad[6]["files"][0]["sst"] = false;  // a pool path must be an SST
  bad[7].erase("step");
  // A change log segment only in a delta part, and only under log/.
  nlohmann::json segment = {{"path", "log/0000000000000001-00000001.log"},
                            {"db_name", "changes-1"},
                            {"size", 10},
                            {"crc32c", "00000001"},
                            {"sst", false},
                            {"log", true}};
  bad.push_back(good);
  bad.back()["files"].push_back(segment);  // no base_step
  bad.push_back(good);
  bad.back()["base_step"] = 0;
  bad.back()["step"] = 5;
  bad.back()["files"].push_back(segment);
  bad.back()["files"][1]["path"] = "step-000000000001/x.log";  // not under log/
  bad.push_back(good);
  bad.back()["step"] = 5;
  bad.back()["base_step"] = 5;  // not older than the part
  for (size_t i = 0; i < bad.size(); ++i) {
    auto r = CheckpointPartFromJson(bad[i]);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << i << " " << r.status();
  }
}

}  // namespace
}  // namespace tandem::ps
