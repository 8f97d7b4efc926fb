// The shard's rows (DESIGN §3): every row of every table lives in one RocksDB instance; a
// bounded in-memory cache of hot rows sits in front of it. Cached rows live in slab memory (one
// slab class per table, rows of table.row_bytes()), found through an open-addressing index, so
// there is no heap allocation per row. Dirty rows are written back in batches when evicted;
// misses are read with batched MultiGet. With `memory_only` (ps.storage: memory) nothing is
// evicted and RocksDB only receives rows at FlushDirty (restore points and checkpoints).
//
// RocksDB key: 4-byte big-endian table id + 8-byte big-endian id (12 bytes); value: the row
// bytes exactly as RowRef lays them out. Admission counters (ids seen but not yet admitted) are
// stored under the key prefix 0xFFFFFFFF + table (4 B) + id (8 B), value u64 count. The store's
// part of model_checksum is kept up to date by every change and stored under 0xFFFFFFFE "sum"
// with each flush, so a RocksDB checkpoint carries the sum of its rows (issue 21: nothing at
// the end of a job scans the table).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/embedding/table_spec.h"
#include "common/model_checksum.h"
#include "common/status.h"

namespace tandem::ps {

class ChangeLog;

struct StoreOptions {
  std::string db_dir;                        // the live RocksDB directory
  std::vector<embedding::TableSpec> tables;  // indexed by table_id (0..n-1)
  uint64_t seed = 1;                         // for initial values of absent rows
  uint64_t cache_bytes = 256ull << 20;       // bound on cached row bytes (+ index)
  bool memory_only = false;                  // ps.storage: memory
  int stripes = 64;                          // lock stripes (by key hash), so no global lock
  // Opens an existing RocksDB read-only (RocksDB's OpenForReadOnly): nothing is written into
  // db_dir, so a directory whose SSTs are hard links into a checkpoint's durable copy can be
  // read safely. Every writing call then fails (kInvalidArgument from RocksDB).
  bool read_only = false;
  // Where the store logs every write it makes to RocksDB (change_log.h), for checkpoint parts
  // that are a previous part plus what was written since. Empty: no log.
  std::string change_log_dir;
  uint64_t change_log_segment_bytes = 64ull << 20;
  // Evicted dirty rows wait in memory until the stripes together hold this many bytes, then go
  // to RocksDB in one key-ordered pass (the memtable inserts keys in order at half the CPU of
  // random ones). Memory beyond cache_bytes: this, plus one lock window's evictions (about 512
  // rows) per thread applying, plus one stripe's dirty rows written ahead (max_dirty_bytes:
  // no write-ahead starts while the stage is full). A stripe keeps the memory of its share
  // between drains; more is freed at the drain.
  uint64_t stage_bytes = 8ull << 20;
  // A flush of dirty rows (restore points, checkpoints) of at least this many bytes is written as
  // one sorted SST and ingested, not put through the memtable: with the whole table in the cache
  // a restore point writes most of it, and more than a memtable's worth (16 MiB) would fill
  // RocksDB's two memtables and wait for it to flush them (a flush of 0.35 M rows of 144 B, 50
  // MiB, took 2.1-3.1 s through the memtable at the end of a job, issue 21). Memory beyond
  // cache_bytes while it is written: one SST writer's bloom filter, index and block (about 2 %
  // of ingest_piece_bytes).
  uint64_t ingest_bytes = 16ull << 20;
  // Such a flush is cut into SSTs of about this many row bytes, each ingested and handed to the
  // change log in turn, so that the shard copies one (like a sealed log segment) while the next
  // is written.
  uint64_t ingest_piece_bytes = 64ull << 20;
  // Once a stripe of the cache is full (it has evicted), its dirty rows are written back ahead
  // of eviction whenever they exceed this bound's share (max_dirty_bytes / stripes), and stay
  // cached, clean. A flush (restore point, the job's last checkpoint) then writes at most this
  // much plus the stage, whatever the size of the cache or the table. A cache that never fills
  // is left alone: its rows are written by the flushes alone, once per restore point however
  // often they change. 0 = no bound.
  uint64_t max_dirty_bytes = 0;
  // Tests only: called by FlushDirty once it took the rows, with no stripe held, before it
  // writes them.
  std::function<void()> while_flushing_for_test;
};

// How a flush went (FlushDirty, CreateCheckpoint).
struct FlushTimes {
  uint64_t rows = 0;        // dirty and staged rows written
  double flush_s = 0;       // FlushDirty, all of it
  double reads_held_s = 0;  // the part of it reads waited for (every stripe held)
  double checkpoint_s = 0;  // CreateCheckpoint: the RocksDB checkpoint after the flush
};

struct StoreStats {
  uint64_t cached_rows = 0;
  uint64_t cache_bytes_used = 0;  // slabs + index
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t misses_known_absent = 0;  // misses answered by AbsentKeys, without RocksDB
  // Misses whose MultiGet value could have changed before the row was cached, read again alone.
  uint64_t rereads = 0;
  uint64_t evictions = 0;
  uint64_t writebacks = 0;
  uint64_t written_ahead = 0;      // dirty rows written back to keep within max_dirty_bytes
  uint64_t dirty_bytes = 0;        // row bytes of the cached dirty rows
  uint64_t staged_rows = 0;        // evicted dirty rows not yet written to RocksDB
  uint64_t staged_bytes = 0;       // memory the stage holds (kept between drains)
  uint64_t staged_peak_bytes = 0;  // the most row bytes the stage has held at once
  uint64_t drains = 0;             // key-ordered writes of the staged rows
  uint64_t failed_writes = 0;      // drains and flushes RocksDB refused (WriteError)
};

// Safe for concurrent use. Calls on different stripes run in parallel; rows of one stripe are
// serialized. A stripe is chosen by a 64-bit hash of (table, id), not by SlotOf: a shard holds
// only the slots s with s % num_shards == shard, so SlotOf % stripes would leave stripes (and
// their share of cache_bytes) unused whenever num_shards and stripes share a factor.
class EmbeddingStore {
 public:
  static StatusOr<std::unique_ptr<EmbeddingStore>> Open(const StoreOptions& options);
  ~EmbeddingStore();

