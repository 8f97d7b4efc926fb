#include "server/ps/embedding_store.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/embedding/initializer.h"
#include "server/ps/row_cache.h"

namespace tandem::ps {
namespace {

using embedding::InitialRow;
using embedding::OptimizerKind;
using embedding::RowRef;
using embedding::TableSpec;
using Rows = std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>>;

constexpr uint64_t kSeed = 42;

TableSpec MakeTable(uint32_t id, uint32_t dim, OptimizerKind optimizer) {
  TableSpec spec;
  spec.table_id = id;
  spec.name = "C" + std::to_string(id + 1);
  spec.dim = dim;
  spec.optimizer = optimizer;
  return spec;
}

// A fresh directory, removed on destruction.
class ScopedDir {
 public:
  ScopedDir() {
    std::string pattern = ::testing::TempDir() + "/embedding_store_test.XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~ScopedDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

StoreOptions Options(const std::string& dir, std::vector<TableSpec> tables) {
  StoreOptions options;
  options.db_dir = dir;
  options.tables = std::move(tables);
  options.seed = kSeed;
  // Small, so that the tests' evictions go through many drains of the stage, not one flush.
  options.stage_bytes = 16 << 10;
  return options;
}

std::unique_ptr<EmbeddingStore> OpenOrDie(const StoreOptions& options) {
  auto store = EmbeddingStore::Open(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

Rows Dump(EmbeddingStore& store, const std::vector<TableSpec>& tables) {
  Rows rows;
  Status s = store.ForEachRow([&](uint32_t table, uint64_t id, const uint8_t* row) {
    EXPECT_TRUE(rows.emplace(std::pair(table, id),
                             std::vector<uint8_t>(row, row + tables[table].row_bytes()))
                    .second)
        << "row visited twice: " << table << "/" << id;
  });
  EXPECT_TRUE(s.ok()) << s;
  return rows;
}

// Row and counter keys in the RocksDB directory, read after the store is closed (the store's
// own record of its checksum, prefix 0xFFFFFFFE, is not counted).
size_t CountRocksDbKeys(const std::string& dir) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir, &raw);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return 0;
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  size_t n = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next())
    if (!it->key().starts_with(std::string_view("\xFF\xFF\xFF\xFE", 4))) ++n;
  return n;
}

// A deterministic, non-commutative change, so a lost or reordered update shows.
void Mutate(const TableSpec& spec, RowRef row, int64_t round) {
  row.meta()->last_updated_step = round;
  row.meta()->frequency += 1;
  for (uint32_t j = 0; j < spec.dim; ++j) {
    row.embedding()[j] = row.embedding()[j] * 0.5f + static_cast<float>(round % 97 + j);
  }
  for (uint32_t j = 0; j < spec.state_floats(); ++j) row.state(spec.dim)[j] += 1.0f;
}

// Whole rows for WriteRows: each id's initial row, mutated once by `round`.
std::vector<uint8_t> MutatedRows(const TableSpec& spec, const std::vector<uint64_t>& ids,
                                 int64_t round) {
  std::vector<uint8_t> rows(ids.size() * spec.row_bytes());
  for (size_t i = 0; i < ids.size(); ++i) {
    RowRef row{rows.data() + i * spec.row_bytes()};
    InitialRow(kSeed, spec, ids[i], row);
    Mutate(spec, row, round);
  }
  return rows;
}

// Applies Mutate to the store and to an in-test reference, checking each row as it goes.
class Churn {
 public:
  Churn(EmbeddingStore* store, const TableSpec& spec) : store_(store), spec_(spec) {}

  // `distinct`: through UpdateDistinct, as a shard applies a push (ids then must not repeat).
  void Update(const std::vector<uint64_t>& ids, int64_t round, bool distinct = false) {
    auto fn = [&](size_t i, RowRef row, bool existed) {
      auto [it, inserted] = ref_.try_emplace(ids[i]);
      EXPECT_EQ(existed, !inserted) << "id " << ids[i];
      if (inserted) {
        it->second.resize(spec_.row_bytes());
        InitialRow(kSeed, spec_, ids[i], RowRef{it->second.data()});
      }
      ASSERT_EQ(std::memcmp(row.bytes, it->second.data(), spec_.row_bytes()), 0) << ids[i];
      Mutate(spec_, row, round);
      Mutate(spec_, RowRef{it->second.data()}, round);
    };
    Status s = distinct ? store_->UpdateDistinct(spec_.table_id, ids, fn)
                        : store_->Update(spec_.table_id, ids, fn);
    ASSERT_TRUE(s.ok()) << s;
  }

  // Every id of `ids` reads back exactly (absent ids as their initial row).
  void ExpectRows(const std::vector<uint64_t>& ids) {
    std::vector<uint8_t> out(ids.size() * spec_.row_bytes());
    std::vector<bool> present;
    ASSERT_TRUE(store_->ReadRows(spec_.table_id, ids, out.data(), &present).ok());
    std::vector<uint8_t> expected(spec_.row_bytes());
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = ref_.find(ids[i]);
      ASSERT_EQ(present[i], it != ref_.end()) << ids[i];
      if (it == ref_.end()) InitialRow(kSeed, spec_, ids[i], RowRef{expected.data()});
      const uint8_t* want = it != ref_.end() ? it->second.data() : expected.data();
      ASSERT_EQ(std::memcmp(out.data() + i * spec_.row_bytes(), want, spec_.row_bytes()), 0)
          << "id " << ids[i];
    }
  }

  void set_store(EmbeddingStore* store) { store_ = store; }

 private:
  EmbeddingStore* store_;
  TableSpec spec_;
  std::unordered_map<uint64_t, std::vector<uint8_t>> ref_;
};

std::vector<uint64_t> SpreadIds(size_t n) {
  std::vector<uint64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = i * 1000003 + (i << 40);
  return ids;
}

TEST(EmbeddingStoreTest, ReadOfAbsentRowsReturnsInitialAndStoresNothing) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 16, OptimizerKind::kAdagrad);
  {
    auto store = OpenOrDie(Options(dir.File("db"), {spec}));
    ASSERT_NE(store, nullptr);
    const std::vector<uint64_t> ids = {1, 2, 3, 1ull << 40, ~0ull};
    std::vector<float> out(ids.size() * spec.dim);
    ASSERT_TRUE(store->Read(0, ids, out.data()).ok());
    std::vector<float> want(spec.dim);
    for (size_t i = 0; i < ids.size(); ++i) {
      embedding::InitialEmbedding(kSeed, spec, ids[i], want.data());
      EXPECT_EQ(std::memcmp(out.data() + i * spec.dim, want.data(), spec.dim * sizeof(float)), 0);
    }
    std::vector<uint8_t> rows(ids.size() * spec.row_bytes());
    std::vector<bool> present;
    ASSERT_TRUE(store->ReadRows(0, ids, rows.data(), &present).ok());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_FALSE(present[i]);
    EXPECT_EQ(store->stats().cached_rows, 0u);
    EXPECT_TRUE(Dump(*store, {spec}).empty());
  }
  EXPECT_EQ(CountRocksDbKeys(dir.File("db")), 0u);
}

TEST(EmbeddingStoreTest, UpdateMaterialisesAndPersists) {
  ScopedDir dir;
  const std::vector<TableSpec> tables = {MakeTable(0, 8, OptimizerKind::kSgd),
                                         MakeTable(1, 16, OptimizerKind::kAdam)};
  const std::vector<uint64_t> ids = {5, 9, 5};  // a repeated id is applied twice, in order
  Rows before_close;
  {
    auto store = OpenOrDie(Options(dir.File("db"), tables));
    ASSERT_NE(store, nullptr);
    std::vector<bool> existed;
    ASSERT_TRUE(store
                    ->Update(1, ids,
                             [&](size_t, RowRef row, bool e) {
                               existed.push_back(e);
                               Mutate(tables[1], row, 3);
                             })
                    .ok());
    EXPECT_EQ(existed, (std::vector<bool>{false, false, true}));
    std::vector<uint8_t> out(2 * tables[1].row_bytes());
    std::vector<uint8_t> want(tables[1].row_bytes());
    std::vector<bool> present;
    const std::vector<uint64_t> check = {9, 10};
    ASSERT_TRUE(store->ReadRows(1, check, out.data(), &present).ok());
    EXPECT_EQ(present, (std::vector<bool>{true, false}));
    InitialRow(kSeed, tables[1], 9, RowRef{want.data()});
    Mutate(tables[1], RowRef{want.data()}, 3);
    EXPECT_EQ(std::memcmp(out.data(), want.data(), want.size()), 0);
    before_close = Dump(*store, tables);
    EXPECT_EQ(before_close.size(), 2u);
    EXPECT_EQ(before_close.count({0, 5}), 0u);  // other tables untouched
  }
  auto store = OpenOrDie(Options(dir.File("db"), tables));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Dump(*store, tables), before_close);
  ASSERT_TRUE(
      store->Update(1, std::vector<uint64_t>{9}, [](size_t, RowRef, bool e) { EXPECT_TRUE(e); })
          .ok());
}

