// Prepares a closed shard data directory for resuming a job from a committed checkpoint
// (PROTOCOLS §7 "Resume", issue 6): after PrepareShardForResume, Shard::Open recovers exactly
// the checkpoint's rows (applied step == the checkpoint step). Three ways to get there:
//   - the directory holds a restore point at the checkpoint step: its files are checked against
//     the manifest's checksums, a bad one is fetched again from the durable copy (logged);
//   - it does not (a fresh directory, or one lost): the shard's durable part is verified and
//     materialized into a new restore point;
//   - the checkpoint was taken with another number of shards: every old part is verified and
//     read, and the rows this shard owns under the new count (common/slot_map.h) are written
//     into a new restore point. Rows are independent, so the model is exactly the old one.
// Everything after the checkpoint (later restore points, the push log, the live DB) belongs to
// an abandoned history and is deleted; the restore point's marker says replay starts at LSN 1,
// where the new, empty push log starts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/ps/durable_copy.h"
#include "server/ps/shard.h"

namespace tandem::ps {

// The checkpoint to resume from, as the manifest describes it. Value type.
struct RestoreSource {
  std::string checkpoint_dir;      // checkpoint.dir: durable copies are under shards/shard-<i>/
  int64_t step = -1;               // S
  uint64_t manifest_timeline = 0;  // the timeline the checkpoint was taken on
  // The timeline the restored shard runs on: the one the chief hands the workers (their pushes
  // carry it). Usually manifest_timeline.
  uint64_t run_timeline = 0;
  uint32_t num_ps = 0;                // the shard count the checkpoint was taken with
  std::vector<CheckpointPart> parts;  // the manifest's shard parts, parts[i].shard == i
};

enum class RestoreKind {
  kLocal,          // a local restore point at S, checked (and repaired) against the manifest
  kDurable,        // this shard's part of the durable copy
  kRepartitioned,  // every old part of the durable copy, rows re-partitioned
};

struct RestoreReport {
  RestoreKind kind = RestoreKind::kLocal;
  std::vector<std::string> repaired;  // local files fetched again from the durable copy
  uint64_t rows = 0;                  // kRepartitioned: rows written (counters not included)
};

// Makes `options.dir` hold exactly one restore point, at `source.step` on
// `source.run_timeline`, with replay from LSN 1, and no push log or live DB.
// REQUIRES: no process has the shard open (the directory's LOCK is taken while this runs).
// Errors: kDataLoss naming the file when the durable copy a restore needs is corrupt (and, for a
// local file, the local copy too); kInvalidArgument for a source that does not describe this
// job (missing part, wrong shard numbers); kFailedPrecondition when another process holds the
// directory; kUnavailable / kResourceExhausted for I/O errors.
// A clean stop leaves the shard at S already; it is prepared anyway, because a start from an
// existing directory verifies every file (PROTOCOLS §7).
StatusOr<RestoreReport> PrepareShardForResume(const ShardOptions& options,
                                              const RestoreSource& source);

// A job that starts with no checkpoint to resume from (a first start, `checkpoint.resume:
// never`, or a rollback before the first checkpoint) starts every shard empty: removes what an
// earlier attempt of the job left in `options.dir` (restore points, push log, live DB).
// `cleared` (may be null) says whether there was anything. Same locking and I/O errors as
// PrepareShardForResume.
Status ClearShardForFreshStart(const ShardOptions& options, bool* cleared = nullptr);

}  // namespace tandem::ps
