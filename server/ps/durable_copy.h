// A shard's part of a checkpoint in the durable copy (PROTOCOLS §7): the files of one RocksDB
// restore point copied under `checkpoint.dir/shards/shard-<i>/`, incrementally and with the
// checksums computed once, when each file was made.
//
// Layout under a shard's durable root:
//   sst/<number>-<crc32c hex>.sst   a pool of SSTs shared by every step. SSTs are immutable, so
//                                   a step copies only the ones the pool lacks and the cost
//                                   follows what changed. The CRC in the name keeps apart two
//                                   SSTs that share a number but not content (RocksDB numbers
//                                   files again from a restored MANIFEST, so an abandoned
//                                   timeline may have used the same number).
//   step-<12-digit step>/           the rest of the restore point (CURRENT, MANIFEST-*, OPTIONS-*,
//                                   WAL files), copied whole each step (they are small), or
//                                   hard-linked to the previous part's file when identical.
//   log/<16-digit seq>-<crc>.log    change log segments (change_log.h) of delta parts.
//
// A part is full (the restore point's files) or a delta: the files of an earlier full part of
// the same process (its `base_step`) and the change log segments written from that part's
// restore point to this one's, replayed in order on top of it. A delta's cost follows what the
// job wrote since its base; a full part's, what compaction rewrote since the previous part,
// which for a table of 10^7 rows and more is most of it (issue 21). A restore, a read or a
// re-partition of a delta part materializes it (MaterializePart), which replays its segments.
//
// Every new file is written tmp + fsync + rename, and its directory fsynced, in phases over all
// of a part's files (all written, then all fsynced, then all renamed, then each directory
// fsynced once), so a visible file is always complete. Checksums are CRC32C of
// the whole file: RocksDB's own file checksum for SSTs (file_checksum_gen_factory), computed by
// us while copying for the other files, and taken from the previous part for files shared with
// it, so a checkpoint reads only what it copies.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "server/ps/change_log.h"

namespace tandem::ps {

// One file of a part. Value type.
struct CheckpointFile {
  std::string path;     // relative to the durable root: "sst/..." or "step-.../..."
  std::string db_name;  // its name in a RocksDB directory ("000012.sst", "CURRENT")
  uint64_t size_bytes = 0;
  uint32_t crc32c = 0;  // CRC32C of the whole content
  bool is_sst = false;  // lives in the shared pool
  bool is_log = false;  // a change log segment (under log/), replayed, never opened by RocksDB

  friend bool operator==(const CheckpointFile&, const CheckpointFile&) = default;
};

// What one shard contributes to the checkpoint at `step`: the files a restore needs, as the
// chief records them in the manifest. Value type.
struct CheckpointPart {
  uint32_t shard = 0;
  int64_t step = 0;
  std::vector<CheckpointFile> files;  // sorted by path (so segments are in log order)
  // A delta part: the step of the full part whose files it lists with its segments; -1: full.
  int64_t base_step = -1;
  // A delta part: the files of its own restore point (db_name, size, CRC32C; no path, none is
  // in the durable copy), so that a resume on the same shard can check and use that local
  // restore point instead of replaying the segments.
  std::vector<CheckpointFile> local_files;
  // Cost of the copy that made this part (not needed to restore it).
  uint64_t bytes_copied = 0;
  uint64_t files_copied = 0;