// Batches larger than the store's lock windows, with duplicates, hits and misses interleaved
// (the cache holds about a third of the rows): Update calls fn once per id in id order, and
// Read / ReadRows give every position its row, whatever order the store looks them up in.
TEST(EmbeddingStoreTest, LargeBatchesKeepOrderAndDuplicates) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 8, OptimizerKind::kAdagrad);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.stripes = 8;
  options.cache_bytes = 256 << 10;
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  std::unordered_map<uint64_t, std::vector<uint8_t>> ref;
  std::mt19937_64 rng(7);
  for (int round = 0; round < 4; ++round) {
    std::vector<uint64_t> ids(5000);
    for (uint64_t& id : ids) id = rng() % 6000;
    std::vector<size_t> calls;
    ASSERT_TRUE(store
                    ->Update(0, ids,
                             [&](size_t i, RowRef row, bool existed) {
                               calls.push_back(i);
                               auto [it, added] = ref.try_emplace(ids[i], spec.row_bytes());
                               EXPECT_EQ(existed, !added) << ids[i];
                               if (added)
                                 InitialRow(kSeed, spec, ids[i], RowRef{it->second.data()});
                               ASSERT_EQ(
                                   std::memcmp(row.bytes, it->second.data(), spec.row_bytes()), 0);
                               Mutate(spec, row, round * 10000 + static_cast<int64_t>(i));
                               std::memcpy(it->second.data(), row.bytes, spec.row_bytes());
                             })
                    .ok());
    ASSERT_EQ(calls.size(), ids.size());
    for (size_t i = 0; i < calls.size(); ++i) ASSERT_EQ(calls[i], i);

    for (uint64_t& id : ids) id = rng() % 7000;  // some never stored
    std::vector<float> emb(ids.size() * spec.dim);
    std::vector<uint8_t> rows(ids.size() * spec.row_bytes());
    std::vector<bool> present;
    ASSERT_TRUE(store->Read(0, ids, emb.data()).ok());
    ASSERT_TRUE(store->ReadRows(0, ids, rows.data(), &present).ok());
    std::vector<uint8_t> want(spec.row_bytes());
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = ref.find(ids[i]);
      ASSERT_EQ(present[i], it != ref.end()) << ids[i];
      if (it != ref.end()) {
        want = it->second;
      } else {
        InitialRow(kSeed, spec, ids[i], RowRef{want.data()});
      }
      ASSERT_EQ(std::memcmp(&rows[i * spec.row_bytes()], want.data(), spec.row_bytes()), 0);
      ASSERT_EQ(std::memcmp(&emb[i * spec.dim], RowRef{want.data()}.embedding(),
                            spec.dim * sizeof(float)),
                0);
    }
  }
  EXPECT_GT(store->stats().evictions, 0u);
}

TEST(EmbeddingStoreTest, TableTenTimesLargerThanCacheReadsBackExactlyAfterChurn) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 16, OptimizerKind::kAdagrad);  // 144-byte rows
  const std::vector<uint64_t> ids = SpreadIds(200000);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.cache_bytes = ids.size() * spec.row_bytes() / 10;
  options.stripes = 16;
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), spec);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> shuffled = ids;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  for (size_t b = 0; b < shuffled.size(); b += 1000) {
    churn.Update({shuffled.begin() + b, shuffled.begin() + b + 1000}, 1);
  }
  std::uniform_int_distribution<size_t> pick(0, ids.size() - 1);
  std::vector<uint64_t> batch(2000);
  for (int round = 2; round < 100; ++round) {
    for (uint64_t& id : batch) id = ids[pick(rng)];
    churn.Update(batch, round);
    if (round % 10 == 0) churn.ExpectRows(batch);
  }
  for (size_t b = 0; b < ids.size(); b += 5000) {
    churn.ExpectRows({ids.begin() + b, ids.begin() + b + 5000});
  }
  const StoreStats stats = store->stats();
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_GT(stats.writebacks, 0u);
  EXPECT_LE(stats.cache_bytes_used, options.cache_bytes);
  EXPECT_LT(stats.cached_rows, ids.size() / 5);
}

// A read that misses evicts dirty rows as it caches what it read: staged, their RocksDB copy
// does not change while the read holds their stripes, so the read's later misses keep their
// MultiGet values. When each eviction stamped its bucket at once (1024 a stripe, shared by many
// keys), every later miss in a stamped bucket was thrown away and read again alone.
TEST(EmbeddingStoreTest, AReadsOwnEvictionsDoNotMakeItReadItsMissesAgain) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 16, OptimizerKind::kAdagrad);  // 144-byte rows
  const std::vector<uint64_t> ids = SpreadIds(20000);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.cache_bytes = ids.size() * spec.row_bytes() / 10;
  options.stripes = 4;  // a read of <= 512 ids then runs in a single window (kWindow)
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), spec);
  for (size_t b = 0; b < ids.size(); b += 1000)
    churn.Update({ids.begin() + b, ids.begin() + b + 1000}, 1);
  // The cache full of dirty rows, then a read of 500 stored rows that are not cached.
  const std::vector<uint64_t> dirty(ids.begin(), ids.begin() + 1500);
  churn.Update(dirty, 2);
  const std::vector<uint64_t> missed(ids.begin() + 5000, ids.begin() + 5500);
  const StoreStats before = store->stats();
  std::vector<float> out(missed.size() * spec.dim);
  ASSERT_TRUE(store->Read(spec.table_id, missed, out.data()).ok());
  const StoreStats after = store->stats();
  EXPECT_GE(after.writebacks - before.writebacks, 300u) << "the read evicted few dirty rows";
  EXPECT_EQ(after.rereads - before.rereads, 0u);
  churn.ExpectRows(missed);
  churn.ExpectRows(dirty);
  // A read of 1,600 ids over 4 stripes runs in several windows, none of which cuts a stripe's
  // run: the rest of a run would meet the stamps of the rows its first part evicted.
  churn.Update(dirty, 3);
  const std::vector<uint64_t> more(ids.begin() + 10000, ids.begin() + 11600);
  const StoreStats before_more = store->stats();
  out.resize(more.size() * spec.dim);
  ASSERT_TRUE(store->Read(spec.table_id, more, out.data()).ok());
  EXPECT_EQ(store->stats().rereads - before_more.rereads, 0u);
  churn.ExpectRows(more);
  churn.ExpectRows(dirty);
}

TEST(EmbeddingStoreTest, EvictionWritesBackDirtyRowsAndReopenReadsEveryRow) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 32, OptimizerKind::kRowwiseAdagrad);
  const std::vector<uint64_t> ids = SpreadIds(20000);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.cache_bytes = ids.size() * spec.row_bytes() / 10;
  options.stripes = 8;
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), spec);
  for (int round = 1; round <= 3; ++round) {
    for (size_t b = 0; b < ids.size(); b += 500) {
      churn.Update({ids.begin() + b, ids.begin() + b + 500}, round);
    }
  }
  EXPECT_GT(store->stats().writebacks, ids.size());  // most rows were evicted dirty
  store.reset();
  EXPECT_EQ(CountRocksDbKeys(dir.File("db")), ids.size());
  options.cache_bytes = 1 << 20;
  store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  churn.set_store(store.get());
  churn.ExpectRows(ids);
  EXPECT_EQ(Dump(*store, {spec}).size(), ids.size());
}

// MissedStoredRows (the shard's prefetch of parked pulls waits for it): false while every row
// the store holds is cached, even after a restore point wrote them all to RocksDB and misses
// of new rows went there; true once a miss found its row there, after an eviction or in a
// store reopened over stored rows.
TEST(EmbeddingStoreTest, MissedStoredRowsTurnsTrueWhenAMissFindsARowStored) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 8, OptimizerKind::kAdagrad);
  const std::vector<uint64_t> ids = SpreadIds(2000);
  std::vector<float> out(ids.size() * spec.dim);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.cache_bytes = 1 << 20;
  options.stripes = 4;
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), spec);
  churn.Update({ids.begin(), ids.begin() + 100}, 1);
  ASSERT_TRUE(store->FlushDirty().ok());
  ASSERT_TRUE(store->Read(0, {ids.begin(), ids.begin() + 300}, out.data()).ok());
  EXPECT_EQ(store->stats().evictions, 0u);
  EXPECT_FALSE(store->MissedStoredRows());
  store.reset();
  store = OpenOrDie(options);  // the 100 rows are stored, none cached
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->MissedStoredRows());
  ASSERT_TRUE(store->Read(0, {ids.begin(), ids.begin() + 10}, out.data()).ok());
  EXPECT_TRUE(store->MissedStoredRows());
  store.reset();
  // A new store a quarter the table's size: evictions, then misses of the evicted rows.
  StoreOptions small = Options(dir.File("db2"), {spec});
  small.cache_bytes = ids.size() * spec.row_bytes() / 4;
  small.stripes = 4;
  store = OpenOrDie(small);
  ASSERT_NE(store, nullptr);
  Churn fresh(store.get(), spec);
  fresh.Update(ids, 1);
  EXPECT_GT(store->stats().evictions, 0u);
  EXPECT_FALSE(store->MissedStoredRows());  // every miss so far was a new row
  fresh.Update(ids, 2);
  EXPECT_TRUE(store->MissedStoredRows());
}

