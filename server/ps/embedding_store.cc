#include "server/ps/embedding_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/file_checksum.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/embedding/initializer.h"
#include "common/embedding/row_copy.h"
#include "common/log.h"
#include "common/model_checksum.h"
#include "common/sync.h"
#include "server/ps/change_log.h"
#include "server/ps/durable_copy.h"
#include "server/ps/open_files.h"
#include "server/ps/rocks_info_log.h"
#include "server/ps/row_cache.h"

namespace tandem::ps {
namespace {

using embedding::RowMeta;
using embedding::RowRef;
using internal::CounterCache;
using internal::KeyHash;
using internal::RowCache;

constexpr uint32_t kCounterPrefix = 0xFFFFFFFFu;
// The store's own records sort between the rows (tables < 0x10000) and the counters.
constexpr uint32_t kMetaPrefix = 0xFFFFFFFEu;
constexpr char kSumKey[] = "\xFF\xFF\xFF\xFEsum";
constexpr uint32_t kSumVersion = 1;
constexpr size_t kRowKeyBytes = 12;
constexpr size_t kCounterKeyBytes = 16;
// FlushDirty writes in WriteBatches of about this size, bounding their memory.
constexpr size_t kFlushBatchBytes = 4 << 20;
constexpr int kBloomBitsPerKey = 10;
constexpr size_t kWriteBufferBytes = 16 << 20;
constexpr int kL0CompactionTrigger = 8;  // RocksDB's default is 4
constexpr size_t kBlockCacheBytes = 32 << 20;
// A flush that FlushStripes writes as one SST and ingests (see StoreOptions::ingest_bytes); a
// file RocksDB does not parse, so a crash that leaves it behind leaves only this name.
constexpr char kIngestFile[] = "tandem-flush.sst.tmp";

void PutBig32(char* p, uint32_t v) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xFF);
}
void PutBig64(char* p, uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xFF);
}
uint64_t GetBig(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

// RocksDB key of a row: big-endian table then id, so one table's rows are contiguous.
struct RowKey {
  char bytes[kRowKeyBytes];
  RowKey(uint32_t table, uint64_t id) {
    PutBig32(bytes, table);
    PutBig64(bytes + 4, id);
  }
  rocksdb::Slice slice() const { return {bytes, sizeof(bytes)}; }
};

// RocksDB key of an admission counter: 0xFFFFFFFF, table, id (sorts after every row).
struct CounterKey {
  char bytes[kCounterKeyBytes];
  CounterKey(uint32_t table, uint64_t id) {
    PutBig32(bytes, kCounterPrefix);
    PutBig32(bytes + 4, table);
    PutBig64(bytes + 8, id);
  }
  rocksdb::Slice slice() const { return {bytes, sizeof(bytes)}; }
};

// Counter values are u64 little-endian (RocksDB's own fixed64 convention).
std::string EncodeCount(uint64_t count) {
  std::string value(8, '\0');
  for (int i = 0; i < 8; ++i) value[i] = static_cast<char>(count >> (8 * i) & 0xFF);
  return value;
}
uint64_t DecodeCount(const rocksdb::Slice& value) {
  uint64_t count = 0;
  for (int i = 7; i >= 0; --i) count = count << 8 | static_cast<uint8_t>(value[i]);
  return count;
}

// The model_checksum part of a store as kept in RocksDB: u32 version, u64 high, u64 low, u64 rows,
// u64 counters, little-endian.
struct StoredSum {
  ModelChecksum sum;
  uint64_t rows = 0;
  uint64_t counters = 0;
};

std::string EncodeSum(const StoredSum& v) {
  std::string out;
  auto put = [&out](uint64_t x, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(x >> (8 * i) & 0xFF));
  };
  put(kSumVersion, 4);
  put(v.sum.high(), 8);
  put(v.sum.low(), 8);
  put(v.rows, 8);
  put(v.counters, 8);
  return out;
}

bool DecodeSum(const rocksdb::Slice& value, StoredSum* v) {
  if (value.size() != 36) return false;
  auto get = [&value](size_t at, int bytes) {
    uint64_t x = 0;
    for (int i = bytes - 1; i >= 0; --i) x = x << 8 | static_cast<uint8_t>(value[at + i]);
    return x;
  };
  if (get(0, 4) != kSumVersion) return false;
  v->sum = ModelChecksum::FromParts(get(4, 8), get(12, 8));
  v->rows = get(20, 8);
  v->counters = get(28, 8);
  return true;
}

// A row's record in model_checksum (DESIGN §12), added or taken out.
void RowRecord(ModelChecksum* sum, const embedding::TableSpec& spec, uint32_t table, uint64_t id,
               const uint8_t* bytes, bool subtract) {
  const RowRef row{const_cast<uint8_t*>(bytes)};
  const std::span<const float> emb{row.embedding(), spec.dim};
  const std::span<const float> state{row.state(spec.dim), spec.state_floats()};
  if (subtract) {
    sum->SubtractRow(table, id, emb, state, row.meta()->last_updated_step, row.meta()->frequency);
  } else {
    sum->AddRow(table, id, emb, state, row.meta()->last_updated_step, row.meta()->frequency);
  }
}

// What a call changed in the store's sum; merged into it once the call is done.
struct SumDelta {
  ModelChecksum plus, minus;
  int64_t rows = 0;
  int64_t counters = 0;
};

// The one place where rocksdb::Status becomes a tandem Status (STYLE §2).
Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::Ok();
  const std::string msg = std::string(what) + ": " + s.ToString();
  if (s.IsNotFound()) return Status::NotFound(msg);
  if (s.IsCorruption()) return Status::DataLoss(msg);
  if (s.IsNoSpace()) return Status::ResourceExhausted(msg);
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut() || s.IsIncomplete()) {
    return Status::Unavailable(msg);
  }
  if (s.IsInvalidArgument() || s.IsNotSupported()) return Status::InvalidArgument(msg);
  return Status::Internal(msg);
}

