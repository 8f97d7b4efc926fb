// `tandem checksum --config JOB.yaml [--sparse]`: a stopped job's model_checksum (DESIGN §12):
// the embedding part read from its parameter servers' directories, merged with the dense part
// from rank 0's `output.dir/model/dense.ckpt` (worker/dense_state.h); --sparse: the embedding
// part only.
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
  int num_workers = 0;     // > 0: the job ran with this many workers (`tandem local --workers M`)
  bool sparse = false;     // the embedding part only (no dense.ckpt needed)
  std::string checkpoint;  // --checkpoint: a checkpoint.dir (its LATEST) or one ckpt-<step> dir
  // --verify: every file's CRC32C, not only presence and size, and every row summed and
  // compared with the sum the shard kept
  bool verify = false;
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

// `output.dir/model/dense.ckpt`, the dense state rank 0 writes when training ends.
std::string DenseStatePath(const config::JobConfig& job);

// Prints the checksum (32 hex chars) on stdout and "rows: N" (and without --sparse "dense step:
// S") on stderr. Exit 0; 3 for a bad config, directories that do not match it, or (without
// --sparse) a dense.ckpt that is missing, corrupt or of an unknown format, naming the file; 1
// when a shard is in use or cannot be recovered. The dense file is checked before any shard is
// opened. A dense step other than the shards' applied step is a warning on stderr.
int RunChecksum(const ChecksumArgs& args);

// `tandem checksum --checkpoint DIR [--verify]`: the model_checksum of a committed checkpoint,
// from its manifest, dense file and the shards' durable copies (each materialised in a
// temporary directory and read like a restored shard). Exit 0; 3 when there is no intact
// checkpoint or a file fails its check (named); 1 for I/O errors.
int RunCheckpointChecksum(const ChecksumArgs& args);

}  // namespace tandem::cli