// A full cache keeps its dirty rows within max_dirty_bytes by writing them ahead of eviction,
// so a flush writes that much at most where it would write the whole cache, and nothing else
// changes: the same rows, in memory and on disk, and the same checksum. A cache that never
// fills is left alone.
TEST(EmbeddingStoreTest, AFullCacheKeepsItsDirtyRowsWithinTheirBoundAndTheSameRows) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 16, OptimizerKind::kAdagrad);  // 144-byte rows
  const std::vector<uint64_t> ids = SpreadIds(20000);
  const std::vector<uint64_t> hot(ids.begin(), ids.begin() + 300);
  const uint64_t table_bytes = ids.size() * spec.row_bytes();
  struct Result {
    Rows rows;
    std::string sum;
    StoreStats stats;
    uint64_t flushed = 0;
  };
  auto run = [&](const std::string& name, uint64_t cache_bytes, uint64_t max_dirty_bytes) {
    Result r;
    StoreOptions options = Options(dir.File(name), {spec});
    options.stripes = 8;
    options.cache_bytes = cache_bytes;
    options.max_dirty_bytes = max_dirty_bytes;
    {
      auto store = OpenOrDie(options);
      if (store == nullptr) return r;
      Churn churn(store.get(), spec);
      std::mt19937_64 rng(11);
      std::vector<uint64_t> shuffled = ids;
      for (int round = 1; round <= 3; ++round) {
        std::shuffle(shuffled.begin(), shuffled.end(), rng);
        for (size_t b = 0; b < shuffled.size(); b += 1000) {
          churn.Update({shuffled.begin() + b, shuffled.begin() + b + 1000}, round);
          churn.Update(hot, round);  // rows that change again after they were written ahead
        }
        if (round == 2) {
          EXPECT_TRUE(store->FlushDirty().ok());
        }
      }
      r.stats = store->stats();
      FlushTimes times;
      EXPECT_TRUE(store->FlushDirty(&times).ok());
      r.flushed = times.rows;
      churn.ExpectRows(ids);
      ModelChecksum kept, scanned;
      EXPECT_TRUE(store->Checksum(&kept).ok());
      EXPECT_TRUE(store->ScanChecksum(&scanned).ok());
      EXPECT_EQ(kept.Hex(), scanned.Hex());
      r.sum = kept.Hex();
    }
    auto store = OpenOrDie(options);
    if (store != nullptr) r.rows = Dump(*store, {spec});
    return r;
  };
  const uint64_t cache = table_bytes / 10, bound = cache / 4;
  const Result unbounded = run("unbounded", cache, 0);
  const Result bounded = run("bounded", cache, bound);
  const Result roomy = run("roomy", 2 * table_bytes, bound);

  EXPECT_EQ(unbounded.stats.written_ahead, 0u);
  EXPECT_GT(unbounded.stats.dirty_bytes, 2 * bound);  // without it, most of the cache is dirty
  EXPECT_GT(bounded.stats.written_ahead, 0u);
  EXPECT_LE(bounded.stats.dirty_bytes, bound);
  // The flush writes the dirty rows and the stage (whose bound Options sets).
  EXPECT_LE(bounded.flushed, (bound + (16 << 10)) / spec.row_bytes() + 8);
  EXPECT_GT(unbounded.flushed, 2 * bounded.flushed);
  EXPECT_EQ(roomy.stats.evictions, 0u);
  EXPECT_EQ(roomy.stats.written_ahead, 0u);
  EXPECT_GT(roomy.stats.dirty_bytes, bound);

  EXPECT_EQ(unbounded.rows.size(), ids.size());
  EXPECT_EQ(bounded.rows, unbounded.rows);
  EXPECT_EQ(roomy.rows, unbounded.rows);
  EXPECT_EQ(bounded.sum, unbounded.sum);
  EXPECT_EQ(roomy.sum, unbounded.sum);
}

// Rows written ahead by calls that all hit are drained too: the stage stays within its bound
// while a hot set that fits the cache is updated again and again (memory beyond cache_bytes).
TEST(EmbeddingStoreTest, RowsWrittenAheadByCallsThatAllHitAreDrained) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 16, OptimizerKind::kAdagrad);  // 144-byte rows
  const std::vector<uint64_t> ids = SpreadIds(20000);
  const std::vector<uint64_t> hot(ids.begin(), ids.begin() + 500);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.stripes = 8;
  options.cache_bytes = ids.size() * spec.row_bytes() / 10;
  options.max_dirty_bytes = options.cache_bytes / 16;  // a few dozen rows a stripe
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), spec);
  churn.Update(ids, 1);
  ASSERT_GT(store->stats().evictions, 0u);
  churn.Update(hot, 2);  // back into the cache
  const StoreStats before = store->stats();
  for (int round = 3; round < 40; ++round) {
    churn.Update(hot, round);
    const StoreStats now = store->stats();
    ASSERT_EQ(now.misses, before.misses) << "round " << round << ": the hot rows must all hit";
    EXPECT_LT(now.staged_rows * spec.row_bytes(), options.stage_bytes) << "round " << round;
  }
  EXPECT_GT(store->stats().written_ahead, before.written_ahead);
  churn.ExpectRows(ids);
}

// When the cache first fills, every stripe is dirty through and far over its share of
// max_dirty_bytes. A shard's step reads its ids (the pull, whose misses evict) and then updates
// them (the push, whose first pass hits every stripe): that first pass wrote ahead each stripe
// it unlocked with no drain between its windows, so the stage took the whole cache at once, and
// kept that memory for good (300 MiB beyond a 256 MiB cache in a PS, issue 21). The stage stays
// within its documented bound instead, frees what it held beyond twice its share at a drain,
// and the rows are the same.
TEST(EmbeddingStoreTest, TheStageStaysWithinItsBoundWhenTheCacheFirstFills) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 16, OptimizerKind::kAdagrad);  // 144-byte rows
  StoreOptions options = Options(dir.File("db"), {spec});
  options.stripes = 16;
  options.cache_bytes = 8 << 20;
  options.max_dirty_bytes = options.cache_bytes / 4;
  options.stage_bytes = 512 << 10;  // 32 KiB a stripe, as 8 MiB over 64 stripes is 128 KiB
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), spec);
  const size_t cache_rows = options.cache_bytes / spec.row_bytes();
  const std::vector<uint64_t> ids = SpreadIds(3 * cache_rows);
  constexpr size_t kStep = 4096;
  std::vector<float> out(kStep * spec.dim);
  uint64_t most_memory = 0;
  for (size_t b = 0; b < ids.size(); b += kStep) {
    const std::vector<uint64_t> step(ids.begin() + b,
                                     ids.begin() + std::min(ids.size(), b + kStep));
    ASSERT_TRUE(store->Read(0, step, out.data()).ok());
    churn.Update(step, 1, /*distinct=*/true);
    most_memory = std::max(most_memory, store->stats().staged_bytes);
  }
  const StoreStats stats = store->stats();
  ASSERT_GT(stats.evictions, cache_rows);  // the cache filled, and twice over
  ASSERT_GT(stats.written_ahead, 0u);
  // The bound StoreOptions::stage_bytes documents: the stage, one stripe's dirty rows (its share
  // of the cache at most), a window's evictions (512 rows) for the one thread here.
  const uint64_t bound =
      options.stage_bytes + options.cache_bytes / options.stripes + 512 * spec.row_bytes();
  EXPECT_LE(stats.staged_peak_bytes, bound) << "cache " << options.cache_bytes;
  // Its memory: the rows with their entries and index (under 2x the rows' bytes), a partly
  // filled 16 KiB block a stripe, and what the stripes keep between drains (their shares of
  // stage_bytes, with entries and index for as many rows: under 2 x stage_bytes).
  const uint64_t memory_bound = 2 * bound + options.stripes * (16 << 10) + 2 * options.stage_bytes;
  EXPECT_LE(most_memory, memory_bound) << "peak rows " << stats.staged_peak_bytes;
  ASSERT_TRUE(store->FlushDirty().ok());
  EXPECT_LE(store->stats().staged_bytes, 2 * options.stage_bytes);
  churn.ExpectRows(ids);
}

// After StopCachingReads (the end of a job) a read that misses is served exactly but leaves the
// cache as it was: no insert, no eviction. Writes still cache what they touch.
TEST(EmbeddingStoreTest, ReadsThatMissAfterStopCachingReadsLeaveTheCacheAlone) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 8, OptimizerKind::kAdagrad);
  const std::vector<uint64_t> ids = SpreadIds(4000);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.stripes = 4;
  options.cache_bytes = ids.size() * spec.row_bytes() / 8;
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), spec);
  churn.Update(ids, 1);
  ASSERT_TRUE(store->FlushDirty().ok());
  const StoreStats before = store->stats();
  ASSERT_GT(before.evictions, 0u);
  store->StopCachingReads();
  churn.ExpectRows(ids);  // most of them miss
  std::vector<uint64_t> absent = {7, 8, 9};
  churn.ExpectRows(absent);
  const StoreStats after = store->stats();
  EXPECT_GT(after.misses, before.misses + ids.size() / 2);
  EXPECT_EQ(after.evictions, before.evictions);
  EXPECT_EQ(after.cached_rows, before.cached_rows);
  churn.Update(absent, 2);  // cached as before
  const StoreStats written = store->stats();
  churn.ExpectRows(absent);
  EXPECT_EQ(store->stats().hits, written.hits + absent.size());
  EXPECT_EQ(store->stats().misses, written.misses);
  churn.ExpectRows(ids);
}

TEST(EmbeddingStoreTest, MemoryOnlyKeepsEveryRowAndFlushPersists) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 16, OptimizerKind::kFtrl);
  const std::vector<uint64_t> ids = SpreadIds(20000);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.memory_only = true;
  options.cache_bytes = 4096;  // ignored
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), spec);
  for (size_t b = 0; b < ids.size(); b += 1000) {
    churn.Update({ids.begin() + b, ids.begin() + b + 1000}, 1);
  }
  StoreStats stats = store->stats();
  EXPECT_EQ(stats.cached_rows, ids.size());
  EXPECT_EQ(stats.evictions, 0u);
  EXPECT_EQ(stats.writebacks, 0u);
  ASSERT_TRUE(store->FlushDirty().ok());
  churn.ExpectRows(ids);
  store.reset();
  EXPECT_EQ(CountRocksDbKeys(dir.File("db")), ids.size());
  store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  churn.set_store(store.get());
  churn.ExpectRows(ids);
  EXPECT_EQ(store->stats().cached_rows, ids.size());  // read misses were cached
}