rocksdb::Options RocksOptions() {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.IncreaseParallelism(2);
  // A table RocksDB does not hold open is opened again on its next read: footer, index and
  // filter read and verified, a mapping made, and torn down at eviction. Its table cache is an
  // LRU cut into 2^table_cache_numshardbits parts by file number, each with its own share of
  // max_open_files: with the default 64 parts of ~4 tables, a 10^8-row shard's ~130 SSTs kept
  // evicting each other (opens 8.5 % of its CPU in the final eval, closes 4 %). One part holds
  // exactly max_open_files; the few threads reading a shard share its lock cheaply.
  options.max_open_files = MaxOpenTables();
  options.table_cache_numshardbits = 0;
  // Checkpoints later verify SST files against these checksums.
  options.file_checksum_gen_factory = rocksdb::GetFileChecksumGenCrc32cFactory();
  // Rows are mostly float mantissas: compression saves little space and costs CPU in every
  // miss, writeback flush and compaction of a table larger than the cache (issue 21).
  options.compression = rocksdb::kNoCompression;
  options.bottommost_compression = rocksdb::kNoCompression;
  // Levels sized from the bottom up keep space amplification near 1.1 whatever the table's size
  // (the live DB and every durable copy of it stay close to the rows' own bytes).
  options.level_compaction_dynamic_level_bytes = true;
  // With a table larger than the cache the memtable takes every evicted dirty row and is
  // searched by every miss: it was a third of a shard's CPU (a 64 MiB skiplist, random keys).
  // A whole-key bloom filter lets the misses it does not hold (nearly all of them) skip the
  // search, and a smaller memtable makes each insert and search shallower.
  options.write_buffer_size = kWriteBufferBytes;
  // With random ids every L0 file overlaps the whole base level, so each L0 compaction rewrites
  // all of it: twice the files a compaction (8 memtables' worth, about 100 MiB) halves those
  // rewrites, for a bloom probe more per miss in each extra L0 file. With the table 100x the
  // cache, `shard_cold_bench --only 0.01` on one core (where every CPU second counts, as in a
  // job on 2 cores): 1.21x and 1.43x rows/s at 800 steps, 1.22x at 1000 (issue 21). RocksDB
  // slows writes at 20 L0 files: 12 files of headroom for compactions that fall behind.
  options.level0_file_num_compaction_trigger = kL0CompactionTrigger;
  // Misses read blocks straight from the mapped SSTs instead of a pread each (+13-31 % samples/s
  // with a table 40x the cache). The mapped pages are page cache (RssFile), which the kernel
  // reclaims under pressure; the bound on the PS's own memory is on anonymous memory. The SSTs'
  // filters and indexes are read the same way (RocksDB keeps no copy of them), so its memory
  // does not grow with the table: read with pread they would take 2 bytes a stored row.
  options.allow_mmap_reads = true;
  options.memtable_prefix_bloom_size_ratio = 0.1;
  options.memtable_whole_key_filtering = true;
  // Rows reach the memtable in key order (a writeback batch is sorted): each insert then starts
  // from where the table's previous one ended instead of from the skiplist's head. The prefix
  // is the table (RowKey) or the counter prefix (CounterKey), one remembered position each.
  options.memtable_insert_with_hint_prefix_extractor.reset(
      rocksdb::NewFixedPrefixTransform(sizeof(uint32_t)));
  rocksdb::BlockBasedTableOptions table;
  // Most misses of a growing table are for absent rows; the filter answers them in memory.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(kBloomBitsPerKey));
  // Explicit, so that the PS's memory beyond ps.cache_bytes is a documented constant.
  table.block_cache = rocksdb::NewLRUCache(kBlockCacheBytes);
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

Status ValidateOptions(const StoreOptions& options) {
  if (options.db_dir.empty()) return Status::InvalidArgument("store: empty db_dir");
  if (options.stripes < 1) return Status::InvalidArgument("store: stripes must be >= 1");
  if (!options.memory_only && options.cache_bytes == 0) {
    return Status::InvalidArgument("store: cache_bytes must be > 0 unless memory_only");
  }
  if (options.tables.size() > 0x10000) return Status::InvalidArgument("store: too many tables");
  std::vector<uint32_t> sizes;
  for (size_t t = 0; t < options.tables.size(); ++t) {
    if (options.tables[t].table_id != t) {
      return Status::InvalidArgument("store: tables must be indexed by table_id");
    }
    sizes.push_back(options.tables[t].row_bytes());
  }
  std::sort(sizes.begin(), sizes.end());
  if (std::unique(sizes.begin(), sizes.end()) - sizes.begin() > RowCache::kMaxClasses) {
    return Status::InvalidArgument("store: too many distinct row sizes");
  }
  return Status::Ok();
}

// One lock stripe: its cached rows and counters.
struct Stripe {
  // `staged_total` counts the bytes every stripe has staged (EmbeddingStore::Impl's).
  // `tables` outlives the stripe (the store's options).
  Stripe(std::vector<uint32_t> row_bytes, uint64_t budget_bytes,
         std::atomic<uint64_t>* staged_total, const std::vector<embedding::TableSpec>* tables)
      : cache(RowCache::Options{
            std::move(row_bytes), budget_bytes,
            [this, staged_total, tables](uint32_t table, uint64_t id, const uint8_t* row,
                                         uint32_t n)
                NO_THREAD_SAFETY_ANALYSIS {  // called by `cache`, under mu
                  RowRecord(&cleaned, (*tables)[table], table, id, row, false);
                  staged_total->fetch_add(staged.Put(table, id, KeyHash(table, id), row, n),
                                          std::memory_order_relaxed);
                }}) {}

  Mutex mu;
  RowCache cache GUARDED_BY(mu);
  // Dirty rows `cache` evicted, until DrainStaged writes them: for anyone holding `mu`, a row
  // is in the cache, staged, or in RocksDB, looked for in that order.
  internal::StagedRows staged GUARDED_BY(mu);
  internal::AbsentKeys absent GUARDED_BY(mu);
  CounterCache counters GUARDED_BY(mu);
  // The records of the rows that stopped being dirty (evicted or flushed) since the store last
  // folded them into its sum (see EmbeddingStore::Impl::sum).
  ModelChecksum cleaned GUARDED_BY(mu);
  // Erasures, written before `mu` is released (a row erased is then in none of the three).
  rocksdb::WriteBatch writebacks GUARDED_BY(mu);
  uint64_t hits GUARDED_BY(mu) = 0;
  uint64_t misses GUARDED_BY(mu) = 0;
  uint64_t known_absent GUARDED_BY(mu) = 0;  // misses served without RocksDB by `absent`
  uint64_t rereads GUARDED_BY(mu) = 0;       // StoredValue's reads under the lock
};

// The ids of one call (one table) that its first pass could not serve from the cache, in call
// order, and their RocksDB values, read by one MultiGet without any lock.
struct Pending {
  std::vector<uint32_t> index;     // position in the call's ids
  std::vector<uint64_t> hash;      // KeyHash of the id
  std::vector<uint32_t> seen_seq;  // the stripe's change_seq() at the first pass
  // Position in values/statuses (key order after Fetch), or kNotFetched (a hit then, or a
  // staged row), or kKnownAbsent (AbsentKeys).
  std::vector<int32_t> fetched;
  static constexpr int32_t kNotFetched = -1;
  static constexpr int32_t kKnownAbsent = -2;
  bool grouped = false;           // the call's ids (so these too) are grouped by stripe
  std::vector<RowKey> keys;       // in call order
  std::vector<uint64_t> key_ids;  // the id of keys[j]
  std::vector<rocksdb::Slice> key_slices;
  std::vector<rocksdb::PinnableSlice> values;
  std::vector<rocksdb::Status> statuses;
  rocksdb::PinnableSlice reread;  // a point read under the stripe lock

  // `how`: 0 to fetch, else kNotFetched or kKnownAbsent.
  void Add(size_t i, uint64_t h, uint32_t seq, int32_t how, uint32_t table, uint64_t id) {
    const bool fetch = how == 0;
    index.push_back(static_cast<uint32_t>(i));
    hash.push_back(h);
    seen_seq.push_back(seq);
    fetched.push_back(fetch ? static_cast<int32_t>(keys.size()) : how);
    if (fetch) {
      keys.emplace_back(table, id);
      key_ids.push_back(id);
    }
  }
};

// What Read, ReadRows and Update do with each row; called under the row's stripe lock.
struct ReadOp {
  static constexpr bool kWrites = false;
  static constexpr bool kOrdered = false;
  uint64_t seed;
  const embedding::TableSpec& spec;
  float* out;
  uint32_t PrefetchBytes() const { return sizeof(RowMeta) + spec.dim * sizeof(float); }
  void Cached(size_t i, const uint8_t* row, bool /*existed*/, bool /*was_dirty*/) {
    embedding::CopyRowFloats(out + i * spec.dim, row + sizeof(RowMeta), spec.dim);
  }
  void Absent(size_t i, uint64_t id) {
    embedding::InitialEmbedding(seed, spec, id, out + i * spec.dim);
  }
};

struct ReadRowsOp {
  static constexpr bool kWrites = false;
  static constexpr bool kOrdered = false;
  uint64_t seed;
  const embedding::TableSpec& spec;
  uint8_t* out;
  std::vector<bool>* present;
  uint32_t PrefetchBytes() const { return spec.row_bytes(); }
  void Cached(size_t i, const uint8_t* row, bool /*existed*/, bool /*was_dirty*/) {
    std::memcpy(out + i * spec.row_bytes(), row, spec.row_bytes());
    (*present)[i] = true;
  }
  void Absent(size_t i, uint64_t id) {
    embedding::InitialRow(seed, spec, id, RowRef{out + i * spec.row_bytes()});
    (*present)[i] = false;
  }
};

// fn runs under the row's stripe lock, so it must not call back into the store. `Ordered`: fn
// is called in id order (Update), else in any order (UpdateDistinct).
// A row's record leaves the store's sum when the row turns dirty and enters it again when the
// row stops being dirty (see Impl::sum), so a row updated many times between two flushes is
// hashed twice, not twice per update (issue 21).
template <bool Ordered>
struct UpdateOp {
  static constexpr bool kWrites = true;
  static constexpr bool kOrdered = Ordered;
  const EmbeddingStore::RowFn& fn;
  const embedding::TableSpec& spec;
  uint32_t table;
  std::span<const uint64_t> ids;
  SumDelta* delta;
  uint32_t PrefetchBytes() const { return spec.row_bytes(); }
  void Cached(size_t i, uint8_t* row, bool existed, bool was_dirty) {
    if (!existed) {
      ++delta->rows;
    } else if (!was_dirty) {
      RowRecord(&delta->minus, spec, table, ids[i], row, false);
    }
    fn(i, RowRef{row}, existed);
  }
  void Absent(size_t, uint64_t) {}  // never called: Update materialises absent rows
};

// Batched calls lock the stripes of up to this many ids at a time (see LockWindow; grouped
// calls finish the run of the stripe they are in).
constexpr size_t kWindow = 512;
// Calls whose ids are grouped by stripe also end a window after this many stripes, so that
// concurrent calls (the tables of one apply, on several threads) rarely wait for each other.
constexpr size_t kWindowStripes = 4;
// Calls that may reorder (reads, UpdateDistinct) group more ids than this by stripe.
constexpr size_t kMinGrouped = 16;
// Prefetch distance, in ids: index slots are prefetched 2 * kAhead ids ahead, rows kAhead.
constexpr size_t kAhead = 8;

// Per-thread scratch of the batched calls, reused so that a call allocates nothing per id.
// (No call re-enters the store on the same thread: RowFn must not call back into it.)
struct Scratch {
  std::vector<uint64_t> hashes;       // KeyHash of ids[i]
  std::vector<uint32_t> order;        // positions in ids, grouped by stripe (reads)
  std::vector<uint32_t> starts;       // counting sort: first position of each stripe's group
  std::vector<uint64_t> stripe_bits;  // LockWindow's set of stripes; all zero between uses
};
thread_local Scratch t_scratch;

}  // namespace

