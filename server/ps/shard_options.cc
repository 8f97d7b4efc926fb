#include "server/ps/shard_options.h"

#include <algorithm>

#include "common/checkpoint_layout.h"

namespace tandem::ps {

uint64_t DefaultMaxDirtyBytes(uint64_t cache_bytes) {
  return std::max<uint64_t>(cache_bytes / 4, uint64_t{64} << 20);
}

ShardOptions ShardOptionsFromConfig(const config::JobConfig& job, uint32_t index) {
  ShardOptions o;
  o.shard_index = index;
  o.num_shards = static_cast<uint32_t>(job.cluster.ps.size());
  o.num_workers = static_cast<uint32_t>(job.cluster.workers.size());
  o.staleness = job.train.embedding_staleness;
  o.tables = embedding::TableSpecsFromConfig(job);
  o.seed = job.train.seed;
  o.last_step = job.train.steps - 1;
  o.dir = job.ps.data_dir + "/shard-" + std::to_string(index);
  o.durable_dir = job.checkpoint.dir + "/" + ShardDurableDir(index);
  // A delta needs an earlier full part: a job without periodic checkpoints never makes one.
  o.change_log = job.checkpoint.final_part != "full" &&
                 (job.checkpoint.every_steps > 0 || job.checkpoint.every_seconds > 0);
  o.cache_bytes = static_cast<uint64_t>(job.ps.cache_bytes);
  // `ps.max_dirty_bytes`: 0 = DefaultMaxDirtyBytes, -1 = no bound.
  o.max_dirty_bytes = job.ps.max_dirty_bytes > 0    ? static_cast<uint64_t>(job.ps.max_dirty_bytes)
                      : job.ps.max_dirty_bytes == 0 ? DefaultMaxDirtyBytes(o.cache_bytes)
                                                    : 0;
  o.memory_only = job.ps.storage == "memory";
  o.durability =
      job.ps.push_log_durability == "machine" ? Durability::kMachine : Durability::kProcess;
  o.group_commit = std::chrono::milliseconds(job.ps.push_log_group_ms);
  o.nan_policy = job.ps.nan_policy == "skip_rows" ? NanPolicy::kSkipRows : NanPolicy::kReject;
  o.max_buffered_bytes = static_cast<uint64_t>(job.ps.max_buffered_bytes);
  o.restore_point_every_bytes = static_cast<uint64_t>(job.ps.restore_point_every_bytes);
  o.push_log_max_bytes = static_cast<uint64_t>(job.ps.push_log_max_bytes);
  o.push_log_direct_io = job.ps.push_log_io == "direct";
  // No key of its own: half the handler threads (the other half serves the lanes).
  o.apply_threads = static_cast<int>(std::max<int64_t>(1, job.ps.handler_threads / 2));
  return o;
}

}  // namespace tandem::ps