TEST(EmbeddingStoreTest, CheckpointRebuildGivesIdenticalRowsAndStaysIndependent) {
  ScopedDir dir;
  const std::vector<TableSpec> tables = {MakeTable(0, 16, OptimizerKind::kAdagrad),
                                         MakeTable(1, 4, OptimizerKind::kSgd)};
  StoreOptions options = Options(dir.File("live"), tables);
  options.cache_bytes = 64 << 10;  // most rows on disk, some dirty in the cache
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn0(store.get(), tables[0]), churn1(store.get(), tables[1]);
  const std::vector<uint64_t> ids = SpreadIds(5000);
  churn0.Update(ids, 1);
  churn1.Update({ids.begin(), ids.begin() + 100}, 1);
  ASSERT_TRUE(store->SetAdmissionCount(1, 77, 3).ok());
  ASSERT_TRUE(store->CreateCheckpoint(dir.File("cp")).ok());
  const Rows snapshot = Dump(*store, tables);
  EXPECT_EQ(snapshot.size(), 5100u);

  ASSERT_TRUE(RebuildLiveDb(dir.File("cp"), dir.File("rebuilt")).ok());
  options.db_dir = dir.File("rebuilt");
  auto rebuilt = OpenOrDie(options);
  ASSERT_NE(rebuilt, nullptr);
  EXPECT_EQ(Dump(*rebuilt, tables), snapshot);
  EXPECT_EQ(rebuilt->AdmissionCount(1, 77).value(), 3u);

  // Later writes to either store change neither the other nor the checkpoint.
  churn0.Update(ids, 2);
  ASSERT_TRUE(store->FlushDirty().ok());
  EXPECT_EQ(Dump(*rebuilt, tables), snapshot);
  ASSERT_TRUE(rebuilt
                  ->Update(0, ids,
                           [&](size_t, RowRef row, bool existed) {
                             EXPECT_TRUE(existed);
                             Mutate(tables[0], row, 5);
                           })
                  .ok());
  rebuilt.reset();  // flushes, so new SST files appear beside the linked ones
  ASSERT_TRUE(RebuildLiveDb(dir.File("cp"), dir.File("again")).ok());
  options.db_dir = dir.File("again");
  auto again = OpenOrDie(options);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(Dump(*again, tables), snapshot);
  EXPECT_FALSE(RebuildLiveDb(dir.File("missing"), dir.File("x")).ok());
}

// A flush of dirty rows at least StoreOptions::ingest_bytes large goes to RocksDB as one SST
// instead of through the memtable: the same rows, counters and kept checksum either way,
// including rows that are both staged (evicted) and dirty in the cache again when flushed.
TEST(EmbeddingStoreTest, AFlushIngestedAsAnSstHoldsWhatTheMemtableWouldHold) {
  ScopedDir dir;
  const std::vector<TableSpec> tables = {MakeTable(0, 8, OptimizerKind::kAdagrad),
                                         MakeTable(1, 4, OptimizerKind::kSgd)};
  const std::vector<uint64_t> ids = SpreadIds(3000);
  const std::vector<uint64_t> again(ids.begin(), ids.begin() + 400);
  const std::vector<uint64_t> erased(ids.begin() + 1000, ids.begin() + 1050);
  std::vector<uint64_t> kept(ids.begin(), ids.begin() + 1000);
  kept.insert(kept.end(), ids.begin() + 1050, ids.end());
  struct Result {
    Rows rows;
    std::string sum;
    uint64_t counter = 0;
  };
  auto run = [&](bool ingest) {
    Result r;
    const std::string db = dir.File(ingest ? "ingested" : "memtable");
    StoreOptions options = Options(db, tables);
    options.stripes = 2;
    options.cache_bytes = 16 << 10;  // most rows evicted,
    options.stage_bytes = 1 << 20;   // and still staged when flushed
    options.ingest_bytes = ingest ? 1 : UINT64_MAX;
    options.ingest_piece_bytes = 2 << 10;  // many SSTs, cut between a row's two versions too
    auto ssts = [&] {
      size_t n = 0;
      for (const auto& e : std::filesystem::directory_iterator(db))
        n += e.path().extension() == ".sst";
      return n;
    };
    {
      auto store = OpenOrDie(options);
      if (store == nullptr) return r;
      Churn churn0(store.get(), tables[0]), churn1(store.get(), tables[1]);
      churn0.Update(ids, 1);
      churn1.Update(again, 1);
      churn0.Update(again, 2);  // back from the stage into the cache, dirty in both
      EXPECT_GT(store->stats().staged_rows, 0u);
      EXPECT_TRUE(store->SetAdmissionCount(1, 77, 3).ok());
      EXPECT_TRUE(store->Erase(0, erased).ok());
      EXPECT_TRUE(store->FlushDirty().ok());
      // Ingested: on disk at once; through the memtable: not before RocksDB flushes it.
      EXPECT_EQ(ssts() > 10, ingest);
      EXPECT_FALSE(std::filesystem::exists(db + "/tandem-flush.sst.tmp"));
      churn0.ExpectRows(kept);
      churn0.Update(again, 3);
      EXPECT_TRUE(store->FlushDirty().ok());
      churn0.ExpectRows(kept);
      churn1.ExpectRows(again);
      ModelChecksum kept, scanned;
      EXPECT_TRUE(store->Checksum(&kept).ok());
      EXPECT_TRUE(store->ScanChecksum(&scanned).ok());
      EXPECT_EQ(kept.Hex(), scanned.Hex());
      r.sum = kept.Hex();
    }
    auto store = OpenOrDie(options);  // what the files hold
    if (store == nullptr) return r;
    r.rows = Dump(*store, tables);
    auto counter = store->AdmissionCount(1, 77);
    EXPECT_TRUE(counter.ok()) << counter.status();
    r.counter = counter.ok() ? *counter : 0;
    return r;
  };
  const Result memtable = run(false), ingested = run(true);
  EXPECT_EQ(memtable.rows.size(), ids.size() - erased.size() + again.size());
  EXPECT_EQ(ingested.rows, memtable.rows);
  EXPECT_EQ(ingested.sum, memtable.sum);
  EXPECT_EQ(ingested.counter, 3u);
  EXPECT_EQ(memtable.counter, 3u);
}

// A flush whose write fails (here the SST it would ingest cannot be created) loses nothing: the
// rows it took from the cache, clean there since, are staged again, and its counters stay
// dirty, so reads that evict them still see them and the next flush writes them.
TEST(EmbeddingStoreTest, AFailedFlushKeepsTheRowsAndCountersItTook) {
  ScopedDir dir;
  const std::vector<TableSpec> tables = {MakeTable(0, 8, OptimizerKind::kAdagrad)};
  const std::vector<uint64_t> ids = SpreadIds(3000);
  StoreOptions options = Options(dir.File("db"), tables);
  options.stripes = 4;
  options.cache_bytes = 64 << 10;  // a few hundred rows dirty in the cache when flushed
  options.ingest_bytes = 1;        // every flush is an ingested SST
  Rows expected;
  {
    auto store = OpenOrDie(options);
    ASSERT_NE(store, nullptr);
    Churn churn(store.get(), tables[0]);
    churn.Update(ids, 1);
    churn.Update({ids.end() - 200, ids.end()}, 2);  // these last, so dirty in the cache
    ASSERT_TRUE(store->SetAdmissionCount(0, 77, 3).ok());
    const std::string blocker = options.db_dir + "/tandem-flush.sst.tmp";
    std::filesystem::create_directory(blocker);
    const Status failed = store->FlushDirty();
    EXPECT_FALSE(failed.ok());
    churn.ExpectRows(ids);  // evicts every row the flush took
    EXPECT_EQ(store->AdmissionCount(0, 77).value(), 3u);
    std::filesystem::remove(blocker);
    ASSERT_TRUE(store->FlushDirty().ok());
    churn.ExpectRows(ids);
    expected = Dump(*store, tables);
  }
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Dump(*store, tables), expected);
  EXPECT_EQ(expected.size(), ids.size());
  EXPECT_EQ(store->AdmissionCount(0, 77).value(), 3u);
}

// What the shard refuses pushes on (issue 21): a write RocksDB refused is reported by
// WriteError until one succeeds, the calls made meanwhile go on from the stage, and a retry
// comes at most once a second.
TEST(EmbeddingStoreTest, AWriteRocksDbRefusedIsReportedUntilOneSucceeds) {
  ScopedDir dir;
  const std::vector<TableSpec> tables = {MakeTable(0, 8, OptimizerKind::kAdagrad)};
  const std::vector<uint64_t> ids = SpreadIds(3000);
  StoreOptions options = Options(dir.File("db"), tables);
  options.cache_bytes = 64 << 10;
  options.ingest_bytes = 1;  // a flush is an ingested SST, which the blocker below stops
  options.stage_bytes = 4 << 10;
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), tables[0]);
  churn.Update(ids, 1);
  EXPECT_TRUE(store->WriteError(/*retry=*/false).ok());
  const std::string blocker = options.db_dir + "/tandem-flush.sst.tmp";
  std::filesystem::create_directory(blocker);
  const Status failed = store->FlushDirty();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(store->WriteError(/*retry=*/false).ToString(), failed.ToString());
  EXPECT_EQ(store->stats().failed_writes, 1u);
  // Within the second no write is tried again, whatever is asked.
  EXPECT_FALSE(store->WriteError(/*retry=*/true).ok());
  EXPECT_EQ(store->stats().failed_writes, 1u);
  // Updates and reads go on, every row where it belongs.
  churn.Update({ids.begin(), ids.begin() + 1000}, 2);
  churn.ExpectRows(ids);
  std::filesystem::remove(blocker);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  // The retry drains the stage through the memtable: RocksDB takes rows again.
  EXPECT_TRUE(store->WriteError(/*retry=*/true).ok());
  EXPECT_TRUE(store->WriteError(/*retry=*/false).ok());
  EXPECT_EQ(store->stats().failed_writes, 1u);
  EXPECT_EQ(store->stats().staged_rows, 0u);
  ASSERT_TRUE(store->FlushDirty().ok());
  churn.ExpectRows(ids);
}

