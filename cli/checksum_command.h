// `tandem checksum --config JOB.yaml --sparse`: the embedding part of a stopped job's
// model_checksum (DESIGN §12), read from its parameter servers' directories.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/model_checksum.h"
#include "common/status.h"

namespace tandem::cli {

struct ChecksumArgs {
  std::string config_path;
  std::vector<std::string> sets;  // --set key.path=value, applied before validation
  int num_ps = 0;                 // > 0: the job ran with this many shards (`tandem local --ps N`)
  int num_workers = 0;  // > 0: the job ran with this many workers (`tandem local --workers M`)
  bool sparse = false;  // the embedding part only (the dense part is not read yet)
  std::string log_level = "warn";
};

struct SparseChecksum {
  ModelChecksum sum;
  uint64_t rows = 0;                  // materialised rows over all shards
  std::vector<int64_t> applied_step;  // per shard
};

// Opens every shard directory `ps.data_dir/shard-<i>`, i in [0, cluster.ps.size()), one after
// the other, as a restarted PS would (restore point + push log replay, which leaves a fresh
// restore point behind), and sums their AddToChecksum. kFailedPrecondition when a shard is
// locked by a running process or its log does not match the config's job shape;
// kInvalidArgument when the directories do not match cluster.ps (a shard missing, or more
// shards than the config names).
StatusOr<SparseChecksum> SparseChecksumOfJob(const config::JobConfig& job);

// Prints the checksum (32 hex chars) on stdout and "rows: N" on stderr. Exit 0; 2 without
// --sparse (the dense part cannot be read yet); 3 for a bad config or directories that do not
// match it; 1 when a shard is in use or cannot be recovered.
int RunChecksum(const ChecksumArgs& args);

}  // namespace tandem::cli