  // Copies the embeddings of ids (of `table`) into out[i * dim ...]: the stored row, or the
  // initial value for an absent row. Never changes stored state (it may fill the cache).
  Status Read(uint32_t table, std::span<const uint64_t> ids, float* out);

  // Reads whole rows (meta + embedding + state) into out[i * row_bytes ...]; `present[i]` says
  // whether the row is stored (absent rows are filled with InitialRow).
  Status ReadRows(uint32_t table, std::span<const uint64_t> ids, uint8_t* out,
                  std::vector<bool>* present);

  // The apply path: for each id, gives `fn` the row (materialised as InitialRow if absent, which
  // `existed` says) to modify in place; the row is then stored (dirty in the cache). fn is called
  // in the order of ids.
  using RowFn = std::function<void(size_t index, embedding::RowRef row, bool existed)>;
  Status Update(uint32_t table, std::span<const uint64_t> ids, const RowFn& fn);
  // Update for distinct ids, calling fn in an unspecified order (ids grouped by lock stripe), so
  // that concurrent calls for different tables rarely wait for each other's stripes.
  // REQUIRES: no id appears twice in ids.
  Status UpdateDistinct(uint32_t table, std::span<const uint64_t> ids, const RowFn& fn);

  // Removes rows (TTL garbage collection, rollback of a materialisation).
  Status Erase(uint32_t table, std::span<const uint64_t> ids);

  // Admission counters (PROTOCOLS §4): get and set per id.
  StatusOr<uint64_t> AdmissionCount(uint32_t table, uint64_t id);
  Status SetAdmissionCount(uint32_t table, uint64_t id, uint64_t count);  // 0 erases

  // Bulk load (restoring a shard from a checkpoint): writes whole rows (meta + embedding +
  // state, row_bytes each, as ForEachRow gives them) for ids straight to RocksDB, replacing any
  // stored row; cached copies of these ids are dropped so the cache never shadows them.
  // REQUIRES: no concurrent call touches these ids.
  Status WriteRows(uint32_t table, std::span<const uint64_t> ids, const uint8_t* rows);

  // Writes every dirty cached row (and counter) to RocksDB, in key order; rows stay cached,
  // clean. Reads wait only while the rows are taken (every stripe held) and at the end; they are
  // served while the rows are written, without filling the cache. Writing calls (Update,
  // UpdateDistinct, Erase, WriteRows, SetAdmissionCount) wait for the whole flush.
  // `times` (may be null) gets how long it took and how long of it reads waited.
  Status FlushDirty(FlushTimes* times = nullptr);
  // FlushDirty, then a RocksDB checkpoint (hard links; the memtable is flushed first) in
  // `dir`, which must not exist. With a change log, `change_seq` (may be null) gets the segment
  // the log was cut at: the checkpoint holds every write of segments up to it. Reads go on
  // during both but for FlushDirty's short holds.
  Status CreateCheckpoint(const std::string& dir, uint64_t* change_seq = nullptr,
                          FlushTimes* times = nullptr);
  // The change log (null without StoreOptions::change_log_dir).
  ChangeLog* change_log();