TEST(EmbeddingStoreTest, EraseRemovesFromCacheAndRocksDb) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 8, OptimizerKind::kAdagrad);
  StoreOptions options = Options(dir.File("db"), {spec});
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), spec);
  const std::vector<uint64_t> ids = SpreadIds(100);
  churn.Update(ids, 1);
  ASSERT_TRUE(store->FlushDirty().ok());             // half on disk and cached clean,
  churn.Update({ids.begin(), ids.begin() + 50}, 2);  // half of those dirty again
  const std::vector<uint64_t> erased(ids.begin() + 25, ids.begin() + 75);
  ASSERT_TRUE(store->Erase(0, erased).ok());
  std::vector<uint8_t> out(erased.size() * spec.row_bytes());
  std::vector<bool> present;
  ASSERT_TRUE(store->ReadRows(0, erased, out.data(), &present).ok());
  for (size_t i = 0; i < erased.size(); ++i) EXPECT_FALSE(present[i]);
  EXPECT_EQ(Dump(*store, {spec}).size(), 50u);
  store.reset();
  EXPECT_EQ(CountRocksDbKeys(dir.File("db")), 50u);
}

// Evicted dirty rows wait in the stage: reads find them there, and an erasure or a bulk write of
// a staged row is not undone by the drain that writes the stage later.
TEST(EmbeddingStoreTest, StagedRowsAreReadErasedAndReplacedBeforeTheirDrain) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 8, OptimizerKind::kAdagrad);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.stripes = 1;
  options.cache_bytes = 8 << 10;   // a few dozen 80-byte rows
  options.stage_bytes = 64 << 10;  // several hundred
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  Churn churn(store.get(), spec);
  const std::vector<uint64_t> ids = SpreadIds(3000);
  const std::vector<uint64_t> a(ids.begin(), ids.begin() + 200);
  churn.Update(a, 1);
  StoreStats stats = store->stats();
  ASSERT_GT(stats.staged_rows, 50u) << "the first rows should wait in the stage";
  ASSERT_EQ(stats.drains, 0u);
  churn.ExpectRows(a);  // staged, cached or (none yet) in RocksDB: each row as updated
  churn.Update(a, 2);   // read back from the stage, changed, evicted again
  churn.ExpectRows(a);

  // The stage holds rows of `a` now; erase half and rewrite the other half in bulk.
  const std::vector<uint64_t> erased(a.begin(), a.begin() + 100);
  const std::vector<uint64_t> written(a.begin() + 100, a.end());
  ASSERT_GT(store->stats().staged_rows, 0u);
  ASSERT_TRUE(store->Erase(0, erased).ok());
  const std::vector<uint8_t> rows = MutatedRows(spec, written, 77);
  ASSERT_TRUE(store->WriteRows(0, written, rows.data()).ok());
  // Many more evictions: the stage drains (more than once) without a flush.
  for (size_t b = 200; b < ids.size(); b += 100)
    churn.Update({ids.begin() + b, ids.begin() + b + 100}, 3);
  stats = store->stats();
  EXPECT_GE(stats.drains, 2u);
  EXPECT_LE(stats.staged_rows * spec.row_bytes(), options.stage_bytes + 100 * spec.row_bytes());

  std::vector<uint8_t> out(a.size() * spec.row_bytes());
  std::vector<bool> present;
  ASSERT_TRUE(store->ReadRows(0, a, out.data(), &present).ok());
  for (size_t i = 0; i < erased.size(); ++i) EXPECT_FALSE(present[i]) << erased[i];
  for (size_t i = 0; i < written.size(); ++i) {
    ASSERT_TRUE(present[100 + i]) << written[i];
    EXPECT_EQ(0, std::memcmp(out.data() + (100 + i) * spec.row_bytes(),
                             rows.data() + i * spec.row_bytes(), spec.row_bytes()))
        << written[i];
  }
  churn.ExpectRows({ids.begin() + 200, ids.end()});
  // One call that evicts several stages' worth drains between its lock windows.
  const std::vector<uint64_t> more = SpreadIds(6000);
  const std::vector<uint64_t> fresh(more.begin() + 3000, more.end());
  const uint64_t drains_before = store->stats().drains;
  churn.Update(fresh, 4);
  EXPECT_GE(store->stats().drains, drains_before + 2);
  EXPECT_LE(store->stats().staged_rows * spec.row_bytes(),
            options.stage_bytes + 600 * spec.row_bytes());
  churn.ExpectRows(fresh);
  // Closing writes what is still staged; reopened, RocksDB holds every row once.
  store.reset();
  EXPECT_EQ(CountRocksDbKeys(dir.File("db")), ids.size() - erased.size() + fresh.size());
}

// A flush takes the dirty rows with every stripe held, then writes them with none held: reads
// are served meanwhile (the final eval of a large table waited seconds for the final restore
// point, issue 21), each row as it is, without filling the cache, so the rows being written
// stay where the flush took them; writes wait for the flush to end.
TEST(EmbeddingStoreTest, ReadsGoOnWhileAFlushWritesAndWritesWaitForIt) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 8, OptimizerKind::kAdagrad);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.stripes = 4;
  options.cache_bytes = 32 << 10;  // a few hundred rows cached,
  options.stage_bytes = 64 << 10;  // more staged, the rest in RocksDB
  const std::vector<uint64_t> ids = SpreadIds(4000);
  const std::vector<uint64_t> touched(ids.begin(), ids.begin() + 3000);  // the rest: absent
  Churn churn(nullptr, spec);
  EmbeddingStore* store = nullptr;
  bool armed = false, ran = false;
  std::future<void> writer;
  options.while_flushing_for_test = [&] {
    if (!std::exchange(armed, false)) return;
    ran = true;
    const StoreStats before = store->stats();
    EXPECT_GT(before.staged_rows, 0u);
    std::vector<uint8_t> rows(ids.size() * spec.row_bytes());
    std::vector<float> embeddings(ids.size() * spec.dim);
    auto reads = std::async(std::launch::async, [&] {
      churn.ExpectRows(ids);
      std::vector<bool> present;
      EXPECT_TRUE(store->ReadRows(0, ids, rows.data(), &present).ok());
      EXPECT_TRUE(store->Read(0, ids, embeddings.data()).ok());
    });
    ASSERT_EQ(reads.wait_for(std::chrono::seconds(60)), std::future_status::ready)
        << "reads waited for the flush";
    reads.get();
    for (size_t i = 0; i < ids.size(); ++i)
      ASSERT_EQ(0, std::memcmp(&embeddings[i * spec.dim],
                               rows.data() + i * spec.row_bytes() + sizeof(embedding::RowMeta),
                               spec.dim * sizeof(float)))
          << ids[i];
    const StoreStats after = store->stats();
    EXPECT_GT(after.misses, before.misses);            // rows read from RocksDB and the stage,
    EXPECT_EQ(after.cached_rows, before.cached_rows);  // none of them cached
    EXPECT_EQ(after.evictions, before.evictions);
    writer = std::async(std::launch::async, [&] { churn.Update(touched, 3); });
    EXPECT_EQ(writer.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
        << "an update ran while the flush was writing";
  };
  auto opened = OpenOrDie(options);
  ASSERT_NE(opened, nullptr);
  store = opened.get();
  churn.set_store(store);
  churn.Update(touched, 1);
  churn.Update({touched.begin(), touched.begin() + 150}, 2);
  ASSERT_GT(store->stats().drains, 0u);
  ASSERT_GT(store->stats().staged_rows, 0u);
  const StoreStats flushed = store->stats();
  FlushTimes times;
  armed = true;
  ASSERT_TRUE(store->FlushDirty(&times).ok());
  ASSERT_TRUE(ran);
  EXPECT_EQ(times.rows, flushed.cached_rows + flushed.staged_rows);  // every one dirty
  EXPECT_GT(times.flush_s, 0.3);  // the hook's 300 ms wait included
  EXPECT_LT(times.reads_held_s, times.flush_s);
  ASSERT_TRUE(writer.valid());
  writer.get();  // once the flush ended
  churn.ExpectRows(ids);
  ModelChecksum kept, scanned;
  ASSERT_TRUE(store->Checksum(&kept).ok());
  ASSERT_TRUE(store->ScanChecksum(&scanned).ok());
  EXPECT_EQ(kept.Hex(), scanned.Hex());
  opened.reset();  // closing flushes again (the hook, not armed, does nothing)
  opened = OpenOrDie(options);
  ASSERT_NE(opened, nullptr);
  churn.set_store(opened.get());
  churn.ExpectRows(ids);
}

// A push of new ids right after their pull skips RocksDB, unless something wrote them between.
TEST(EmbeddingStoreTest, UpdateAfterAReadOfAbsentRowsSkipsRocksDbUnlessTheyChanged) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 8, OptimizerKind::kAdagrad);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.stripes = 4;
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  const std::vector<uint64_t> ids = SpreadIds(60);
  std::vector<float> pulled(ids.size() * spec.dim);
  ASSERT_TRUE(store->Read(0, ids, pulled.data()).ok());
  // Between the pull and the push, a third of the ids are written by a bulk load.
  const std::vector<uint64_t> loaded(ids.begin(), ids.begin() + 20);
  const std::vector<uint8_t> rows = MutatedRows(spec, loaded, 5);
  ASSERT_TRUE(store->WriteRows(0, loaded, rows.data()).ok());
  std::vector<bool> existed(ids.size());
  ASSERT_TRUE(store->Update(0, ids, [&](size_t i, RowRef, bool e) { existed[i] = e; }).ok());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(existed[i], i < loaded.size()) << ids[i];
  // The 40 ids nothing wrote were known absent (a few may share a change bucket with a loaded
  // one and be read again, which is only slower).
  const StoreStats stats = store->stats();
  EXPECT_GE(stats.misses_known_absent, 30u);
  EXPECT_LE(stats.misses_known_absent, 40u);
}