struct EmbeddingStore::Impl {
  StoreOptions options;
  std::vector<uint32_t> row_bytes;  // by table
  std::unique_ptr<rocksdb::DB> db;
  std::unique_ptr<ChangeLog> changes;  // StoreOptions::change_log_dir, or null
  rocksdb::ReadOptions read_options;
  rocksdb::WriteOptions write_options;
  std::vector<std::unique_ptr<Stripe>> stripes;
  // model_checksum's part of this store, as of the last completed change, is `sum` plus every
  // stripe's `cleaned` plus the records of the dirty cached rows: a row's record leaves `sum`
  // when the row turns dirty and goes to `cleaned` when it is evicted or flushed, so hot rows
  // are not hashed on every update. FlushDirty folds it all into `sum` (and stores it).
  // Unknown for a store written before it was kept (until Checksum scans once).
  mutable Mutex sum_mu;
  bool sum_known GUARDED_BY(sum_mu) = false;
  // Bytes staged in all stripes since the last drain (an upper bound: erasures do not lower it).
  std::atomic<uint64_t> staged_bytes{0};
  std::atomic<uint64_t> staged_peak{0};  // the largest staged_bytes at a drain or flush
  uint64_t stage_keep_bytes = 0;         // what a stripe's stage keeps across a drain
  // Called before staged_bytes goes back to 0 (every stripe's stage is locked and cleared).
  void NoteStagePeak() {
    const uint64_t now = staged_bytes.load(std::memory_order_relaxed);
    uint64_t peak = staged_peak.load(std::memory_order_relaxed);
    while (now > peak && !staged_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> drains{0};
  // Set while RocksDB refuses rows (WriteError); drains are tried again from retry_at_ns on.
  std::atomic<bool> unwritable{false};
  std::atomic<int64_t> retry_at_ns{0};
  mutable Mutex error_mu;
  Status write_error GUARDED_BY(error_mu);
  uint64_t failed_writes GUARDED_BY(error_mu) = 0;
  uint64_t failed_in_episode GUARDED_BY(error_mu) = 0;
  // Records how a write of rows to RocksDB ended, logging where an episode starts and ends.
  void NoteWrite(const Status& s);
  // Writes the staged rows now unless another call is writing or a flush is, or (`throttled`)
  // RocksDB failed less than a second ago. Returns what that write returned (Ok when none ran).
  Status DrainStaged(bool throttled);
  // Writing calls (Update, Erase, WriteRows, SetAdmissionCount) hold it shared; FlushDirty holds
  // it alone, so that it writes the rows it took without holding the stripes (see FlushDirty).
  std::shared_mutex write_gate;
  // Set, under every stripe's lock, while FlushDirty writes rows it took from the cache: they
  // are clean there but not yet in RocksDB, so the cache must not drop them, and their pointers
  // must stay valid. Reads then insert nothing (no eviction) and no drain runs.
  std::atomic<bool> frozen{false};
  std::atomic<bool> reads_skip_cache{false};  // StopCachingReads
  std::atomic<bool> missed_stored{false};     // MissedStoredRows
  // A stripe's share of options.max_dirty_bytes; 0 = no bound.
  uint64_t stripe_max_dirty_bytes = 0;
  // Stages the dirty rows of a full stripe when they exceed its share of max_dirty_bytes (see
  // StoreOptions): they reach RocksDB with the next drain, as evicted ones do, so a flush finds
  // few. Not while a flush writes: it holds pointers into rows it took, and no writer runs. Nor
  // while the stage is full: when a cache first fills, every stripe is dirty through and over
  // its share, and a call whose windows cross every stripe staged the whole cache before its
  // next drain (a PS with 256 MiB of cache held 300 MiB of stage for good, issue 21). Returns
  // true when it put the stripe off for that: ReleaseWindow writes it ahead after the drain.
  bool MaybeWriteAhead(Stripe& s) NO_THREAD_SAFETY_ANALYSIS {
    if (stripe_max_dirty_bytes == 0 || s.cache.dirty_bytes() <= stripe_max_dirty_bytes ||
        s.cache.evictions() == 0 || frozen.load(std::memory_order_relaxed))
      return false;
    if (staged_bytes.load(std::memory_order_relaxed) >= options.stage_bytes) return true;
    s.cache.WriteBackDirty();
    return false;
  }
  StoredSum sum GUARDED_BY(sum_mu);

  void MergeDelta(const SumDelta& d) {
    MutexLock lock(&sum_mu);
    sum.sum.Merge(d.plus);
    sum.sum.Unmerge(d.minus);
    sum.rows += static_cast<uint64_t>(d.rows);
    sum.counters += static_cast<uint64_t>(d.counters);
  }
  // The stored row of (table, id) as the store holds it now, cache first; `found` says whether
  // there is one, `dirty` whether it is a dirty cached row (whose record is not in `sum`).
  // REQUIRES: the id's stripe is locked.
  Status CurrentRow(Stripe& s, uint32_t table, uint64_t id, uint64_t hash, std::string* value,
                    bool* found, bool* dirty) EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // The counter of (table, id), cached in the stripe's counter map.
  StatusOr<CounterCache::Entry*> Counter(Stripe& s, uint32_t table, uint64_t id, uint64_t hash)
      EXCLUSIVE_LOCKS_REQUIRED(s.mu);

  size_t StripeIndex(uint64_t hash) const { return ((hash >> 32) * stripes.size()) >> 32; }
  Stripe& StripeOf(uint64_t hash) { return *stripes[StripeIndex(hash)]; }

  Status CheckTable(uint32_t table) const {
    if (table < row_bytes.size()) return Status::Ok();
    return Status::InvalidArgument("store: unknown table " + std::to_string(table));
  }

  Status Write(rocksdb::WriteBatch* batch) {
    if (batch->Count() == 0) return Status::Ok();
    rocksdb::Status s = db->Write(write_options, batch);
    // After RocksDB took it, under the caller's stripe lock: the log's order is RocksDB's.
    if (s.ok() && changes != nullptr) changes->Append(batch->Data());
    batch->Clear();
    return FromRocks(s, "store: write");
  }

  template <typename Op>
  Status Apply(uint32_t table, std::span<const uint64_t> ids, Op& op);
  template <typename Op>
  void FirstPass(uint32_t table, std::span<const uint64_t> ids, const uint64_t* hashes,
                 const uint32_t* order, Op& op, Pending* pending);
  Status Fetch(Pending* pending);
  template <typename Op>
  Status FinishAll(uint32_t table, std::span<const uint64_t> ids, Pending* pending, Op& op);
  template <typename Op>
  Status Finish(uint32_t table, uint64_t id, Pending* pending, size_t k, Op& op);
  template <typename HashAt>
  size_t WindowEnd(size_t begin, size_t n, bool grouped, HashAt hash_at) const;
  template <typename HashAt>
  size_t LockWindow(size_t begin, size_t end, HashAt hash_at, uint32_t* locked);
  Status ReleaseWindow(const uint32_t* locked, size_t count);
  Status StoredValue(Stripe& s, uint32_t table, uint64_t id, Pending* pending, size_t k,
                     const rocksdb::Slice** value) EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // A row a flush writes.
  struct Dirty {
    uint32_t table;
    uint32_t bytes;
    uint64_t id;
    const uint8_t* row;  // valid while nothing is inserted into or erased from the cache
    bool cached;         // from the cache (else from the stage)
  };
  // What a flush writes, taken from the stripes under their locks.
  struct Taken {
    std::vector<Dirty> rows;
    rocksdb::WriteBatch counters;
  };
  // Writes the staged rows, dirty rows and counters of stripes [begin, end) to RocksDB, in key
  // order (only the staged rows when `staged_only`). REQUIRES: those stripes are locked.
  Status FlushStripes(size_t begin, size_t end, bool staged_only);
  // FlushStripes in its three steps. Take: the staged rows and, unless `staged_only`, the dirty
  // cached rows (clean in the cache from now on) and dirty counters. REQUIRES: those stripes
  // are locked.
  void Take(size_t begin, size_t end, bool staged_only, Taken* taken);
  // Writes the rows taken, in key order. Needs no stripe lock while the cache inserts and erases
  // nothing (`frozen`).
  Status WriteTaken(Taken* taken, bool may_ingest);
  // Under the stripes' locks again: on success clears the stage and writes the counters; after
  // a failed write (`written`) stages the rows taken from the cache again. Returns the error.
  Status EndFlush(size_t begin, size_t end, bool staged_only, Taken* taken, Status written);
  // Writes `dirty` (sorted by key, a key twice only as staged then cached) to RocksDB and the
  // change log: as ingested SSTs when `may_ingest` and they reach options.ingest_bytes, else
  // through the memtable.
  Status WriteSorted(std::vector<Dirty>* dirty, bool may_ingest);
  // Writes rows 0..n of a key-ordered flush into one SST and ingests it. value(i, &v) gives
  // row i's bytes, or false to leave it out; key(i) its key (ascending, distinct once the rows
  // left out are left out).
  // `logged`: the change log adopted the file (else the caller appends the rows to it).
  template <typename ValueAt, typename KeyAt>
  Status IngestSorted(size_t n, ValueAt value, KeyAt key, bool* logged);
  // Every stripe, in ascending order (as LockWindow locks, so the two cannot deadlock).
  void LockAllStripes() NO_THREAD_SAFETY_ANALYSIS {
    for (const auto& s : stripes) s->mu.Lock();
  }
  void UnlockAllStripes() NO_THREAD_SAFETY_ANALYSIS {
    for (size_t k = stripes.size(); k-- > 0;) stripes[k]->mu.Unlock();
  }
  // Moves every stripe's `cleaned` into `sum`. REQUIRES: every stripe locked.
  void FoldCleaned() NO_THREAD_SAFETY_ANALYSIS EXCLUSIVE_LOCKS_REQUIRED(sum_mu) {
    for (const auto& s : stripes) sum.sum.Merge(std::exchange(s->cleaned, {}));
  }
  // Adds the kept sum (see `sum`) to `out` and returns true, or returns false when it is not
  // known. Hashes the dirty cached rows: at most the cache, never the table.
  bool SumWithDirtyRows(ModelChecksum* out, uint64_t* rows, uint64_t* counters);
  // Writes the staged rows of every stripe once they reach options.stage_bytes. REQUIRES: no stripe
  // locked by the caller.
  Status MaybeDrainStaged();
  Status EraseInStripe(Stripe& s, uint32_t table, std::span<const uint64_t> ids, SumDelta* delta)
      EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  Status Scan(
      const rocksdb::Slice& from, const rocksdb::Slice* until,
      const std::function<Status(const rocksdb::Slice& key, const rocksdb::Slice& value)>& fn);
};

// Three passes, so that misses cost one MultiGet and no lock is held while RocksDB reads:
// (1) serve hits under each stripe's lock, noting misses; (2) MultiGet the misses;
// (3) under the lock again, serve each pending id from the cache (another call may have cached
// it meanwhile) or from what was read, inserting it.
//
// Passes 1 and 3 go through ids in windows of kWindow, taking the lock of every stripe the
// window touches once (LockWindow), and prefetch each id's index slot and row a few ids before
// looking it up. Reads and UpdateDistinct first group the ids by stripe (a stable counting
// sort), so a window holds at most kWindowStripes stripes; Update keeps the call order (fn is
// called in id order), so its windows hold up to kWindow stripes at once.
template <typename Op>
Status EmbeddingStore::Impl::Apply(uint32_t table, std::span<const uint64_t> ids, Op& op) {
  TANDEM_RETURN_IF_ERROR(CheckTable(table));
  if (ids.size() > 0xFFFFFFFFu) return Status::InvalidArgument("store: too many ids in one call");
  Scratch& scratch = t_scratch;
  const size_t n = ids.size();
  scratch.hashes.resize(n);
  uint64_t* hashes = scratch.hashes.data();
  const uint32_t* order = nullptr;
  if (!Op::kOrdered && stripes.size() > 1 && n > kMinGrouped) {
    std::vector<uint32_t>& starts = scratch.starts;
    starts.assign(stripes.size(), 0);
    for (size_t i = 0; i < n; ++i) {
      hashes[i] = KeyHash(table, ids[i]);
      ++starts[StripeIndex(hashes[i])];
    }
    uint32_t sum = 0;
    for (uint32_t& s : starts) sum += std::exchange(s, sum);
    scratch.order.resize(n);
    for (size_t i = 0; i < n; ++i) {
      scratch.order[starts[StripeIndex(hashes[i])]++] = static_cast<uint32_t>(i);
    }
    order = scratch.order.data();
  } else {
    for (size_t i = 0; i < n; ++i) hashes[i] = KeyHash(table, ids[i]);
  }
  Pending pending;
  pending.grouped = order != nullptr;
  FirstPass(table, ids, hashes, order, op, &pending);
  // Only misses evict, but a write-ahead (MaybeWriteAhead) stages rows of calls that all hit:
  // without a drain here, a hot set that fits the cache would keep them staged, beside it.
  if (pending.index.empty()) return MaybeDrainStaged();
  TANDEM_RETURN_IF_ERROR(Fetch(&pending));
  return FinishAll(table, ids, &pending, op);
}

bool EmbeddingStore::Impl::SumWithDirtyRows(ModelChecksum* out, uint64_t* rows,
                                            uint64_t* counters) NO_THREAD_SAFETY_ANALYSIS {
  LockAllStripes();
  bool known = false;
  {
    MutexLock lock(&sum_mu);
    known = sum_known;
    if (known) {
      FoldCleaned();
      out->Merge(sum.sum);
      if (rows != nullptr) *rows = sum.rows;
      if (counters != nullptr) *counters = sum.counters;
    }
  }
  if (known) {
    for (const auto& s : stripes) {
      s->cache.ForEachDirty(
          [&](uint32_t table, uint64_t id, const uint8_t* row, uint32_t /*bytes*/) {
            RowRecord(out, options.tables[table], table, id, row, false);
          });
    }
  }
  UnlockAllStripes();
  return known;
}

// A drain that fails leaves its rows staged (EndFlush), where reads find them: the call that set
// it off goes on, so an apply is never left half done by a full disk (WriteError).
Status EmbeddingStore::Impl::MaybeDrainStaged() {
  if (staged_bytes.load(std::memory_order_relaxed) < options.stage_bytes) return Status::Ok();
  DrainStaged(/*throttled=*/true).IgnoreError();  // NoteWrite recorded it
  return Status::Ok();
}

namespace {
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

// One caller drains; the others go on (they wait for the stripes meanwhile).
Status EmbeddingStore::Impl::DrainStaged(bool throttled) NO_THREAD_SAFETY_ANALYSIS {
  const bool failing = unwritable.load(std::memory_order_relaxed);
  if (failing && throttled && NowNs() < retry_at_ns.load(std::memory_order_relaxed))
    return Status::Ok();
  // Early out without every stripe's lock while a flush writes (checked again under them): the
  // reads it lets through would otherwise take all the locks at each of their windows.
  if (frozen.load(std::memory_order_relaxed)) return Status::Ok();
  if (draining.exchange(true, std::memory_order_acquire)) return Status::Ok();
  LockAllStripes();
  // Not while a flush writes what it took, the stage's rows among them (a read calls this; it
  // staged nothing meanwhile, so the flush's own end leaves the stage empty).
  const bool run = !frozen.load(std::memory_order_relaxed);
  Status s;
  // After a failed flush or compaction RocksDB refuses every write until it recovers: on its
  // own for some errors once space is back, through Resume for the others.
  if (run && failing) s = FromRocks(db->Resume(), "store: resume RocksDB");
  if (run && s.ok()) s = FlushStripes(0, stripes.size(), /*staged_only=*/true);
  if (run && s.ok()) {
    NoteStagePeak();
    staged_bytes.store(0, std::memory_order_relaxed);
    drains.fetch_add(1, std::memory_order_relaxed);
  }
  UnlockAllStripes();
  draining.store(false, std::memory_order_release);
  if (run) NoteWrite(s);
  return s;
}

void EmbeddingStore::Impl::NoteWrite(const Status& s) {
  MutexLock lock(&error_mu);
  if (s.ok()) {
    if (!unwritable.exchange(false, std::memory_order_relaxed)) return;
    TLOG_INFO("store: RocksDB takes rows again after {} failed writes", failed_in_episode);
    failed_in_episode = 0;
    write_error = Status::Ok();
    return;
  }
  failed_writes++;
  // The first error of an episode is its cause (ENOSPC); a retry then usually meets RocksDB busy
  // recovering from it, which says nothing about why.
  if (failed_in_episode++ == 0) write_error = s;
  retry_at_ns.store(NowNs() + 1'000'000'000, std::memory_order_relaxed);
  if (!unwritable.exchange(true, std::memory_order_relaxed))
    TLOG_ERROR(
        "store: RocksDB refused rows ({}): they stay in memory and are written once it takes them "
        "(tried again every second)",
        s.ToString());
}

// The end of the window that starts at `begin` (of n positions): kWindow positions, or, when
// `grouped`, the first stripe boundary from there on or after kWindowStripes stripes. A
// stripe's run of positions is never cut in two: the run after a cut would meet the stamps of
// the rows the run before it evicted (ReleaseWindow applies them) and read its misses again.
template <typename HashAt>
size_t EmbeddingStore::Impl::WindowEnd(size_t begin, size_t n, bool grouped, HashAt hash_at) const {
  if (!grouped) return std::min(n, begin + kWindow);
  size_t stripe = StripeIndex(hash_at(begin));
  size_t seen = 1;
  for (size_t q = begin + 1; q < n; ++q) {
    const size_t s = StripeIndex(hash_at(q));
    if (s == stripe) continue;
    if (++seen > kWindowStripes || q >= begin + kWindow) return q;
    stripe = s;
  }
  return n;
}

// Locks, in ascending order (so that concurrent calls cannot deadlock), the stripes of
// hash_at(q) for q in [begin, end); writes their indexes to `locked` and returns how many.
template <typename HashAt>
size_t EmbeddingStore::Impl::LockWindow(size_t begin, size_t end, HashAt hash_at,
                                        uint32_t* locked) NO_THREAD_SAFETY_ANALYSIS {
  std::vector<uint64_t>& bits = t_scratch.stripe_bits;
  if (bits.size() * 64 < stripes.size()) bits.resize((stripes.size() + 63) / 64);
  size_t lo = bits.size(), hi = 0;
  for (size_t q = begin; q < end; ++q) {
    const size_t s = StripeIndex(hash_at(q));
    bits[s / 64] |= uint64_t{1} << (s % 64);
    lo = std::min(lo, s / 64);
    hi = std::max(hi, s / 64);
  }
  size_t count = 0;
  for (size_t w = lo; w <= hi && w < bits.size(); ++w) {
    for (uint64_t word = std::exchange(bits[w], 0); word != 0; word &= word - 1) {
      locked[count++] = static_cast<uint32_t>(w * 64 + std::countr_zero(word));
    }
  }
  for (size_t k = 0; k < count; ++k) {
    stripes[locked[k]]->mu.Lock();
    stripes[locked[k]]->cache.DeferChanges();  // applied by ReleaseWindow
  }
  return count;
}

// Writes what the window's stripes have left to write back and releases them. Between windows
// no lock is held: the stage is drained once past its bound, and the stripes whose write-ahead
// waited for that (MaybeWriteAhead) are written ahead one at a time, each followed by a drain
// if the stage is full again. The stage then holds its bound plus one stripe's dirty rows at
// most (per thread), and every stripe a call unlocked is within its dirty share when it returns
// (unless RocksDB refuses the drains: the rows then stay dirty in the cache, not staged).
Status EmbeddingStore::Impl::ReleaseWindow(const uint32_t* locked,
                                           size_t count) NO_THREAD_SAFETY_ANALYSIS {
  uint32_t deferred[kWindow];
  size_t num_deferred = 0;
  Status status;
  for (size_t k = count; k-- > 0;) {
    Stripe& s = *stripes[locked[k]];
    if (MaybeWriteAhead(s)) deferred[num_deferred++] = locked[k];
    Status written = Write(&s.writebacks);
    if (status.ok()) status = std::move(written);
    s.cache.ApplyDeferredChanges();
    s.mu.Unlock();
  }
  MaybeDrainStaged().IgnoreError();  // NoteWrite recorded a failure
  for (size_t k = 0; k < num_deferred; ++k) {
    Stripe& s = *stripes[deferred[k]];
    s.mu.Lock();
    MaybeWriteAhead(s);  // put off again if another thread filled the stage meanwhile
    Status written = Write(&s.writebacks);
    if (status.ok()) status = std::move(written);
    s.mu.Unlock();
    MaybeDrainStaged().IgnoreError();
  }
  return status;
}

template <typename Op>
void EmbeddingStore::Impl::FirstPass(uint32_t table, std::span<const uint64_t> ids,
                                     const uint64_t* hashes, const uint32_t* order, Op& op,
                                     Pending* pending) NO_THREAD_SAFETY_ANALYSIS {
  const size_t n = ids.size();
  const uint32_t prefetch_bytes = op.PrefetchBytes();
  auto pos = [order](size_t q) -> size_t { return order != nullptr ? order[q] : q; };
  uint32_t locked[kWindow];
  for (size_t begin = 0, end = 0; begin < n; begin = end) {
    end = WindowEnd(begin, n, order != nullptr, [&](size_t q) { return hashes[pos(q)]; });
    const size_t num_locked = LockWindow(
        begin, end, [&](size_t q) { return hashes[pos(q)]; }, locked);
    for (size_t q = begin; q < std::min(end, begin + 2 * kAhead); ++q) {
      StripeOf(hashes[pos(q)]).cache.PrefetchSlot(hashes[pos(q)]);
    }
    for (size_t q = begin; q < end; ++q) {
      if (q + 2 * kAhead < end) {
        const uint64_t h = hashes[pos(q + 2 * kAhead)];
        StripeOf(h).cache.PrefetchSlot(h);
      }
      if (q + kAhead < end) {
        const uint64_t h = hashes[pos(q + kAhead)];
        StripeOf(h).cache.PrefetchRow(h, prefetch_bytes);
      }
      const size_t i = pos(q);
      const uint64_t hash = hashes[i];
      Stripe& s = StripeOf(hash);
      // Update calls fn in id order, so after its first miss even hits wait for pass 3.
      const bool now = !Op::kOrdered || pending->index.empty();
      bool was_dirty = false;
      uint8_t* row = s.cache.Find(table, ids[i], hash, Op::kWrites && now, &was_dirty);
      if (row != nullptr) {
        ++s.hits;
      } else {
        ++s.misses;
      }
      if (row != nullptr && now) {
        op.Cached(i, row, true, was_dirty);
        continue;
      }
      // A staged row is newer than RocksDB's copy: Finish takes it from the stage.
      int32_t how = Pending::kNotFetched;
      if (row == nullptr && s.staged.Find(table, ids[i], hash) == nullptr) {
        how = 0;
        if (s.absent.Find(table, ids[i], hash)) {
          how = Pending::kKnownAbsent;
          ++s.known_absent;
        }
      }
      pending->Add(i, hash, s.cache.change_seq(), how, table, ids[i]);
    }
    // Lookups never evict: nothing to write back. But an update's hits turn rows dirty, and the
    // stripes may be written ahead: drained between windows as in FinishAll (ReleaseWindow).
    ReleaseWindow(locked, num_locked).IgnoreError();
  }
}

// MultiGet sorts unsorted keys through the comparator (a virtual call per comparison, a large
// share of the cost of a miss), so the keys are sorted here: they all have the call's table,
// and the byte order of big-endian (table, id) keys is then the order of their ids.
Status EmbeddingStore::Impl::Fetch(Pending* pending) {
  const size_t n = pending->keys.size();
  if (n == 0) return Status::Ok();
  std::vector<uint32_t> by_key(n);  // position in keys, in key order
  for (uint32_t j = 0; j < n; ++j) by_key[j] = j;
  const uint64_t* ids = pending->key_ids.data();
  std::sort(by_key.begin(), by_key.end(),
            [ids](uint32_t a, uint32_t b) { return ids[a] < ids[b]; });
  std::vector<int32_t> rank(n);  // position of keys[j] in key order
  pending->key_slices.resize(n);
  for (uint32_t r = 0; r < n; ++r) {
    pending->key_slices[r] = pending->keys[by_key[r]].slice();
    rank[by_key[r]] = static_cast<int32_t>(r);
  }
  for (int32_t& f : pending->fetched) {
    if (f >= 0) f = rank[static_cast<size_t>(f)];
  }
  pending->values.resize(n);
  pending->statuses.resize(n);
  db->MultiGet(read_options, db->DefaultColumnFamily(), n, pending->key_slices.data(),
               pending->values.data(), pending->statuses.data(), /*sorted_input=*/true);
  for (const rocksdb::Status& s : pending->statuses) {
    if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "store: multiget");
  }
  return Status::Ok();
}

// Pass 3 in windows (in pending order: call order for Update, stripe order for reads).
template <typename Op>
Status EmbeddingStore::Impl::FinishAll(uint32_t table, std::span<const uint64_t> ids,
                                       Pending* pending, Op& op) NO_THREAD_SAFETY_ANALYSIS {
  const size_t m = pending->index.size();
  uint32_t locked[kWindow];
  for (size_t begin = 0, end = 0; begin < m; begin = end) {
    end = WindowEnd(begin, m, pending->grouped, [&](size_t k) { return pending->hash[k]; });
    const size_t num_locked = LockWindow(
        begin, end, [&](size_t k) { return pending->hash[k]; }, locked);
    // Prefetches as FirstPass does (an Update's hits after its first miss are served here);
    // only within the window, whose stripes are locked.
    const uint32_t prefetch_bytes = op.PrefetchBytes();
    for (size_t k = begin; k < std::min(end, begin + 2 * kAhead); ++k)
      StripeOf(pending->hash[k]).cache.PrefetchSlot(pending->hash[k]);
    Status status;
    for (size_t k = begin; k < end && status.ok(); ++k) {
      if (k + 2 * kAhead < end) {
        const uint64_t h = pending->hash[k + 2 * kAhead];
        StripeOf(h).cache.PrefetchSlot(h);
      }
      if (k + kAhead < end) {
        const uint64_t h = pending->hash[k + kAhead];
        StripeOf(h).cache.PrefetchRow(h, prefetch_bytes);
      }
      status = Finish(table, ids[pending->index[k]], pending, k, op);
    }
    // The stage stays within one window of its bound however many rows this call evicts (the
    // window's evictions are stamped as it releases the stripes, before a drain can write them,
    // so this call's later pending MultiGet values are checked against them).
    Status released = ReleaseWindow(locked, num_locked);
    TANDEM_RETURN_IF_ERROR(status);
    TANDEM_RETURN_IF_ERROR(released);
  }
  return Status::Ok();
}

// One pending id; its stripe is locked (by FinishAll).
template <typename Op>
Status EmbeddingStore::Impl::Finish(uint32_t table, uint64_t id, Pending* pending, size_t k,
                                    Op& op) NO_THREAD_SAFETY_ANALYSIS {
  const size_t i = pending->index[k];
  const uint64_t hash = pending->hash[k];
  Stripe& s = StripeOf(hash);
  bool was_dirty = false;
  if (uint8_t* row = s.cache.Find(table, id, hash, Op::kWrites, &was_dirty)) {
    op.Cached(i, row, true, was_dirty);
    return Status::Ok();
  }
  const rocksdb::Slice* value = nullptr;
  TANDEM_RETURN_IF_ERROR(StoredValue(s, table, id, pending, k, &value));
  if (value != nullptr && !missed_stored.load(std::memory_order_relaxed)) {
    missed_stored.store(true, std::memory_order_relaxed);
  }
  if (value == nullptr && !Op::kWrites) {
    s.absent.Note(table, id, hash);
    op.Absent(i, id);  // reads never store anything for an absent row (PROTOCOLS §4)
    return Status::Ok();
  }
  if constexpr (!Op::kWrites) {
    if (frozen.load(std::memory_order_relaxed) ||
        reads_skip_cache.load(std::memory_order_relaxed)) {
      // A flush is writing rows the cache holds (FlushDirty): served without caching, so that
      // nothing is evicted meanwhile. (Writes wait for the flush: they hold write_gate.)
      op.Cached(i, reinterpret_cast<const uint8_t*>(value->data()), true, /*was_dirty=*/false);
      return Status::Ok();
    }
  }
  uint8_t* row = s.cache.Insert(table, id, hash, Op::kWrites);
  if (row == nullptr) return Status::ResourceExhausted("store: stripe slab limit reached");
  s.absent.Forget(table, id, hash);  // stored once written back
  if (value != nullptr) {
    std::memcpy(row, value->data(), value->size());
  } else {
    embedding::InitialRow(options.seed, options.tables[table], id, RowRef{row});
  }
  op.Cached(i, row, value != nullptr, /*was_dirty=*/false);
  // Now, not at the window's end: a later id of this window may be the row just written back,
  // and StoredValue then re-reads it from RocksDB.
  return Write(&s.writebacks);
}

// The stored value of a pending id, or nullptr if absent. The MultiGet result is used only if
// no writeback, flush or erasure of this key can have happened since the first pass saw it
// missing; otherwise the row is read again, under the lock that orders those writes.
Status EmbeddingStore::Impl::StoredValue(Stripe& s, uint32_t table, uint64_t id, Pending* pending,
                                         size_t k, const rocksdb::Slice** value) {
  if (const uint8_t* staged = s.staged.Find(table, id, pending->hash[k])) {
    // Copied: inserting the row into the cache may stage (and so overwrite) another.
    pending->reread.PinSelf(
        rocksdb::Slice(reinterpret_cast<const char*>(staged), row_bytes[table]));
    *value = &pending->reread;
    return Status::Ok();
  }
  const int32_t f = pending->fetched[k];
  if (f == Pending::kKnownAbsent &&
      !s.cache.MaybeChangedSince(pending->hash[k], pending->seen_seq[k])) {
    *value = nullptr;
    return Status::Ok();
  }
  if (f >= 0 && !s.cache.MaybeChangedSince(pending->hash[k], pending->seen_seq[k])) {
    *value = pending->statuses[f].ok() ? &pending->values[f] : nullptr;
  } else {
    ++s.rereads;
    pending->reread.Reset();
    rocksdb::Status st = db->Get(read_options, db->DefaultColumnFamily(), RowKey(table, id).slice(),
                                 &pending->reread);
    if (!st.ok() && !st.IsNotFound()) return FromRocks(st, "store: get");
    *value = st.ok() ? &pending->reread : nullptr;
  }
  if (*value != nullptr && (*value)->size() != row_bytes[table]) {
    return Status::DataLoss("store: row of table " + std::to_string(table) + " id " +
                            std::to_string(id) + " has " + std::to_string((*value)->size()) +
                            " bytes, expected " + std::to_string(row_bytes[table]));
  }
  return Status::Ok();
}

// Ingesting an SST costs about a fifth of the CPU of the memtable inserts and flushes it
// replaces, and holds the stripes a third as long (2.65 M rows of 144 B: 0.7 s against 3.6-4.5
// s of CPU, 0.9 s against 2.5 s of wall time, issue 21). The file is built with the DB's own
// table options and its CRC32C is computed as it is written: RocksDB 7.8 cannot read an
// ingested file back to checksum it when allow_mmap_reads is on ("file read failed"), so the
// writer's checksum is handed over, and write_global_seqno stays off so that the file's bytes,
// and that checksum, are never changed after the writer closed it.
template <typename ValueAt, typename KeyAt>
Status EmbeddingStore::Impl::IngestSorted(size_t n, ValueAt value, KeyAt key, bool* logged) {
  *logged = false;
  const std::string path = options.db_dir + "/" + kIngestFile;
  // Left in the page cache: compaction reads the file next.
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), db->GetOptions(), nullptr,
                                /*invalidate_page_cache=*/false);
  TANDEM_RETURN_IF_ERROR(FromRocks(writer.Open(path), "store: create " + path));
  rocksdb::Status st;
  for (size_t i = 0; i < n && st.ok(); ++i) {
    rocksdb::Slice v;
    if (value(i, &v)) st = writer.Put(key(i).slice(), v);
  }
  rocksdb::ExternalSstFileInfo info;
  if (st.ok()) st = writer.Finish(&info);
  // The change log keeps the same file (see ChangeLog::AdoptSst) under a second name, as
  // RocksDB moves the first into the DB; the file never changes after Finish.
  const std::string log_name = path + ".changes";
  const std::optional<uint32_t> crc =
      RocksFileCrc32c(info.file_checksum_func_name, info.file_checksum);
  ::unlink(log_name.c_str());
  const bool linked =
      st.ok() && changes != nullptr && crc && ::link(path.c_str(), log_name.c_str()) == 0;
  if (st.ok()) {
    rocksdb::IngestExternalFileArg arg;
    arg.column_family = db->DefaultColumnFamily();
    arg.external_files = {path};
    arg.options.move_files = true;
    arg.options.write_global_seqno = false;
    arg.options.verify_file_checksum = false;
    if (!info.file_checksum_func_name.empty()) {
      arg.files_checksums = {info.file_checksum};
      arg.files_checksum_func_names = {info.file_checksum_func_name};
    }
    st = db->IngestExternalFiles({arg});
  }
  if (st.ok() && linked) *logged = changes->AdoptSst(log_name, info.file_size, *crc);
  if (linked && !*logged) ::unlink(log_name.c_str());
  if (!st.ok()) ::unlink(path.c_str());
  return FromRocks(st, "store: write a flush of " + std::to_string(n) + " rows as an SST");
}

// The rows go to RocksDB in key order: the memtable is a skiplist, and RocksDB inserts keys
// that arrive in order with a step from the previous insert instead of a search from the top
// (the slot order of the cache is random key order). A key both staged and dirty in the cache
// is written twice, the cached (newer) copy last.
Status EmbeddingStore::Impl::FlushStripes(size_t begin, size_t end, bool staged_only) {
  Taken taken;
  Take(begin, end, staged_only, &taken);
  Status written = WriteTaken(&taken, /*may_ingest=*/!staged_only);
  return EndFlush(begin, end, staged_only, &taken, std::move(written));
}

void EmbeddingStore::Impl::Take(size_t begin, size_t end, bool staged_only,
                                Taken* taken) NO_THREAD_SAFETY_ANALYSIS {
  std::vector<Dirty>& dirty = taken->rows;
  for (size_t k = begin; k < end; ++k) {
    Stripe& s = *stripes[k];
    s.staged.ForEach([&](uint32_t table, uint64_t id, const uint8_t* row, uint32_t n) {
      dirty.push_back(Dirty{table, n, id, row, false});
    });
    if (staged_only) continue;
    s.cache.TakeDirty([&](uint32_t table, uint64_t id, const uint8_t* row, uint32_t n) {
      RowRecord(&s.cleaned, options.tables[table], table, id, row, false);
      dirty.push_back(Dirty{table, n, id, row, true});
    });
    s.counters.ForEach([&](const CounterCache::Entry& e) {
      if (e.state != CounterCache::kDirty) return;
      const CounterKey key(e.table, e.id);
      if (e.count == 0) {
        taken->counters.Delete(key.slice()).PermitUncheckedError();
      } else {
        taken->counters.Put(key.slice(), EncodeCount(e.count)).PermitUncheckedError();
      }
    });
  }
}

Status EmbeddingStore::Impl::WriteTaken(Taken* taken, bool may_ingest) {
  // The byte order of big-endian (table, id) keys is the numeric order of (table, id).
  std::sort(taken->rows.begin(), taken->rows.end(), [](const Dirty& a, const Dirty& b) {
    if (a.table != b.table) return a.table < b.table;
    return a.id != b.id ? a.id < b.id : a.cached < b.cached;
  });
  return WriteSorted(&taken->rows, may_ingest);
}

Status EmbeddingStore::Impl::EndFlush(size_t begin, size_t end, bool staged_only, Taken* taken,
                                      Status written) NO_THREAD_SAFETY_ANALYSIS {
  if (!written.ok()) {
    // The cache holds the taken rows clean now, and would drop them at eviction: staged, they
    // are written by the next drain or flush (the stage's own rows stay staged).
    for (const Dirty& d : taken->rows) {
      if (!d.cached) continue;
      const uint64_t hash = KeyHash(d.table, d.id);
      Stripe& s = StripeOf(hash);
      staged_bytes.fetch_add(s.staged.Put(d.table, d.id, hash, d.row, d.bytes),
                             std::memory_order_relaxed);
      // Staged again after its take: stamped as every staging is (see below).
      s.cache.NoteChanged(hash);
    }
    return written;
  }
  // The stage is cleared without stamping its rows as changed: each was stamped when it was
  // staged (an eviction, a write-ahead or a take stamps it), and a read that found a row
  // neither cached nor staged sees that stamp, later than its own, if the row is staged and
  // then written here before the read finishes (StoredValue); a read that found it staged
  // fetched nothing for it. Stamping at the drain too made every pending row of a read
  // that spans a drain (8 MiB of rows: every change bucket) look changed, and each was read
  // again, alone: 13 % more RocksDB reads with the table 100x the cache (issue 21).
  for (size_t k = begin; k < end; ++k) stripes[k]->staged.Clear(stage_keep_bytes);
  TANDEM_RETURN_IF_ERROR(Write(&taken->counters));  // else they stay dirty in the maps
  // Stored: dropping them bounds the maps to the counters touched between two flushes.
  if (!staged_only) {
    for (size_t k = begin; k < end; ++k) stripes[k]->counters.Clear();
  }
  return Status::Ok();
}

Status EmbeddingStore::Impl::WriteSorted(std::vector<Dirty>* rows, bool may_ingest) {
  std::vector<Dirty>& dirty = *rows;
  uint64_t dirty_bytes = 0;
  for (const Dirty& d : dirty) dirty_bytes += d.bytes;
  if (may_ingest && dirty_bytes >= options.ingest_bytes && !dirty.empty()) {
    // SSTs instead of the memtable (see StoreOptions::ingest_bytes), in pieces of about a change
    // log segment, so that the shard copies each piece the log adopts while the next is written.
    // A row both staged and cached dirty is written once, the cached (newer) version, as the
    // batch's second Put wins (or twice, when a piece ends between the two: the later file wins).
    const auto same_key = [&](size_t a, size_t b) {
      return dirty[a].table == dirty[b].table && dirty[a].id == dirty[b].id;
    };
    for (size_t from = 0; from < dirty.size();) {
      size_t to = from;
      for (uint64_t bytes = 0; to < dirty.size() && bytes < options.ingest_piece_bytes;)
        bytes += dirty[to++].bytes;
      bool logged = false;
      TANDEM_RETURN_IF_ERROR(IngestSorted(
          to - from,
          [&](size_t i, rocksdb::Slice* value) {
            if (from + i + 1 < to && same_key(from + i, from + i + 1)) return false;
            const Dirty& d = dirty[from + i];
            *value = rocksdb::Slice(reinterpret_cast<const char*>(d.row), d.bytes);
            return true;
          },
          [&](size_t i) { return RowKey(dirty[from + i].table, dirty[from + i].id); }, &logged));
      // Else the change log gets what the batches below would have held, in the same order.
      if (changes != nullptr && !logged) {
        rocksdb::WriteBatch log;
        for (size_t i = from; i < to; ++i) {
          log.Put(RowKey(dirty[i].table, dirty[i].id).slice(),
                  rocksdb::Slice(reinterpret_cast<const char*>(dirty[i].row), dirty[i].bytes))
              .PermitUncheckedError();
          if (log.GetDataSize() >= kFlushBatchBytes) {
            changes->Append(log.Data());
            log.Clear();
          }
        }
        if (log.Count() > 0) changes->Append(log.Data());
      }
      from = to;
    }
    dirty.clear();
  }
  rocksdb::WriteBatch batch;
  for (const Dirty& d : dirty) {
    batch
        .Put(RowKey(d.table, d.id).slice(),
             rocksdb::Slice(reinterpret_cast<const char*>(d.row), d.bytes))
        .PermitUncheckedError();
    if (batch.GetDataSize() >= kFlushBatchBytes) TANDEM_RETURN_IF_ERROR(Write(&batch));
  }
  return Write(&batch);
}

Status EmbeddingStore::Impl::CurrentRow(Stripe& s, uint32_t table, uint64_t id, uint64_t hash,
                                        std::string* value, bool* found, bool* dirty) {
  *dirty = false;
  if (const uint8_t* row = s.cache.Find(table, id, hash, false, dirty)) {
    value->assign(reinterpret_cast<const char*>(row), row_bytes[table]);
    *found = true;
    return Status::Ok();
  }
  if (const uint8_t* row = s.staged.Find(table, id, hash)) {
    value->assign(reinterpret_cast<const char*>(row), row_bytes[table]);
    *found = true;
    return Status::Ok();
  }
  rocksdb::Status st = db->Get(read_options, RowKey(table, id).slice(), value);
  if (!st.ok() && !st.IsNotFound()) return FromRocks(st, "store: get");
  *found = st.ok();
  if (*found && value->size() != row_bytes[table])
    return Status::DataLoss("store: row of table " + std::to_string(table) + " id " +
                            std::to_string(id) + " has " + std::to_string(value->size()) +
                            " bytes, expected " + std::to_string(row_bytes[table]));
  return Status::Ok();
}

StatusOr<CounterCache::Entry*> EmbeddingStore::Impl::Counter(Stripe& s, uint32_t table, uint64_t id,
                                                             uint64_t hash) {
  if (CounterCache::Entry* e = s.counters.Find(table, id, hash)) return e;
  std::string value;
  rocksdb::Status st = db->Get(read_options, CounterKey(table, id).slice(), &value);
  if (!st.ok() && !st.IsNotFound()) return FromRocks(st, "store: get admission count");
  uint64_t count = 0;
  if (st.ok()) {
    if (value.size() != 8) return Status::DataLoss("store: bad admission counter value");
    count = DecodeCount(value);
  }
  return s.counters.Insert(table, id, hash, count, CounterCache::kClean);
}

// Every old value is read first, so a failed read changes nothing (no row leaves the cache
// with its deletion still unwritten). REQUIRES: ids distinct.
Status EmbeddingStore::Impl::EraseInStripe(Stripe& s, uint32_t table, std::span<const uint64_t> ids,
                                           SumDelta* delta) {
  std::string old;
  std::vector<uint64_t> aligned;  // RocksDB's value is not aligned for RowMeta's fields
  SumDelta d;
  for (uint64_t id : ids) {
    bool found = false, dirty = false;
    TANDEM_RETURN_IF_ERROR(CurrentRow(s, table, id, KeyHash(table, id), &old, &found, &dirty));
    if (!found) continue;
    --d.rows;
    if (dirty) continue;  // its record is not in the sum
    aligned.resize((old.size() + 7) / 8);
    std::memcpy(aligned.data(), old.data(), old.size());
    RowRecord(&d.minus, options.tables[table], table, id,
              reinterpret_cast<const uint8_t*>(aligned.data()), false);
  }
  for (uint64_t id : ids) {
    const uint64_t hash = KeyHash(table, id);
    s.cache.Erase(table, id, hash);
    s.staged.Erase(table, id, hash);
    s.cache.NoteChanged(hash);
    s.writebacks.Delete(RowKey(table, id).slice()).PermitUncheckedError();
  }
  delta->minus.Merge(d.minus);
  delta->rows += d.rows;
  return Write(&s.writebacks);
}

// Visits [from, until) (until == nullptr: to the end) with an implicit snapshot.
Status EmbeddingStore::Impl::Scan(
    const rocksdb::Slice& from, const rocksdb::Slice* until,
    const std::function<Status(const rocksdb::Slice&, const rocksdb::Slice&)>& fn) {
  rocksdb::ReadOptions ro = read_options;
  ro.iterate_upper_bound = until;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->Seek(from); it->Valid(); it->Next()) {
    TANDEM_RETURN_IF_ERROR(fn(it->key(), it->value()));
  }
  return FromRocks(it->status(), "store: scan");
}

