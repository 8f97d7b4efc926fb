// The shard's push log (PROTOCOLS §6): every push is appended here before it is acknowledged,
// so an acknowledged push survives a crash (kill -9 in `process` mode; power loss too in
// `machine` mode) and a recovered shard replays it exactly once, in log order.
//
// Record = {u32 length, u32 crc32c, payload}; the CRC covers the payload; `length` is the
// payload's byte count. Payload (little-endian): u64 lsn, u64 timeline, i64 step, u32 rank,
// u32 shard, u64 sender incarnation, u32 flags, u32 table count, then per table: u32 table id,
// u32 row count, u32 dim, u32 dtype (0 = f32), ids (count x u64), gradients (count x dim x f32).
// Segments are files `<dir>/<first lsn, 20 digits>.log`; a new segment starts at Roll().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

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
  uint32_t flags = 0;  // bit 0: skip push (fp16 overflow, PROTOCOLS §2.7)
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
  // kResourceExhausted on ENOSPC (nothing is left half-written; the caller must refuse the push).
  Status Append(PushHeader* header, std::span<const PushTableView> tables);

  // Calls fn for every record with lsn > after_lsn, in LSN order. Stops at fn's first error.
  Status Replay(uint64_t after_lsn, const std::function<Status(const PushRecord&)>& fn) const;

  // Starts a new segment: the next record's LSN begins it (taken with each restore point).
  Status Roll();
  // Deletes whole segments all of whose records have lsn <= `lsn` (behind a committed checkpoint).
  Status DeleteThrough(uint64_t lsn);

  uint64_t last_lsn() const;     // 0 if empty
  uint64_t total_bytes() const;  // all segments
  bool alarm() const;            // total_bytes() > max_bytes
};

}  // namespace tandem::ps