// At k = 0 a step's new ids are read three times (a parked pull's prefetch, its answer, the
// push): only the first goes to RocksDB. A key written since (a bulk load, or an update that
// cached it, wrote it back and dropped it) is read from RocksDB again.
TEST(EmbeddingStoreTest, ReadsOfRowsARecentReadFoundAbsentSkipRocksDbUntilTheyAreStored) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 8, OptimizerKind::kAdagrad);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.stripes = 4;
  options.cache_bytes = 64 << 10;  // about 600 rows: the 2,000 updated below evict
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  const std::vector<uint64_t> ids = SpreadIds(60);
  std::vector<float> first(ids.size() * spec.dim), again(ids.size() * spec.dim);
  ASSERT_TRUE(store->Read(0, ids, first.data()).ok());
  EXPECT_EQ(store->stats().misses_known_absent, 0u);
  ASSERT_TRUE(store->Read(0, ids, again.data()).ok());
  // All of them but the few whose slot a later id of the 60 took (the filter is direct-mapped).
  EXPECT_GE(store->stats().misses_known_absent, ids.size() - 4);
  EXPECT_LE(store->stats().misses_known_absent, ids.size());
  EXPECT_EQ(first, again);  // absent rows read as their initial values
  // A third of the ids are bulk loaded, another third updated, then evicted by other rows.
  const std::vector<uint64_t> loaded(ids.begin(), ids.begin() + 20);
  const std::vector<uint8_t> rows = MutatedRows(spec, loaded, 5);
  ASSERT_TRUE(store->WriteRows(0, loaded, rows.data()).ok());
  const std::vector<uint64_t> updated(ids.begin() + 20, ids.begin() + 40);
  ASSERT_TRUE(
      store->Update(0, updated, [](size_t, RowRef r, bool) { r.embedding()[0] += 1; }).ok());
  std::vector<uint64_t> others(2000);
  for (size_t i = 0; i < others.size(); ++i) others[i] = (uint64_t{1} << 40) + i;
  ASSERT_TRUE(store->Update(0, others, [](size_t, RowRef r, bool) { r.embedding()[0] += 1; }).ok());
  ASSERT_GT(store->stats().evictions, 0u);
  const uint64_t known = store->stats().misses_known_absent;
  ASSERT_TRUE(store->Read(0, ids, again.data()).ok());
  // Only the 20 untouched ids can be known absent (fewer where a newer key took their slot).
  EXPECT_LE(store->stats().misses_known_absent - known, 20u);
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* row = again.data() + i * spec.dim;
    const float* initial = first.data() + i * spec.dim;
    if (i < 20) {
      EXPECT_NE(std::vector<float>(row, row + spec.dim),
                std::vector<float>(initial, initial + spec.dim))
          << "loaded id " << ids[i];
    } else if (i < 40) {
      EXPECT_EQ(row[0], initial[0] + 1) << "updated id " << ids[i];
    } else {
      EXPECT_EQ(std::vector<float>(row, row + spec.dim),
                std::vector<float>(initial, initial + spec.dim))
          << "untouched id " << ids[i];
    }
  }
}

// The PS's memory is ps.cache_bytes plus a constant whatever the table's size: RocksDB reads
// the SSTs' filters and indexes, like their rows, through mmap (file pages the kernel may
// reclaim), so its table readers hold a few KB for these 400,000 rows. Read into memory (pread,
// as without allow_mmap_reads) they took 0.6 MB here, 2 bytes a row.
TEST(EmbeddingStoreTest, RocksDbKeepsNoFiltersOrIndexesInItsOwnMemory) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 4, OptimizerKind::kSgd);  // 32-byte rows
  const std::vector<uint64_t> ids = SpreadIds(400000);
  StoreOptions options = Options(dir.File("db"), {spec});
  options.cache_bytes = 1 << 20;
  const std::vector<uint8_t> rows = MutatedRows(spec, ids, 3);
  {
    auto store = OpenOrDie(options);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->WriteRows(0, ids, rows.data()).ok());
  }
  auto store = OpenOrDie(options);  // reopened: the rows are in SSTs now
  ASSERT_NE(store, nullptr);
  std::vector<uint8_t> read(rows.size());
  std::vector<bool> present;
  ASSERT_TRUE(store->ReadRows(0, ids, read.data(), &present).ok());  // every filter and index
  EXPECT_EQ(std::count(present.begin(), present.end(), true), static_cast<ptrdiff_t>(ids.size()));
  EXPECT_TRUE(read == rows);
  EXPECT_GT(store->RocksIntProperty("rocksdb.total-sst-files-size"), ids.size() * 32);
  EXPECT_LT(store->RocksIntProperty("rocksdb.estimate-table-readers-mem"), 64u << 10);
}

// A bit flipped in one stored row's embedding, in its SST: a read of it fails with DataLoss (the
// block's checksum), never hands the row to training, and so does a checksum scan. Reads keep
// RocksDB's per-read verification of mmap'd blocks: skipping it gained nothing (`ps_bench
// read-checksums` at 33cf8a8, 0.95-1.04x).
TEST(EmbeddingStoreTest, AReadOfACorruptBlockFailsAndSoDoesAScan) {
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 8, OptimizerKind::kSgd);
  const std::vector<uint64_t> ids = SpreadIds(3000);
  StoreOptions options = Options(dir.File("db"), {spec});
  const std::vector<uint8_t> rows = MutatedRows(spec, ids, 5);
  {
    auto store = OpenOrDie(options);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->WriteRows(0, ids, rows.data()).ok());
  }  // closed: the rows are in an SST now, stored uncompressed
  const size_t victim = 1234, n = spec.row_bytes();
  const std::string row(reinterpret_cast<const char*>(rows.data() + victim * n), n);
  size_t flipped = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.File("db"))) {
    if (e.path().extension() != ".sst") continue;
    std::string bytes;
    {
      std::ifstream in(e.path(), std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const size_t at = bytes.find(row);
    if (at == std::string::npos) continue;
    bytes[at + n - 1] ^= 0x01;  // the lowest mantissa bit of the row's last embedding value
    std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << bytes;
    ++flipped;
  }
  ASSERT_EQ(flipped, 1u) << "the row's bytes should be in exactly one SST";
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  std::vector<uint8_t> read(n);
  std::vector<bool> present;
  const Status s = store->ReadRows(0, {&ids[victim], 1}, read.data(), &present);
  EXPECT_TRUE(s.IsDataLoss()) << s;
  ASSERT_TRUE(store->ReadRows(0, {&ids[0], 1}, read.data(), &present).ok());  // another block
  EXPECT_EQ(std::memcmp(read.data(), rows.data(), n), 0);
  ModelChecksum sum;
  EXPECT_TRUE(store->ScanChecksum(&sum).IsDataLoss());
}

TEST(EmbeddingStoreTest, AdmissionCountersRoundTripThroughFlushAndReopen) {
  ScopedDir dir;
  const std::vector<TableSpec> tables = {MakeTable(0, 8, OptimizerKind::kSgd),
                                         MakeTable(1, 8, OptimizerKind::kSgd)};
  StoreOptions options = Options(dir.File("db"), tables);
  {
    auto store = OpenOrDie(options);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->AdmissionCount(0, 5).value(), 0u);
    ASSERT_TRUE(store->SetAdmissionCount(0, 5, 2).ok());
    ASSERT_TRUE(store->SetAdmissionCount(1, 5, 7).ok());
    ASSERT_TRUE(store->SetAdmissionCount(1, ~0ull, 1).ok());
    ASSERT_TRUE(store->SetAdmissionCount(0, 6, 4).ok());
    ASSERT_TRUE(store->SetAdmissionCount(0, 6, 0).ok());  // erased before it was ever stored
    EXPECT_EQ(store->AdmissionCount(0, 5).value(), 2u);
    EXPECT_EQ(store->AdmissionCount(1, 5).value(), 7u);
    ASSERT_TRUE(store->FlushDirty().ok());
    EXPECT_EQ(store->AdmissionCount(1, 5).value(), 7u);  // reloaded from RocksDB
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> counts;
    ASSERT_TRUE(store
                    ->ForEachAdmissionCount([&](uint32_t t, uint64_t id, uint64_t c) {
                      counts[{t, id}] = c;
                    })
                    .ok());
    const std::map<std::pair<uint32_t, uint64_t>, uint64_t> want = {
        {{0, 5}, 2}, {{1, 5}, 7}, {{1, ~0ull}, 1}};
    EXPECT_EQ(counts, want);
    EXPECT_TRUE(Dump(*store, tables).empty());  // counters are not rows
  }
  {
    auto store = OpenOrDie(options);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->AdmissionCount(0, 5).value(), 2u);
    EXPECT_EQ(store->AdmissionCount(1, ~0ull).value(), 1u);
    EXPECT_EQ(store->AdmissionCount(0, 6).value(), 0u);
    ASSERT_TRUE(store->SetAdmissionCount(0, 5, 0).ok());
  }
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->AdmissionCount(0, 5).value(), 0u);
  EXPECT_FALSE(store->AdmissionCount(2, 5).ok());  // unknown table
}