// ---- EmbeddingStore.

EmbeddingStore::EmbeddingStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// Dirty rows are written so that a closed store reopens with everything it held. (After a
// crash nothing is lost either way: recovery rebuilds the live DB from a restore point and
// replays the push log, PROTOCOLS §6.)
EmbeddingStore::~EmbeddingStore() { FlushDirty().IgnoreError(); }

StatusOr<std::unique_ptr<EmbeddingStore>> EmbeddingStore::Open(const StoreOptions& options) {
  TANDEM_RETURN_IF_ERROR(ValidateOptions(options));
  std::error_code ec;
  if (!options.read_only) std::filesystem::create_directories(options.db_dir, ec);
  if (ec)
    return Status::FailedPrecondition("store: create " + options.db_dir + ": " + ec.message());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  for (const embedding::TableSpec& spec : options.tables)
    impl->row_bytes.push_back(spec.row_bytes());
  rocksdb::DB* db = nullptr;
  if (options.read_only) {
    rocksdb::Options ro = RocksOptions();
    ro.create_if_missing = false;
    ro.info_log = std::make_shared<NullInfoLog>();
    TANDEM_RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenForReadOnly(ro, options.db_dir, &db),
                                     "store: open read-only " + options.db_dir));
  } else {
    rocksdb::Options rw = RocksOptions();
    rw.info_log = std::make_shared<InfoLogFile>(options.db_dir);
    TANDEM_RETURN_IF_ERROR(
        FromRocks(rocksdb::DB::Open(rw, options.db_dir, &db), "store: open " + options.db_dir));
  }
  impl->db.reset(db);
  if (!options.read_only) {  // a flush's SST that a crash left before RocksDB took it
    std::filesystem::remove(options.db_dir + "/" + kIngestFile, ec);
    std::filesystem::remove(options.db_dir + "/" + kIngestFile + ".changes", ec);
  }
  if (!options.change_log_dir.empty() && !options.read_only) {
    TANDEM_ASSIGN_OR_RETURN(
        impl->changes, ChangeLog::Open(options.change_log_dir, options.change_log_segment_bytes));
  }
  // Durability comes from the push log and restore points (PROTOCOLS §6), not the WAL.
  impl->write_options.disableWAL = true;
  {
    std::string value;
    rocksdb::Status st =
        impl->db->Get(impl->read_options, rocksdb::Slice(kSumKey, sizeof(kSumKey) - 1), &value);
    if (!st.ok() && !st.IsNotFound()) return FromRocks(st, "store: read the stored checksum");
    MutexLock lock(&impl->sum_mu);
    if (st.ok()) {
      // A record this version cannot read (another format) costs a scan, not the store.
      impl->sum_known = DecodeSum(value, &impl->sum);
      if (!impl->sum_known)
        TLOG_WARN("store {}: unreadable checksum record; the sum is computed by a scan",
                  options.db_dir);
    } else {
      // No record: an empty store sums to zero; one written before the sum was kept is scanned
      // the first time its sum is asked for.
      std::unique_ptr<rocksdb::Iterator> it(impl->db->NewIterator(impl->read_options));
      it->SeekToFirst();
      impl->sum_known = !it->Valid() && it->status().ok();
    }
  }
  const uint64_t budget =
      options.memory_only ? 0 : std::max<uint64_t>(1, options.cache_bytes / options.stripes);
  if (options.max_dirty_bytes > 0)
    impl->stripe_max_dirty_bytes = std::max<uint64_t>(1, options.max_dirty_bytes / options.stripes);
  impl->stage_keep_bytes = options.stage_bytes / options.stripes;
  for (int i = 0; i < options.stripes; ++i) {
    impl->stripes.push_back(std::make_unique<Stripe>(impl->row_bytes, budget, &impl->staged_bytes,
                                                     &impl->options.tables));
  }
  // `new` because the constructor is private (make_unique cannot reach it).
  return std::unique_ptr<EmbeddingStore>(new EmbeddingStore(std::move(impl)));
}

