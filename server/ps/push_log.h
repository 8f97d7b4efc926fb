// The shard's push log (PROTOCOLS §6): every push is appended here before it is acknowledged,
// so an acknowledged push survives a crash (kill -9 in `process` mode; power loss too in
// `machine` mode) and a recovered shard replays it exactly once, in log order.
//
// Record = {u32 length, u32 crc32c, payload}; the CRC covers the payload; `length` is the
// payload's byte count. Payload (little-endian): u64 lsn, u64 timeline, i64 step, u32 rank,
// u32 shard, u64 sender incarnation, u32 flags, u32 table count, then per table: u32 table id,
// u32 row count, u32 dim, u32 dtype (0 = f32), ids (count x u64), gradients (count x dim x f32).
// Segments are files `<dir>/<first lsn, 20 digits>.log`; a new segment starts at Roll().
//
// Appends use O_DIRECT where the file system takes it (PushLogOptions::direct_io): a buffered
// write copies every byte into freshly allocated page-cache pages, which cost more CPU than the
// whole rest of a push on small machines (2.6 s of kernel time per GiB on the 2-core benchmark
// VM, against 0.06 s direct). Records are copied into an aligned chunk and written in whole
// 4 KiB blocks, so the open segment may end in zero padding up to the next block; Open and Roll
// cut it, and a scan takes an all-zero remainder shorter than a block for padding, not damage.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/sync.h"
#include "server/ps/file_io.h"

namespace tandem::ps {

enum class Durability { kProcess, kMachine };

// One table's rows of a push, as views (Append copies nothing into the record structs).
struct PushTableView {
  uint32_t table_id = 0;
  uint32_t dim = 0;
  std::span<const uint64_t> ids;
  std::span<const float> grads;  // ids.size() * dim
};

struct PushHeader {
  uint64_t lsn = 0;  // assigned by Append
  uint64_t timeline = 0;
  int64_t step = 0;
  uint32_t rank = 0;
  uint32_t shard = 0;
  uint64_t incarnation = 0;
  uint32_t flags = 0;  // bit 0: skip push (fp16 overflow, PROTOCOLS §2.7); bit 1: checkpoint cut
};

// A record read back by Replay (owns its data).
struct PushTable {
  uint32_t table_id = 0;
  uint32_t dim = 0;
  std::vector<uint64_t> ids;
  std::vector<float> grads;
};
struct PushRecord {
  PushHeader header;
  std::vector<PushTable> tables;
};

struct PushLogOptions {
  std::string dir;
  Durability durability = Durability::kProcess;
  std::chrono::milliseconds group{10};  // machine mode: fdatasync at most this often
  uint64_t max_bytes = 16ull << 30;     // beyond this, alarm() turns true (pushes still accepted)
  // Write with O_DIRECT (`ps.push_log.io: direct`); falls back to buffered writes where the
  // file system refuses O_DIRECT (EINVAL at open, or from a 4 KiB-aligned write).
  bool direct_io = true;

  // Tests only: replaces the record writes, to inject ENOSPC or short writes. Must behave like
  // pwritev(2) with `offset` >= 0 (direct I/O) and like writev(2) with offset -1 (buffered
  // appends): return bytes written, or -1 with errno set. Empty = the real calls.
  PwritevFn write_for_test;
};

// Safe for concurrent use: Append may be called from many threads; records are written in LSN
// order.
class PushLog {
 public:
  // Opens (creating `dir` if needed) and scans every segment: a torn tail (short or bad-CRC last
  // record(s) at the end of the newest segment) is truncated; a bad record followed by a good one
  // is kDataLoss (the shard must not start). The next LSN follows the last good record.
  static StatusOr<std::unique_ptr<PushLog>> Open(const PushLogOptions& options);
  ~PushLog();

  // Assigns the next LSN to `header->lsn`, writes the record and returns once it is durable as
  // the options say (process: after write(2); machine: after the fdatasync that covers it).
  // kResourceExhausted on ENOSPC, EDQUOT or EFBIG (nothing is left half-written; the caller must
  // refuse the push).
  // kUnavailable on other I/O errors, kInvalidArgument if grads.size() != ids.size() * dim or
  // the record exceeds 1 GiB, kFailedPrecondition once an earlier failed fdatasync has made the
  // log unusable until it is reopened.
  Status Append(PushHeader* header, std::span<const PushTableView> tables);
  // Lets a caller work beside the next Append (the shard applies a k = 0 step while its record is
  // written): allocates the blocks that Append's direct write of `tables` will cover in the open
  // segment, so that a full disk or the file size limit fails here, as Append would, and not
  // after the caller has gone on. Returns the LSN that Append will take.
  // REQUIRES: the caller serializes Reserve and the Append that follows it with every other Append.
  // kUnimplemented where nothing can be reserved (buffered writes, a file system without
  // fallocate): the caller writes first; kResourceExhausted and the others as Append.
  StatusOr<uint64_t> Reserve(std::span<const PushTableView> tables);

