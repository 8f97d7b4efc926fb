// Every write the store makes to RocksDB, in order, cut into segments at restore points (issue
// 21: a final checkpoint that does not grow with the table). A checkpoint part may then be the
// previous full part plus the segments written since (durable_copy.h, "delta parts"): its cost
// follows what the job wrote since that part, where a copy of the restore point's new SSTs
// follows what compaction rewrote, which at 10^7 rows and more is most of the table.
//
// A segment is `<dir>/<16-digit seq>.log`, a sequence of records
//   u32 little-endian payload size | u32 little-endian CRC32C of the payload | payload,
// each payload one rocksdb::WriteBatch's representation (WriteBatch::Data()). Replaying the
// records of segments in order into a RocksDB that holds the state at the segments' start gives
// the state at their end: a write is appended only after RocksDB took it, under the lock that
// orders the writes of its keys, so the log's order of any one key's writes is RocksDB's. A
// write racing a cut may land in the segment after a restore point that already holds it;
// replaying it again changes nothing (a put or delete of the value the key already has).
//
// A segment also ends when it reaches `segment_bytes`, so that the shard can copy sealed
// segments to the durable copy while the job runs and the job's last part copies at most one.
//
// The log is a copy, not a source of truth: an append that fails (a full disk) marks the
// segment incomplete, the store goes on, and a part that would need that segment is copied in
// full instead.
//
// Segments are written with O_DIRECT where the file system takes it (CreateForCopy's rule): a
// table larger than its cache logs every written-back row, and fresh page-cache pages cost the
// kernel more than the copy itself (file_io.h). Whole blocks go out as the 1 MiB buffer fills;
// the last partial block is written zero-padded when the segment is sealed, and the file is then
// cut to its records' size, so a sealed segment holds exactly its records. Readers of a sealed
// segment see the same bytes either way (UploadSegment reads it direct, too).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/sync.h"
#include "server/ps/file_io.h"

namespace tandem::ps {

struct ChangeSegment {
  uint64_t seq = 0;
  std::string path;
  uint64_t size_bytes = 0;
  uint32_t crc32c = 0;    // of the whole file
  bool complete = false;  // every append while it was open was written
  bool sst = false;       // an SST of puts the log adopted (AdoptSst), not records
};

// Thread-safe.
class ChangeLog {
 public:
  static constexpr uint64_t kDefaultSegmentBytes = 64ull << 20;

  // Opens the log at `dir`, created if absent. Segments a previous process left are deleted:
  // a new process has no part to be a delta of.
  static StatusOr<std::unique_ptr<ChangeLog>> Open(const std::string& dir,
                                                   uint64_t segment_bytes = kDefaultSegmentBytes);
  ~ChangeLog();

  // Appends one WriteBatch representation to the open segment (created on first use). Buffered;
  // errors only mark the segment incomplete.
  void Append(std::string_view batch_rep);

  // Makes the SST at `sst_path` (puts in key order, as rocksdb::SstFileWriter writes them,
  // `crc32c` of the whole file) a segment of its own, after every append before the call and
  // before every later one, by moving the file into the log: a flush that RocksDB ingested as
  // an SST is logged without writing its rows again. False when the file cannot be moved there
  // (another file system); it is then left where it was, and the caller appends the rows.
  bool AdoptSst(const std::string& sst_path, uint64_t size_bytes, uint32_t crc32c);

  // Seals the open segment: every append before the call is in a sealed segment numbered at or
  // below the returned seq, every later one in a higher one. An empty segment leaves no file.
  uint64_t Cut();

  // The sealed segments numbered in (after, through], in order.
  std::vector<ChangeSegment> Sealed(uint64_t after, uint64_t through) const;

  // Deletes the sealed segments numbered at or below `seq`.
  void DropThrough(uint64_t seq);
  // Takes the sealed segments numbered at or below `seq` out of the log and returns their
  // paths, for the caller to delete where waiting on it costs nothing: freeing GBs of segments
  // takes seconds.
  std::vector<std::string> DetachThrough(uint64_t seq);

  ChangeLog(const ChangeLog&) = delete;
  ChangeLog& operator=(const ChangeLog&) = delete;

 private:
  ChangeLog(std::string dir, uint64_t segment_bytes);
  // Writes the buffer's whole blocks (every byte when `all`, the last block zero-padded when
  // direct) and keeps the rest at the buffer's front.
  void FlushBufferLocked(bool all) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseOpenLocked() EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const uint64_t segment_bytes_;
  mutable Mutex mu_;
  uint64_t seq_ GUARDED_BY(mu_) = 1;      // of the open segment
  int fd_ GUARDED_BY(mu_) = -1;           // the open segment's file, or -1 before its first append
  bool direct_ GUARDED_BY(mu_) = false;   // fd_ has O_DIRECT
  uint64_t written_ GUARDED_BY(mu_) = 0;  // bytes of the open segment in its file
  ChangeSegment open_ GUARDED_BY(mu_);
  AlignedBytes buffer_ GUARDED_BY(mu_);  // kBufferBytes, aligned for direct writes
  size_t used_ GUARDED_BY(mu_) = 0;
  std::vector<ChangeSegment> sealed_ GUARDED_BY(mu_);
};

// Reads the records of the segment at `path` in order, giving each WriteBatch representation to
// `fn` (which may stop the walk with an error). kDataLoss when a record is torn or fails its
// CRC; errors of `fn` are returned as they are. A segment the log adopted as an SST (its name
// ends in ".sst") is given as WriteBatches of its puts in key order, about 4 MiB each, so that
// every reader replays both kinds alike.
Status ForEachChangeRecord(const std::string& path,
                           const std::function<Status(std::string&& batch_rep)>& fn);

}  // namespace tandem::ps