Status EmbeddingStore::Read(uint32_t table, std::span<const uint64_t> ids, float* out) {
  TANDEM_RETURN_IF_ERROR(impl_->CheckTable(table));
  ReadOp op{impl_->options.seed, impl_->options.tables[table], out};
  return impl_->Apply(table, ids, op);
}

Status EmbeddingStore::ReadRows(uint32_t table, std::span<const uint64_t> ids, uint8_t* out,
                                std::vector<bool>* present) {
  TANDEM_RETURN_IF_ERROR(impl_->CheckTable(table));
  if (present == nullptr) return Status::InvalidArgument("store: ReadRows needs `present`");
  present->assign(ids.size(), false);
  ReadRowsOp op{impl_->options.seed, impl_->options.tables[table], out, present};
  return impl_->Apply(table, ids, op);
}

// The delta is merged even when the call fails part-way: the rows it did change stay changed.
Status EmbeddingStore::Update(uint32_t table, std::span<const uint64_t> ids, const RowFn& fn) {
  TANDEM_RETURN_IF_ERROR(impl_->CheckTable(table));
  std::shared_lock gate(impl_->write_gate);
  SumDelta delta;
  UpdateOp<true> op{fn, impl_->options.tables[table], table, ids, &delta};
  Status s = impl_->Apply(table, ids, op);
  impl_->MergeDelta(delta);
  return s;
}