  // Calls fn for every record with lsn > after_lsn, in LSN order. Stops at fn's first error.
  // kOutOfRange if some of those records were already deleted (DeleteThrough).
  Status Replay(uint64_t after_lsn, const std::function<Status(const PushRecord&)>& fn) const;

  // Starts a new segment: the next record's LSN begins it (taken with each restore point). The
  // new file is created at once, so its name keeps the next LSN even if every older segment is
  // deleted; a no-op when the open segment is still empty.
  Status Roll();
  // Deletes whole segments all of whose records have lsn <= `lsn` (behind a committed checkpoint),
  // oldest first; never the open (newest) segment.
  Status DeleteThrough(uint64_t lsn);

  uint64_t last_lsn() const;     // 0 if empty
  uint64_t total_bytes() const;  // all segments
  bool alarm() const;            // total_bytes() > max_bytes
  uint64_t sync_count() const;   // fdatasync calls made for group commit so far (tests, metrics)
  bool direct_io() const;        // the open segment is written with O_DIRECT

  PushLog(const PushLog&) = delete;
  PushLog& operator=(const PushLog&) = delete;

 private:
  class ScopedFd;
  // One segment file. An empty segment has last_lsn == first_lsn - 1.
  struct Segment {
    std::string path;
    uint64_t first_lsn = 0;
    uint64_t last_lsn = 0;
    // Valid bytes: the file's size, but for zero padding to the next block while it is open
    // for direct appends.
    uint64_t bytes = 0;
  };

  explicit PushLog(const PushLogOptions& options);
  Status Recover(std::vector<Segment> segments);
  Status ScanAndRepair(Segment* segment, bool newest);
  Status OpenNewestForAppend() EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status CreateSegmentLocked(uint64_t first_lsn) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status OpenForAppendLocked(const std::string& path, bool create) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status WriteRecordLocked(std::vector<iovec>* iov, uint64_t lsn, uint64_t record_bytes)
      EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status WriteAll(int fd, std::vector<iovec>* iov) const;
  Status WriteDirectLocked(int fd, const std::vector<iovec>& iov, uint64_t start, int* failed_errno)
      EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status WaitSyncedLocked(uint64_t lsn) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status BrokenLocked() const EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushLoop();

  const PushLogOptions options_;
  mutable Mutex mu_;
  CondVar flush_cv_{&mu_};   // wakes the flusher: a record was written, or stop_
  CondVar synced_cv_{&mu_};  // wakes machine-mode appenders: synced_lsn_ or broken_ changed
  // In LSN order; never empty after Open; back() is the open segment that Append writes to.
  std::vector<Segment> segments_ GUARDED_BY(mu_);
  // Shared so that the flusher can fdatasync it outside mu_ while Roll swaps in a new one.
  std::shared_ptr<ScopedFd> current_ GUARDED_BY(mu_);
  uint64_t last_lsn_ GUARDED_BY(mu_) = 0;
  uint64_t synced_lsn_ GUARDED_BY(mu_) = 0;  // machine mode: every lsn <= this is on disk
  uint64_t total_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t sync_count_ GUARDED_BY(mu_) = 0;
  // Set when the file may no longer match the index (failed fdatasync or failed rollback of a
  // failed write); Append and Roll then refuse until the log is reopened.
  Status broken_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  // Direct appends: current_ was opened with O_DIRECT; records pass through chunk_; tail_ holds
  // the open segment's bytes after its last whole block (they are written again with the next
  // record, as the start of its first block).
  bool direct_ GUARDED_BY(mu_) = false;
  // A direct write failed with EINVAL (an alignment above 4 KiB): buffered from then on.
  bool direct_refused_ GUARDED_BY(mu_) = false;
  bool fallocate_refused_ GUARDED_BY(mu_) = false;  // the file system lacks fallocate(2)
  AlignedBytes chunk_ GUARDED_BY(mu_);
  AlignedBytes tail_ GUARDED_BY(mu_);
  Mutex delete_mu_;      // serializes DeleteThrough so that segments are unlinked oldest first
  std::thread flusher_;  // machine mode only
};

}  // namespace tandem::ps
