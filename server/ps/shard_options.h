// ShardOptions from the job config (the only place the PS reads config keys).
#pragma once

#include "common/config/job_config.h"
#include "server/ps/shard.h"

namespace tandem::ps {

// The dirty bound of a cache of `cache_bytes` when `ps.max_dirty_bytes` is 0: a quarter of the
// cache, and never under 64 MiB. The bound is there so that a restore point's flush writes a
// bounded amount, which is bytes, not a fraction of the cache; what it costs is hot rows written
// ahead again each time a step's dirty rows fill it, which a quarter of a small cache does in
// about one step (issue 21: with 1/57 of the table cached, 1.3x the rows written back).
uint64_t DefaultMaxDirtyBytes(uint64_t cache_bytes);

// Shard `index` of the job: its directory is `ps.data_dir/shard-<index>`.
ShardOptions ShardOptionsFromConfig(const config::JobConfig& job, uint32_t index);

}  // namespace tandem::ps