  // Visits every stored row (cache and RocksDB, each row once, newest version), and every
  // admission counter, in unspecified order. For checksums, tests and export.
  Status ForEachRow(const std::function<void(uint32_t table, uint64_t id, const uint8_t* row)>& fn);
  Status ForEachAdmissionCount(
      const std::function<void(uint32_t table, uint64_t id, uint64_t count)>& fn);

  // Adds the store's part of model_checksum (DESIGN §12: every stored row and admission
  // counter) to `sum`, without a scan: the store keeps it up to date through every change and
  // persists it with each flush. The records of rows changed since the last flush (dirty in
  // the cache) are hashed here, so this visits at most the cache, never the table; the stores
  // of a finished job were flushed by its final checkpoint. A store written before the sum was
  // kept is scanned once
  // (`scanned` says so). `rows` / `counters` (may be null) get the stored row / counter counts.
  // Exact when no change runs concurrently (the shard holds its applies off). A change merges
  // its part of the sum when the call ends, so FlushDirty / CreateCheckpoint write a sum that
  // matches the rows only when no Update, Erase, WriteRows or SetAdmissionCount is in flight
  // (the shard calls them under its apply mutex).
  Status Checksum(ModelChecksum* sum, uint64_t* rows = nullptr, uint64_t* counters = nullptr,
                  bool* scanned = nullptr);
  bool checksum_known() const;
  // The same sum computed by visiting every row and counter (`tandem checksum --verify`, tests);
  // `progress` (may be empty) is called every 2^20 rows with the rows visited so far.
  Status ScanChecksum(ModelChecksum* sum, uint64_t* rows = nullptr, uint64_t* counters = nullptr,
                      const std::function<void(uint64_t rows)>& progress = {});

  StoreStats stats() const;
  // Ok, or why RocksDB refused the rows written to it (a full disk: the first error since it last
  // took them, as later retries mostly meet RocksDB recovering from it). The rows a failed write
  // could not store stay in memory, staged, and every read and write goes on from there: a
  // failed write never fails the call that set it off (a push half applied is not an answer),
  // and is tried again at most once a second. `retry`: try it now, subject to that bound (after
  // RocksDB's Resume, which a hard background error needs), and report what is known after.
  // While it fails the stage grows by what the cache evicts, at most the dirty rows the cache
  // held plus those of the calls made meanwhile: the shard refuses pushes (issue 21).
  Status WriteError(bool retry);
  // A RocksDB integer property ("rocksdb.estimate-num-keys", ...); 0 when it has none.
  uint64_t RocksIntProperty(const std::string& name) const;
  // Whether RocksDB schedules compactions (false after StopCompactions).
  bool compacting() const;

  // Schedules no more compactions; running ones finish. For the end of a job: nothing but the
  // final restore point writes after the last step, every later read is read once, and a
  // compaction then only makes new SSTs that the reads must open (and the old ones' readers
  // torn down) while it takes CPU and page cache from them. RocksDB's L0 and pending-bytes write
  // stalls do not apply without compactions, so no write waits for one; a later open compacts.
  Status StopCompactions();
  // From now on a read that misses is served from the stage or RocksDB without caching the row,
  // so it neither evicts nor inserts (as during a flush's writes). For the end of a job too: the
  // final evaluation reads each row once, so caching it only costs an insert and an eviction.
  // Writes still cache what they touch.
  void StopCachingReads();
  // Whether a miss has found its row stored (in RocksDB or the stage) since Open: until then
  // every row this store holds is cached, and a miss is an absent row. Only ever turns true.
  bool MissedStoredRows() const;

  EmbeddingStore(const EmbeddingStore&) = delete;
  EmbeddingStore& operator=(const EmbeddingStore&) = delete;

 private:
  struct Impl;  // RocksDB and the striped caches stay out of this header
  explicit EmbeddingStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Replays the change log segments at `logs`, in order, into the RocksDB at `db_dir` (a
// materialized checkpoint part), then flushes it. kDataLoss when a segment is damaged.
Status ReplayChangeLogs(const std::string& db_dir, const std::vector<std::string>& logs);

// Replaces `live_dir` with a copy of the checkpoint at `checkpoint_dir` made of hard links
// (falling back to copies across file systems). The checkpoint itself is left untouched.
Status RebuildLiveDb(const std::string& checkpoint_dir, const std::string& live_dir);

}  // namespace tandem::ps