  friend bool operator==(const CheckpointPart&, const CheckpointPart&) = default;
};

// "step-000000000042".
std::string StepDirName(int64_t step);

// How far a CopyToDurable has got, read by other threads (a part request asked again while its
// copy runs answers with it), and a way to stop it between two files.
struct CopyProgress {
  std::atomic<uint64_t> bytes_done{0};   // of the restore point's files, copied or found held
  std::atomic<uint64_t> bytes_total{0};  // every file of the restore point
  std::atomic<bool> cancel{false};       // set: the copy ends with kCancelled at the next file
};

// Copies the restore point at `restore_point_dir` (a RocksDB checkpoint; left unchanged) into
// the durable copy at `durable_root` (created if absent). An SST already in the pool is not
// copied again: when `previous` (the last part copied to this root, or null) lists it with the
// same size and checksum its presence and size are checked; otherwise an existing pool file is
// re-read and its CRC32C checked before it is reused. Returns the new part.
// Errors: kDataLoss when a file of the restore point does not match the checksum RocksDB
// recorded for it (the restore point is corrupt); kResourceExhausted on ENOSPC; kUnavailable
// on other I/O errors; kNotFound when there is no restore point.
// `progress` (may be null) is updated after every file; its `cancel` stops the copy
// (kCancelled; nothing of it is named by a part).
// REQUIRES: no other CopyToDurable or CollectGarbage on `durable_root` runs concurrently.
// Thread-safe otherwise (no shared state).
StatusOr<CheckpointPart> CopyToDurable(const std::string& restore_point_dir,
                                       const std::string& durable_root, uint32_t shard,
                                       int64_t step, const CheckpointPart* previous,
                                       CopyProgress* progress = nullptr);

// Makes the delta part of `step`: the files of `base` (a full part in `durable_root`) and the
// change log `segments` (their local files, in order) copied under log/, written and committed
// as CopyToDurable's files are; `local_files` describe the restore point at
// `restore_point_dir` (the state the part stands for), read but not copied. kInvalidArgument
// when `base` is not a full part or a segment is incomplete; I/O errors as CopyToDurable.
StatusOr<CheckpointPart> CopyDeltaToDurable(const std::string& restore_point_dir,
                                            const CheckpointPart& base,
                                            const std::vector<ChangeSegment>& segments,
                                            const std::string& durable_root, uint32_t shard,
                                            int64_t step, CopyProgress* progress = nullptr);

// Copies the sealed, complete change log segment `segment` under log/ in `durable_root` (as
// CopyDeltaToDurable names it), unless a file of its size is there: written, fsynced, renamed
// and its directory fsynced, so that a delta part made later need not copy it. Returns the
// bytes copied. kInvalidArgument for an incomplete segment; I/O errors as CopyToDurable.
StatusOr<uint64_t> UploadSegment(const ChangeSegment& segment, const std::string& durable_root);

// Checks that every file of `part` is present under `durable_root` with its recorded size and,
// with `full`, re-reads it and checks its CRC32C, except files listed identically in
// `verified` (a part whose files were already checked, or null). kDataLoss naming the first
// bad file; kUnavailable on I/O errors other than a missing file.
Status VerifyPart(const std::string& durable_root, const CheckpointPart& part, bool full,
                  const CheckpointPart* verified = nullptr);

// Builds at `out_dir` (which must not exist) a directory RocksDB can open holding exactly the
// part: hard links to the pool's SSTs (copies across file systems) and copies of the other
// files, under their RocksDB names; for a delta part, its segments are then replayed into it
// (ReplayChangeLogs; kDataLoss when one is damaged). Checks presence and sizes, not checksums
// (VerifyPart does). The result is input for RebuildLiveDb; it is not fsynced (a crash means
// building it again). kAlreadyExists if out_dir exists; kDataLoss when a file is missing or has the
// wrong size.
Status MaterializePart(const std::string& durable_root, const CheckpointPart& part,
                       const std::string& out_dir);

// Deletes the step directories and pool SSTs that no part of `retained` references, and
// leftover temporary files. Files the layout does not name are left alone.
// REQUIRES: no CopyToDurable into `durable_root` runs concurrently (its files are not retained
// yet and would be deleted).
Status CollectGarbage(const std::string& durable_root, const std::vector<CheckpointPart>& retained);

// The CRC32C of a whole SST as RocksDB recorded it (file_checksum_gen_factory, or an
// SstFileWriter's ExternalSstFileInfo): `func_name` "FileChecksumCrc32c" and 4 big-endian bytes
// of the unmasked CRC. nullopt for anything else (a file written without the factory).
std::optional<uint32_t> RocksFileCrc32c(std::string_view func_name, std::string_view checksum);

// JSON for the manifest: {"shard", "step", "files": [{"path", "db_name", "size", "crc32c"
// (8 lower-case hex digits), "sst", "log" (only when true)}], "bytes_copied", "files_copied",
// "base_step" and "local_files": [{"db_name", "size", "crc32c", "sst"}] (only for a delta part)}.
nlohmann::json CheckpointPartToJson(const CheckpointPart& part);
// kInvalidArgument naming the field when `json` is not such an object.
StatusOr<CheckpointPart> CheckpointPartFromJson(const nlohmann::json& json);

}  // namespace tandem::ps