// Each thread updates its own ids and ids shared by all, with a cache small enough that rows
// are evicted and re-read while other threads use them. Every update adds 1 to element 0 and to
// the frequency, so any interleaving must give exactly the serial result.
TEST(EmbeddingStoreTest, ConcurrentUpdatesAndReadsMatchSerialApplication) {
  constexpr int kThreads = 4, kRounds = 150, kBatch = 64;
  constexpr uint64_t kShared = 800, kOwn = 800;
  ScopedDir dir;
  const TableSpec spec = MakeTable(0, 8, OptimizerKind::kSgd);
  std::vector<std::vector<std::vector<uint64_t>>> batches(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937_64 rng(100 + t);
    for (int r = 0; r < kRounds; ++r) {
      std::vector<uint64_t> batch(kBatch);
      for (int i = 0; i < kBatch; ++i) {
        batch[i] = i % 2 ? rng() % kShared : kShared * (t + 1) + rng() % kOwn;
      }
      batches[t].push_back(batch);
    }
  }
  auto add_one = [](size_t, RowRef row, bool) {
    row.embedding()[0] += 1.0f;
    row.meta()->frequency += 1;
  };
  StoreOptions options = Options(dir.File("concurrent"), {spec});
  options.cache_bytes = 64 << 10;
  options.stripes = 4;
  auto store = OpenOrDie(options);
  ASSERT_NE(store, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> out(kBatch * spec.dim);
      for (int r = 0; r < kRounds; ++r) {
        EXPECT_TRUE(store->Update(0, batches[t][r], add_one).ok());
        EXPECT_TRUE(store->Read(0, batches[t][r], out.data()).ok());
        // Flushed rows may then be evicted clean while another call holds a stale read.
        if (t == 0 && r % 8 == 0) {
          EXPECT_TRUE(store->FlushDirty().ok());
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_GT(store->stats().evictions, 0u);

  options.db_dir = dir.File("serial");
  auto serial = OpenOrDie(options);
  ASSERT_NE(serial, nullptr);
  std::map<uint64_t, uint64_t> updates;
  for (int t = 0; t < kThreads; ++t) {
    for (const std::vector<uint64_t>& batch : batches[t]) {
      ASSERT_TRUE(serial->Update(0, batch, add_one).ok());
      for (uint64_t id : batch) ++updates[id];
    }
  }
  const Rows got = Dump(*store, {spec});
  EXPECT_EQ(got, Dump(*serial, {spec}));
  ASSERT_EQ(got.size(), updates.size());
  for (const auto& [id, n] : updates) {
    const auto& row = got.at({0, id});
    embedding::RowMeta meta;
    std::memcpy(&meta, row.data(), sizeof(meta));
    EXPECT_EQ(meta.frequency, n) << id;
  }
}

double BytesPerCachedRow(const TableSpec& spec, size_t rows, uint64_t cache_bytes) {
  ScopedDir dir;
  StoreOptions options = Options(dir.File("db"), {spec});
  options.cache_bytes = cache_bytes;
  auto store = OpenOrDie(options);
  if (store == nullptr) return 1e9;
  const std::vector<uint64_t> ids = SpreadIds(rows);
  for (size_t b = 0; b < ids.size(); b += 1000) {
    EXPECT_TRUE(
        store->Update(0, {ids.begin() + b, ids.begin() + b + 1000}, [](size_t, RowRef, bool) {})
            .ok());
  }
  const StoreStats stats = store->stats();
  EXPECT_LE(stats.cache_bytes_used, cache_bytes);
  EXPECT_GT(stats.cached_rows, rows / 4);
  const double per_row = static_cast<double>(stats.cache_bytes_used) / stats.cached_rows;
  std::cout << "dim " << spec.dim << " row_bytes " << spec.row_bytes() << ": " << per_row
            << " bytes per cached row (" << stats.cached_rows << " rows, " << stats.cache_bytes_used
            << " bytes)\n";
  return per_row;
}

TEST(EmbeddingStoreTest, MemoryPerCachedRowIsCloseToRowSize) {
  // A full 8 MiB cache (64 stripes, 128 KiB each) in front of about twice as many rows.
  const TableSpec adagrad = MakeTable(0, 64, OptimizerKind::kAdagrad);
  EXPECT_LE(BytesPerCachedRow(adagrad, 30000, 8 << 20), 1.25 * 512 + 16);
  const TableSpec sgd = MakeTable(0, 16, OptimizerKind::kSgd);  // 80-byte rows
  EXPECT_LE(BytesPerCachedRow(sgd, 200000, 8 << 20), 1.5 * 80);
}

// RowCache against a map standing in for RocksDB: each row holds its version in every byte.
class RowCacheHarness {
 public:
  RowCacheHarness(std::vector<uint32_t> row_bytes, uint64_t budget) : row_bytes_(row_bytes) {
    internal::RowCache::Options options;
    options.row_bytes = std::move(row_bytes);
    options.budget_bytes = budget;
    options.writeback = [this](uint32_t t, uint64_t id, const uint8_t* row, uint32_t n) {
      backing_[{t, id}].assign(row, row + n);
    };
    cache_ = std::make_unique<internal::RowCache>(std::move(options));
  }

  // Checks the row's current version, then writes the next one.
  void Touch(uint32_t t, uint64_t id) {
    const uint64_t hash = internal::KeyHash(t, id);
    uint8_t* row = cache_->Find(t, id, hash, /*mark_dirty=*/true);
    if (row == nullptr) {
      row = cache_->Insert(t, id, hash, /*dirty=*/true);
      ASSERT_NE(row, nullptr);
      auto it = backing_.find({t, id});
      if (it != backing_.end()) {
        std::memcpy(row, it->second.data(), row_bytes_[t]);
      } else {
        std::memset(row, 0, row_bytes_[t]);
      }
    }
    uint8_t& version = versions_[{t, id}];
    for (uint32_t b = 0; b < row_bytes_[t]; ++b) ASSERT_EQ(row[b], version) << t << "/" << id;
    std::memset(row, ++version, row_bytes_[t]);
  }

  size_t CachedOf(uint32_t t, uint64_t ids) {
    size_t n = 0;
    for (uint64_t id = 0; id < ids; ++id) {
      n += cache_->Find(t, id, internal::KeyHash(t, id), false) != nullptr;
    }
    return n;
  }

  internal::RowCache& cache() { return *cache_; }
  const std::map<std::pair<uint32_t, uint64_t>, uint8_t>& versions() const { return versions_; }

 private:
  std::vector<uint32_t> row_bytes_;
  std::unique_ptr<internal::RowCache> cache_;
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> backing_;
  std::map<std::pair<uint32_t, uint64_t>, uint8_t> versions_;
};

// Memory filled by one table's slab class is handed to another class when the workload moves
// (its chunks are compacted and released), and no row is lost on the way.
TEST(RowCacheTest, MemoryMovesBetweenSlabClassesAndRowsSurvive) {
  constexpr uint64_t kBudget = 256 << 10;
  RowCacheHarness h({48, 200}, kBudget);
  std::mt19937_64 rng(3);
  for (int phase = 0; phase < 3; ++phase) {
    const uint32_t t = phase % 2;
    for (int i = 0; i < 30000; ++i) h.Touch(t, rng() % 8000);
    EXPECT_LE(h.cache().bytes_used(), kBudget);
  }
  // Slots cost row + 11 bytes; with the index, rows fill well over 60% of the budget.
  EXPECT_GT(h.CachedOf(0, 8000), kBudget * 6 / 10 / (48 + 11));
  EXPECT_LT(h.CachedOf(1, 8000), 50u);
  for (int i = 0; i < 30000; ++i) h.Touch(1, rng() % 8000);
  EXPECT_GT(h.CachedOf(1, 8000), kBudget * 6 / 10 / (200 + 11));
  EXPECT_LT(h.CachedOf(0, 8000), 50u);
  EXPECT_GT(h.cache().evictions(), 0u);
  for (const auto& [key, version] : h.versions()) h.Touch(key.first, key.second);
}

// Erasing most rows of an unbounded cache gives chunks back; the rows that stay are moved
// into the remaining chunks intact.
TEST(RowCacheTest, EraseReleasesChunksAndKeepsTheRest) {
  RowCacheHarness h({100}, /*budget=*/0);
  for (uint64_t id = 0; id < 20000; ++id) h.Touch(0, id);
  const uint64_t full = h.cache().bytes_used();
  for (uint64_t id = 0; id < 20000; ++id) {
    if (id % 4 != 0) {
      EXPECT_TRUE(h.cache().Erase(0, id, internal::KeyHash(0, id)));
    }
  }
  EXPECT_FALSE(h.cache().Erase(0, 1, internal::KeyHash(0, 1)));
  EXPECT_EQ(h.cache().rows(), 5000u);
  EXPECT_LT(h.cache().bytes_used(), full / 2);
  for (uint64_t id = 0; id < 20000; id += 4) h.Touch(0, id);
  size_t dirty = 0;
  h.cache().TakeDirty([&](uint32_t, uint64_t, const uint8_t*, uint32_t) { ++dirty; });
  EXPECT_EQ(dirty, 5000u);
  h.cache().TakeDirty([&](uint32_t, uint64_t, const uint8_t*, uint32_t) { ++dirty; });
  EXPECT_EQ(dirty, 5000u);  // all clean now
}

// TakeDirty skips flag words without a dirty row; it still finds every dirty row exactly once,
// with its content, whether a chunk holds one slot (large rows) or many, and leaves them clean.
TEST(RowCacheTest, TakeDirtyFindsSparseDirtyRowsInSmallAndLargeChunks) {
  RowCacheHarness h({24, 9000}, /*budget=*/0);
  for (uint64_t id = 0; id < 3000; ++id) h.Touch(0, id);
  for (uint64_t id = 0; id < 40; ++id) h.Touch(1, id);
  h.cache().TakeDirty([](uint32_t, uint64_t, const uint8_t*, uint32_t) {});
  std::map<std::pair<uint32_t, uint64_t>, uint8_t> want;
  for (uint64_t id : {0ull, 7ull, 8ull, 1023ull, 2999ull}) want[{0, id}] = 0;
  for (uint64_t id : {0ull, 9ull, 39ull}) want[{1, id}] = 0;
  for (auto& [key, version] : want) {
    h.Touch(key.first, key.second);
    version = h.versions().at(key);
  }
  std::map<std::pair<uint32_t, uint64_t>, uint8_t> got;
  h.cache().TakeDirty([&](uint32_t t, uint64_t id, const uint8_t* row, uint32_t n) {
    EXPECT_EQ(n, t == 0 ? 24u : 9000u);
    EXPECT_TRUE(got.emplace(std::make_pair(t, id), row[n - 1]).second) << t << "/" << id;
  });
  EXPECT_EQ(got, want);
  size_t again = 0;
  h.cache().TakeDirty([&](uint32_t, uint64_t, const uint8_t*, uint32_t) { ++again; });
  EXPECT_EQ(again, 0u);
}

// UpdateDistinct from several threads at once, each on its own table, with reads of other
// tables in between and a cache that evicts across tables: every row ends as with Update called
// in series, and fn sees each id once.
TEST(EmbeddingStoreTest, ConcurrentUpdateDistinctOnDifferentTablesMatchesSerialUpdate) {
  constexpr uint32_t kTables = 6;
  std::vector<TableSpec> tables;
  for (uint32_t t = 0; t < kTables; ++t)
    tables.push_back(MakeTable(t, 4 + 4 * t, OptimizerKind::kAdagrad));
  auto ids_of = [](uint32_t table, int round) {
    std::vector<uint64_t> ids;
    for (uint64_t i = 0; i < 300 + 200 * table; ++i) ids.push_back((i * 7 + round * 13) % 2000);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(table * 100 + round));
    return ids;
  };
  constexpr int kRounds = 5;
  auto run = [&](bool concurrent) {
    ScopedDir dir;
    StoreOptions options = Options(dir.File("db"), tables);
    options.cache_bytes = 96 << 10;
    options.stripes = 16;
    auto store = OpenOrDie(options);
    for (int round = 0; round < kRounds; ++round) {
      auto update = [&](uint32_t t) {
        const std::vector<uint64_t> ids = ids_of(t, round);
        std::vector<int> seen(ids.size(), 0);
        auto fn = [&](size_t i, RowRef row, bool) {
          ++seen[i];
          Mutate(tables[t], row, round);
        };
        Status s = concurrent ? store->UpdateDistinct(t, ids, fn) : store->Update(t, ids, fn);
        EXPECT_TRUE(s.ok()) << s;
        EXPECT_EQ(seen, std::vector<int>(ids.size(), 1));
        std::vector<float> out(ids.size() * tables[(t + 1) % kTables].dim);
        EXPECT_TRUE(store->Read((t + 1) % kTables, ids, out.data()).ok());
      };
      std::vector<std::thread> threads;
      for (uint32_t t = 0; t < kTables; ++t) {
        if (concurrent) {
          threads.emplace_back(update, t);
        } else {
          update(t);
        }
      }
      for (std::thread& th : threads) th.join();
    }
    EXPECT_GT(store->stats().evictions, 0u);
    return Dump(*store, tables);
  };
  const Rows serial = run(false);
  EXPECT_EQ(run(true), serial);
}

}  // namespace
}  // namespace tandem::ps