Status EmbeddingStore::UpdateDistinct(uint32_t table, std::span<const uint64_t> ids,
                                      const RowFn& fn) {
  TANDEM_RETURN_IF_ERROR(impl_->CheckTable(table));
  std::shared_lock gate(impl_->write_gate);
  SumDelta delta;
  UpdateOp<false> op{fn, impl_->options.tables[table], table, ids, &delta};
  Status s = impl_->Apply(table, ids, op);
  impl_->MergeDelta(delta);
  return s;
}

// Ids are grouped by stripe, so each stripe's deletions reach RocksDB in one batch, written
// while its lock is held (a concurrent miss then sees the row in neither place).
Status EmbeddingStore::Erase(uint32_t table, std::span<const uint64_t> ids) {
  TANDEM_RETURN_IF_ERROR(impl_->CheckTable(table));
  std::shared_lock gate(impl_->write_gate);
  std::vector<std::pair<size_t, uint64_t>> by_stripe;
  by_stripe.reserve(ids.size());
  for (uint64_t id : ids) by_stripe.emplace_back(impl_->StripeIndex(KeyHash(table, id)), id);
  std::sort(by_stripe.begin(), by_stripe.end());
  // An id named twice is erased once (and leaves the sum once).
  by_stripe.erase(std::unique(by_stripe.begin(), by_stripe.end()), by_stripe.end());
  std::vector<uint64_t> group;
  SumDelta delta;
  Status status;
  for (size_t begin = 0; begin < by_stripe.size() && status.ok();) {
    size_t end = begin;
    group.clear();
    while (end < by_stripe.size() && by_stripe[end].first == by_stripe[begin].first) {
      group.push_back(by_stripe[end++].second);
    }
    Stripe& s = *impl_->stripes[by_stripe[begin].first];
    MutexLock lock(&s.mu);
    status = impl_->EraseInStripe(s, table, group, &delta);
    begin = end;
  }
  if (!status.ok()) {  // the deletions of the failed stripe may or may not be in
    MutexLock lock(&impl_->sum_mu);
    impl_->sum_known = false;
    return status;
  }
  impl_->MergeDelta(delta);
  return status;
}

