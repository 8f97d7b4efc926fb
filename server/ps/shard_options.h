// ShardOptions from the job config (the only place the PS reads config keys).
#pragma once

#include "common/config/job_config.h"
#include "server/ps/shard.h"

namespace tandem::ps {

// Shard `index` of the job: its directory is `ps.data_dir/shard-<index>`.
ShardOptions ShardOptionsFromConfig(const config::JobConfig& job, uint32_t index);

}  // namespace tandem::ps