namespace tandem::ps {
namespace {

// The sum the store keeps through every kind of change equals a scan of what it holds: with a
// cache 1/10 of the table (rows evicted, written back and re-read), after erasures, counters,
// bulk writes, a reopen, a read-only open and a checkpoint rebuilt into a new live DB.
TEST(EmbeddingStoreChecksumTest, KeptSumEqualsAScanThroughEveryChange) {
  ScopedDir dir;
  const std::vector<TableSpec> tables = {MakeTable(0, 16, OptimizerKind::kAdagrad),
                                         MakeTable(1, 8, OptimizerKind::kSgd)};
  const std::vector<uint64_t> ids = SpreadIds(20000);
  StoreOptions options = Options(dir.File("db"), tables);
  options.cache_bytes = ids.size() * tables[0].row_bytes() / 10;
  options.stripes = 8;
  auto expect_equal_to_scan = [](EmbeddingStore& store, const char* when) {
    ModelChecksum kept, scanned;
    uint64_t kept_rows = 0, scanned_rows = 0;
    bool did_scan = true;
    ASSERT_TRUE(store.Checksum(&kept, &kept_rows, nullptr, &did_scan).ok()) << when;
    EXPECT_FALSE(did_scan) << when;
    ASSERT_TRUE(store.ScanChecksum(&scanned, &scanned_rows).ok()) << when;
    EXPECT_EQ(kept.Hex(), scanned.Hex()) << when;
    EXPECT_EQ(kept_rows, scanned_rows) << when;
  };
  ModelChecksum final_sum;
  {
    auto store = OpenOrDie(options);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->checksum_known());  // a new store sums to zero
    expect_equal_to_scan(*store, "empty");
    Churn churn0(store.get(), tables[0]);
    std::mt19937_64 rng(11);
    std::uniform_int_distribution<size_t> pick(0, ids.size() - 1);
    std::vector<uint64_t> batch(1500);
    for (int round = 1; round <= 30; ++round) {
      for (uint64_t& id : batch) id = ids[pick(rng)];
      churn0.Update(batch, round);  // duplicates within a batch included
      std::vector<uint64_t> distinct = batch;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      ASSERT_TRUE(
          store
              ->UpdateDistinct(1, distinct,
                               [&](size_t, RowRef row, bool) { Mutate(tables[1], row, round); })
              .ok());
      if (round % 7 == 0) {
        ASSERT_TRUE(store->Erase(1, {distinct.begin(), distinct.begin() + 100}).ok());
        const std::vector<uint64_t> twice = {distinct[200], distinct[201], distinct[200]};
        ASSERT_TRUE(store->Erase(1, twice).ok());  // an id named twice leaves the sum once
        const std::vector<uint64_t> never_stored = {123456789};  // (table 0 is the Churn's)
        ASSERT_TRUE(store->Erase(0, never_stored).ok());
      }
      if (round % 5 == 0) {
        ASSERT_TRUE(store->SetAdmissionCount(0, 1000 + round, round).ok());
        ASSERT_TRUE(store->SetAdmissionCount(0, 1000 + round - 5, 0).ok());
        ASSERT_TRUE(store->SetAdmissionCount(1, 7, round).ok());  // overwrites
      }
      if (round % 10 == 0) {
        ASSERT_TRUE(store->FlushDirty().ok());
      }
      if (round == 13 || round == 24) {  // dirty rows cached, evicted ones staged or written
        ModelChecksum first, again;
        ASSERT_TRUE(store->Checksum(&first).ok());
        ASSERT_TRUE(store->Checksum(&again).ok());  // reading the sum changes nothing
        EXPECT_EQ(first.Hex(), again.Hex());
        expect_equal_to_scan(*store, "mid-churn");
      }
    }
    // Bulk writes over existing and new rows, one id twice (the last one wins).
    std::vector<uint64_t> bulk = {ids[0], ids[1], 99, 98, 99, ids[1]};
    std::vector<uint8_t> rows(bulk.size() * tables[1].row_bytes());
    for (size_t i = 0; i < bulk.size(); ++i) {
      RowRef row{rows.data() + i * tables[1].row_bytes()};
      InitialRow(kSeed, tables[1], bulk[i], row);
      Mutate(tables[1], row, 77 + static_cast<int64_t>(i));
    }
    ASSERT_TRUE(store->WriteRows(1, bulk, rows.data()).ok());
    EXPECT_GT(store->stats().evictions, 0u);
    expect_equal_to_scan(*store, "after the churn");
    ASSERT_TRUE(store->Checksum(&final_sum).ok());
    ASSERT_TRUE(store->CreateCheckpoint(dir.File("ckpt")).ok());
  }
  {
    auto store = OpenOrDie(options);  // the sum comes back with the rows, without a scan
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(store->checksum_known());
    ModelChecksum reopened;
    ASSERT_TRUE(store->Checksum(&reopened).ok());
    EXPECT_EQ(reopened.Hex(), final_sum.Hex());
    expect_equal_to_scan(*store, "reopened");
  }
  {
    StoreOptions ro = options;
    ro.read_only = true;
    auto store = OpenOrDie(ro);
    ASSERT_NE(store, nullptr);
    ModelChecksum read_only;
    ASSERT_TRUE(store->Checksum(&read_only).ok());
    EXPECT_EQ(read_only.Hex(), final_sum.Hex());
  }
  ASSERT_TRUE(RebuildLiveDb(dir.File("ckpt"), dir.File("rebuilt")).ok());
  StoreOptions rebuilt = options;
  rebuilt.db_dir = dir.File("rebuilt");
  {
    auto store = OpenOrDie(rebuilt);
    ASSERT_NE(store, nullptr);
    ModelChecksum from_ckpt;
    ASSERT_TRUE(store->Checksum(&from_ckpt).ok());
    EXPECT_EQ(from_ckpt.Hex(), final_sum.Hex());
  }
  // A directory written before the sum was kept (its record removed by hand): the first
  // Checksum scans, and the sum is kept from then on.
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), rebuilt.db_dir, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), rocksdb::Slice("\xFF\xFF\xFF\xFEsum", 7)).ok());
  }
  auto store = OpenOrDie(rebuilt);
  ASSERT_NE(store, nullptr);
  EXPECT_FALSE(store->checksum_known());
  ModelChecksum old_format;
  bool scanned = false;
  ASSERT_TRUE(store->Checksum(&old_format, nullptr, nullptr, &scanned).ok());
  EXPECT_TRUE(scanned);
  EXPECT_EQ(old_format.Hex(), final_sum.Hex());
  const std::vector<uint64_t> one = {ids[5]};
  ASSERT_TRUE(
      store->Update(0, one, [&](size_t, RowRef row, bool) { Mutate(tables[0], row, 200); }).ok());
  expect_equal_to_scan(*store, "old format, after an update");
}

}  // namespace
}  // namespace tandem::ps