// Counters reach RocksDB only in FlushDirty, under the stripe lock held here, so a read of a
// counter not in the map is current.
StatusOr<uint64_t> EmbeddingStore::AdmissionCount(uint32_t table, uint64_t id) {
  TANDEM_RETURN_IF_ERROR(impl_->CheckTable(table));
  const uint64_t hash = KeyHash(table, id);
  Stripe& s = impl_->StripeOf(hash);
  MutexLock lock(&s.mu);
  TANDEM_ASSIGN_OR_RETURN(const CounterCache::Entry* e, impl_->Counter(s, table, id, hash));
  return e->count;
}

Status EmbeddingStore::SetAdmissionCount(uint32_t table, uint64_t id, uint64_t count) {
  TANDEM_RETURN_IF_ERROR(impl_->CheckTable(table));
  std::shared_lock gate(impl_->write_gate);
  const uint64_t hash = KeyHash(table, id);
  Stripe& s = impl_->StripeOf(hash);
  SumDelta delta;
  {
    MutexLock lock(&s.mu);
    // The old count (read if not cached) leaves the sum: a counter of 0 is no record.
    TANDEM_ASSIGN_OR_RETURN(CounterCache::Entry * e, impl_->Counter(s, table, id, hash));
    if (e->count == count) return Status::Ok();
    if (e->count != 0) {
      delta.minus.AddAdmissionCounter(table, id, e->count);
      --delta.counters;
    }
    if (count != 0) {
      delta.plus.AddAdmissionCounter(table, id, count);
      ++delta.counters;
    }
    e->count = count;
    e->state = CounterCache::kDirty;
  }
  impl_->MergeDelta(delta);
  return Status::Ok();
}

Status EmbeddingStore::WriteRows(uint32_t table, std::span<const uint64_t> ids,
                                 const uint8_t* rows) {
  TANDEM_RETURN_IF_ERROR(impl_->CheckTable(table));
  std::shared_lock gate(impl_->write_gate);
  const uint32_t n = impl_->row_bytes[table];
  const embedding::TableSpec& spec = impl_->options.tables[table];
  rocksdb::WriteBatch batch;
  SumDelta delta;
  Status status;
  std::string old;
  std::vector<uint64_t> aligned((n + 7) / 8);  // RowMeta's fields need alignment
  // Ids already in the unwritten batch, by position: a repeated id's old value is its earlier
  // row in this call, which neither the cache nor RocksDB holds yet (the last one wins).
  std::unordered_map<uint64_t, size_t> in_batch;
  for (size_t i = 0; i < ids.size() && status.ok(); ++i) {
    const uint64_t hash = KeyHash(table, ids[i]);
    Stripe& s = impl_->StripeOf(hash);
    {
      MutexLock lock(&s.mu);
      bool found = false, dirty = false;
      if (auto it = in_batch.find(ids[i]); it != in_batch.end()) {
        old.assign(reinterpret_cast<const char*>(rows + it->second * size_t{n}), n);
        found = true;
      } else {
        status = impl_->CurrentRow(s, table, ids[i], hash, &old, &found, &dirty);
      }
      if (!status.ok()) break;
      if (found && !dirty) {
        std::memcpy(aligned.data(), old.data(), n);
        RowRecord(&delta.minus, spec, table, ids[i],
                  reinterpret_cast<const uint8_t*>(aligned.data()), false);
      } else if (!found) {
        ++delta.rows;
      }
      s.cache.Erase(table, ids[i], hash);
      s.staged.Erase(table, ids[i], hash);  // a later drain must not overwrite the row
      s.cache.NoteChanged(hash);
      s.absent.Forget(table, ids[i], hash);
    }
    std::memcpy(aligned.data(), rows + i * size_t{n}, n);
    RowRecord(&delta.plus, spec, table, ids[i], reinterpret_cast<const uint8_t*>(aligned.data()),
              false);
    batch
        .Put(RowKey(table, ids[i]).slice(),
             rocksdb::Slice(reinterpret_cast<const char*>(rows + i * size_t{n}), n))
        .PermitUncheckedError();
    in_batch[ids[i]] = i;
    if (batch.GetDataSize() >= kFlushBatchBytes) {
      status = impl_->Write(&batch);
      in_batch.clear();
    }
  }
  if (status.ok()) status = impl_->Write(&batch);
  // A failed batch leaves rows unwritten that the delta counts: the sum is unknown then.
  if (!status.ok()) {
    MutexLock lock(&impl_->sum_mu);
    impl_->sum_known = false;
    return status;
  }
  impl_->MergeDelta(delta);
  return status;
}

// All stripes are locked at once (in stripe order, as LockWindow locks, so the two cannot
// deadlock) while the dirty rows are taken, so that every one goes to RocksDB in one key-ordered
// sequence: per stripe, each stripe's run would interleave with the others' in the memtable, and
// the flush took 2-3x the CPU (measured at 10^4 and 10^6 dirty rows). They are written with no
// stripe held, so reads go on (issue 21: the final eval's pulls waited seconds for the final
// restore point of a 10^8-row table); writes wait (write_gate), and the cache inserts and
// evicts nothing meanwhile (`frozen`), which keeps the rows taken where they are.
// The sum is written with the rows, so a RocksDB checkpoint (restore point, durable copy) holds
// the sum of exactly its rows. An unknown sum is written as no record (the reader then scans).
Status EmbeddingStore::FlushDirty(FlushTimes* times) NO_THREAD_SAFETY_ANALYSIS {
  Impl& d = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock gate(d.write_gate);
  const auto held = std::chrono::steady_clock::now();  // (waiting for writers holds no read)
  d.LockAllStripes();
  Impl::Taken taken;
  d.Take(0, d.stripes.size(), /*staged_only=*/false, &taken);
  const size_t rows = taken.rows.size();  // (writing them empties the vector)
  d.frozen.store(true, std::memory_order_relaxed);
  d.UnlockAllStripes();
  const auto t1 = std::chrono::steady_clock::now();
  if (d.options.while_flushing_for_test) d.options.while_flushing_for_test();
  Status written = d.WriteTaken(&taken, /*may_ingest=*/true);
  const auto t2 = std::chrono::steady_clock::now();
  d.LockAllStripes();
  d.frozen.store(false, std::memory_order_relaxed);
  Status s = d.EndFlush(0, d.stripes.size(), /*staged_only=*/false, &taken, std::move(written));
  if (s.ok()) {  // every stripe's stage is empty
    d.NoteStagePeak();
    d.staged_bytes.store(0, std::memory_order_relaxed);
  }
  // (Its rows were staged again by EndFlush when RocksDB refused them.)
  if (!d.options.read_only) d.NoteWrite(s);
  if (s.ok() && !d.options.read_only) {
    rocksdb::WriteBatch meta;
    {
      MutexLock lock(&d.sum_mu);
      d.FoldCleaned();
      const rocksdb::Slice key(kSumKey, sizeof(kSumKey) - 1);
      // An empty store keeps no record: it is known to sum to zero when opened.
      if (d.sum_known && (d.sum.rows != 0 || d.sum.counters != 0)) {
        meta.Put(key, EncodeSum(d.sum)).PermitUncheckedError();
      } else {
        meta.Delete(key).PermitUncheckedError();
      }
    }
    s = d.Write(&meta);
  }
  d.UnlockAllStripes();
  if (times != nullptr) {
    const auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    const auto t3 = std::chrono::steady_clock::now();
    times->rows = rows;
    times->flush_s = secs(t0, t3);
    times->reads_held_s = secs(held, t1) + secs(t2, t3);
  }
  return s;
}

