// Restore points of a shard's data directory (PROTOCOLS §6): `restore/<name>/` is a RocksDB
// checkpoint and `restore/<name>.done` the marker written after it is complete, JSON
// {timeline, step, replay_from_lsn, partial}. A restore point without its marker is not
// complete and is never used.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::ps {

struct RestoreMarker {
  std::string name;  // t<timeline>-s<step>-l<replay_from_lsn>
  uint64_t timeline = 0;
  int64_t step = -1;
  // The first log record the restore point does not contain: replay starts there.
  uint64_t replay_from_lsn = 1;
  // k >= 1: (step, rank) pushes already applied for steps beyond `step`, so that a resent push
  // is recognised as a duplicate after recovery.
  std::vector<std::pair<int64_t, uint32_t>> partial;
};

// "t<timeline>-s<step>-l<replay_from_lsn>".
std::string RestorePointName(const RestoreMarker& m);

// The complete restore points under `shard_dir`/restore (marker parsed, directory present),
// oldest first by (timeline, step, replay_from_lsn). Torn markers are skipped.
std::vector<RestoreMarker> ListRestorePoints(const std::string& shard_dir);

// Writes the marker durably (tmp + fsync + rename + directory fsync).
Status WriteRestoreMarker(const std::string& path, const RestoreMarker& m);

}  // namespace tandem::ps