// REQUIRES: no concurrent Update/Erase/SetAdmissionCount (restore points are taken after a fully
// applied step), or the checkpoint may hold part of them.
Status EmbeddingStore::CreateCheckpoint(const std::string& dir, uint64_t* change_seq,
                                        FlushTimes* times) {
  TANDEM_RETURN_IF_ERROR(FlushDirty(times));
  const auto flushed = std::chrono::steady_clock::now();
  // Cut before the checkpoint: a write between the two is in both, which a replay tolerates;
  // cut after, one could be in neither.
  if (impl_->changes != nullptr) {
    const uint64_t seq = impl_->changes->Cut();
    if (change_seq != nullptr) *change_seq = seq;
  }
  rocksdb::Checkpoint* raw = nullptr;
  TANDEM_RETURN_IF_ERROR(
      FromRocks(rocksdb::Checkpoint::Create(impl_->db.get(), &raw), "store: checkpoint"));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  // log_size_for_flush = 0 flushes the memtable first: with the WAL off it holds rows that
  // exist nowhere else on disk.
  Status made = FromRocks(checkpoint->CreateCheckpoint(dir, /*log_size_for_flush=*/0),
                          "store: checkpoint " + dir);
  if (times != nullptr)
    times->checkpoint_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - flushed).count();
  return made;
}

// Flushing first makes RocksDB hold every row's newest version, so one scan visits each once.
Status EmbeddingStore::ForEachRow(
    const std::function<void(uint32_t table, uint64_t id, const uint8_t* row)>& fn) {
  TANDEM_RETURN_IF_ERROR(FlushDirty());
  char end_bytes[4];
  PutBig32(end_bytes, kMetaPrefix);
  const rocksdb::Slice end(end_bytes, sizeof(end_bytes));
  std::vector<uint64_t> aligned;  // RocksDB values are not aligned for RowMeta's fields
  return impl_->Scan(
      rocksdb::Slice(), &end, [&](const rocksdb::Slice& key, const rocksdb::Slice& value) {
        const uint32_t table = static_cast<uint32_t>(GetBig(key.data(), 4));
        if (key.size() != kRowKeyBytes || table >= impl_->row_bytes.size() ||
            value.size() != impl_->row_bytes[table]) {
          return Status::DataLoss("store: malformed row entry in RocksDB");
        }
        aligned.resize((value.size() + 7) / 8);
        std::memcpy(aligned.data(), value.data(), value.size());
        fn(table, GetBig(key.data() + 4, 8), reinterpret_cast<const uint8_t*>(aligned.data()));
        return Status::Ok();
      });
}

Status EmbeddingStore::ForEachAdmissionCount(
    const std::function<void(uint32_t table, uint64_t id, uint64_t count)>& fn) {
  TANDEM_RETURN_IF_ERROR(FlushDirty());
  char begin_bytes[4];
  PutBig32(begin_bytes, kCounterPrefix);
  return impl_->Scan(rocksdb::Slice(begin_bytes, sizeof(begin_bytes)), nullptr,
                     [&](const rocksdb::Slice& key, const rocksdb::Slice& value) {
                       if (key.size() != kCounterKeyBytes || value.size() != 8) {
                         return Status::DataLoss("store: malformed admission counter");
                       }
                       fn(static_cast<uint32_t>(GetBig(key.data() + 4, 4)),
                          GetBig(key.data() + 8, 8), DecodeCount(value));
                       return Status::Ok();
                     });
}

Status EmbeddingStore::Checksum(ModelChecksum* sum, uint64_t* rows, uint64_t* counters,
                                bool* scanned) {
  if (scanned != nullptr) *scanned = false;
  if (impl_->SumWithDirtyRows(sum, rows, counters)) return Status::Ok();
  StoredSum scan;
  TANDEM_RETURN_IF_ERROR(ScanChecksum(&scan.sum, &scan.rows, &scan.counters));
  if (scanned != nullptr) *scanned = true;
  {
    MutexLock lock(&impl_->sum_mu);
    impl_->sum = scan;
    impl_->sum_known = true;
  }
  sum->Merge(scan.sum);
  if (rows != nullptr) *rows = scan.rows;
  if (counters != nullptr) *counters = scan.counters;
  return Status::Ok();
}

bool EmbeddingStore::checksum_known() const {
  MutexLock lock(&impl_->sum_mu);
  return impl_->sum_known;
}

Status EmbeddingStore::ScanChecksum(ModelChecksum* sum, uint64_t* rows, uint64_t* counters,
                                    const std::function<void(uint64_t rows)>& progress) {
  ModelChecksum part;
  uint64_t n = 0, c = 0;
  const std::vector<embedding::TableSpec>& tables = impl_->options.tables;
  TANDEM_RETURN_IF_ERROR(ForEachRow([&](uint32_t table, uint64_t id, const uint8_t* row) {
    RowRecord(&part, tables[table], table, id, row, false);
    if (++n % (1u << 20) == 0 && progress) progress(n);
  }));
  TANDEM_RETURN_IF_ERROR(ForEachAdmissionCount([&](uint32_t table, uint64_t id, uint64_t count) {
    part.AddAdmissionCounter(table, id, count);
    ++c;
  }));
  sum->Merge(part);
  if (rows != nullptr) *rows = n;
  if (counters != nullptr) *counters = c;
  return Status::Ok();
}

bool EmbeddingStore::compacting() const {
  return impl_->db != nullptr && !impl_->db->GetOptions().disable_auto_compactions;
}

bool EmbeddingStore::MissedStoredRows() const {
  return impl_->missed_stored.load(std::memory_order_relaxed);
}

void EmbeddingStore::StopCachingReads() {
  impl_->reads_skip_cache.store(true, std::memory_order_relaxed);
}

Status EmbeddingStore::StopCompactions() {
  if (impl_->db == nullptr || impl_->options.read_only) return Status::Ok();
  return FromRocks(impl_->db->SetOptions({{"disable_auto_compactions", "true"}}),
                   "store: stop compactions");
}

uint64_t EmbeddingStore::RocksIntProperty(const std::string& name) const {
  uint64_t v = 0;
  if (impl_->db == nullptr || !impl_->db->GetIntProperty(name, &v)) return 0;
  return v;
}

Status EmbeddingStore::WriteError(bool retry) {
  Impl& d = *impl_;
  if (!d.unwritable.load(std::memory_order_relaxed)) return Status::Ok();
  if (retry) d.DrainStaged(/*throttled=*/true).IgnoreError();
  MutexLock lock(&d.error_mu);
  return d.unwritable.load(std::memory_order_relaxed) ? d.write_error : Status::Ok();
}

StoreStats EmbeddingStore::stats() const {
  StoreStats total;
  for (const std::unique_ptr<Stripe>& s : impl_->stripes) {
    MutexLock lock(&s->mu);
    total.cached_rows += s->cache.rows();
    total.cache_bytes_used += s->cache.bytes_used();
    total.hits += s->hits;
    total.misses += s->misses;
    total.misses_known_absent += s->known_absent;
    total.rereads += s->rereads;
    total.evictions += s->cache.evictions();
    total.writebacks += s->cache.writebacks();
    total.written_ahead += s->cache.written_ahead();
    total.dirty_bytes += s->cache.dirty_bytes();
    total.staged_rows += s->staged.rows();
    total.staged_bytes += s->staged.bytes_used();
  }
  total.drains = impl_->drains.load(std::memory_order_relaxed);
  impl_->NoteStagePeak();  // the stage as it is now counts too
  total.staged_peak_bytes = impl_->staged_peak.load(std::memory_order_relaxed);
  {
    MutexLock lock(&impl_->error_mu);
    total.failed_writes = impl_->failed_writes;
  }
  return total;
}

ChangeLog* EmbeddingStore::change_log() { return impl_->changes.get(); }

// Opened read-write with the store's own options: the materialized part's SSTs are hard links
// into the durable pool, which RocksDB never writes to (its SSTs are immutable; compaction only
// unlinks them here). Writes skip the WAL and are flushed before the close.
Status ReplayChangeLogs(const std::string& db_dir, const std::vector<std::string>& logs) {
  rocksdb::Options options = RocksOptions();
  options.create_if_missing = false;
  options.info_log = std::make_shared<NullInfoLog>();
  options.disable_auto_compactions = true;  // one replay, then read: compaction can wait
  rocksdb::DB* raw = nullptr;
  TANDEM_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::Open(options, db_dir, &raw), "replay: open " + db_dir));
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  for (const std::string& path : logs) {
    TANDEM_RETURN_IF_ERROR(ForEachChangeRecord(path, [&](std::string&& rep) -> Status {
      rocksdb::WriteBatch batch(std::move(rep));
      return FromRocks(db->Write(wo, &batch), "replay " + path);
    }));
  }
  TANDEM_RETURN_IF_ERROR(FromRocks(db->Flush(rocksdb::FlushOptions()), "replay: flush " + db_dir));
  return FromRocks(db->Close(), "replay: close " + db_dir);
}

// SST and blob files are immutable, so they are hard-linked; the small rest (MANIFEST, CURRENT,
// OPTIONS, WAL) is copied, because RocksDB may write to those in place and a write through a
// link would alter the checkpoint.
Status RebuildLiveDb(const std::string& checkpoint_dir, const std::string& live_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(checkpoint_dir, ec)) {
    return Status::NotFound("rebuild: no checkpoint at " + checkpoint_dir);
  }
  std::error_code missing;  // a live dir that does not exist yet is fine
  if (fs::equivalent(checkpoint_dir, live_dir, missing)) {
    return Status::InvalidArgument("rebuild: live dir is the checkpoint " + checkpoint_dir);
  }
  fs::remove_all(live_dir, ec);
  if (!ec) fs::create_directories(live_dir, ec);
  if (ec) return Status::Internal("rebuild: reset " + live_dir + ": " + ec.message());
  fs::directory_iterator it(checkpoint_dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const fs::path from = it->path();
    const fs::path to = fs::path(live_dir) / from.filename();
    const std::string ext = from.extension().string();
    const bool immutable = ext == ".sst" || ext == ".blob";
    std::error_code link_ec;
    if (immutable) fs::create_hard_link(from, to, link_ec);
    // A link fails across file systems; then, as for mutable files, copy.
    if (!immutable || link_ec) fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  }
  if (ec)
    return Status::Internal("rebuild: " + checkpoint_dir + " -> " + live_dir + ": " + ec.message());
  return Status::Ok();
}

}  // namespace tandem::ps
