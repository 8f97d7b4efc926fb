#include "cli/checksum_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "common/exit_codes.h"
#include "common/log.h"
#include "server/ps/shard.h"
#include "server/ps/shard_options.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;

// Shard::Open creates a missing directory; a checksum must not invent an empty shard, nor
// silently leave out one the config does not name.
Status CheckShardDirs(const config::JobConfig& job) {
  const size_t n = job.cluster.ps.size();
  for (size_t i = 0; i < n; ++i) {
    const std::string dir = job.ps.data_dir + "/shard-" + std::to_string(i);
    if (!fs::is_directory(dir + "/restore"))
      return Status::InvalidArgument("no parameter-server shard at " + dir +
                                     " (ps.data_dir and cluster.ps must be the job's)");
  }
  const std::string extra = job.ps.data_dir + "/shard-" + std::to_string(n);
  if (fs::exists(extra))
    return Status::InvalidArgument(extra + " exists, but the config names " + std::to_string(n) +
                                   " shards (pass --ps or --set cluster.ps=...)");
  return Status::Ok();
}

}  // namespace

StatusOr<SparseChecksum> SparseChecksumOfJob(const config::JobConfig& job) {
  TANDEM_RETURN_IF_ERROR(CheckShardDirs(job));
  SparseChecksum out;
  for (uint32_t i = 0; i < job.cluster.ps.size(); ++i) {
    const ps::ShardOptions options = ps::ShardOptionsFromConfig(job, i);
    auto shard = ps::Shard::Open(options);
    if (!shard.ok())
      return shard.status().WithContext("shard " + std::to_string(i) + " (" + options.dir +
                                        "; stop the job's parameter servers first)");
    uint64_t rows = 0;
    int64_t applied = -1;
    TANDEM_RETURN_IF_ERROR((*shard)
                               ->AddToChecksum(&out.sum, &rows, &applied)
                               .WithContext("shard " + std::to_string(i)));
    out.rows += rows;
    out.applied_step.push_back(applied);
  }
  return out;
}

int RunChecksum(const ChecksumArgs& args) {
  if (!args.sparse) {
    // TODO(soon): merge the dense part from output.dir/model/dense.ckpt once its format lands.
    std::fprintf(stderr,
                 "tandem checksum --config: only --sparse (the embedding part) is implemented "
                 "yet; the dense part lands with the checkpoint issue\n");
    return kExitUsage;
  }
  log::Init("checksum", args.log_level);
  std::vector<config::Override> overrides;
  for (const auto& s : args.sets) overrides.push_back({s});
  auto job = config::LoadJobConfig(args.config_path, overrides);
  if (!job.ok()) {
    std::fprintf(stderr, "tandem checksum: %s\n", job.status().message().c_str());
    return kExitInvalid;
  }
  // Only the counts matter here: no address is bound or dialled.
  if (args.num_ps > 0) job->cluster.ps.assign(args.num_ps, "127.0.0.1:0");
  if (args.num_workers > 0) job->cluster.workers.assign(args.num_workers, "127.0.0.1:0");
  auto sum = SparseChecksumOfJob(*job);
  if (!sum.ok()) {
    std::fprintf(stderr, "tandem checksum: %s\n", sum.status().ToString().c_str());
    return sum.status().IsInvalidArgument() ? kExitInvalid : kExitRuntimeFailure;
  }
  std::printf("%s\n", sum->sum.Hex().c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "rows: %llu\n", static_cast<unsigned long long>(sum->rows));
  const std::vector<int64_t>& steps = sum->applied_step;
  if (std::adjacent_find(steps.begin(), steps.end(), std::not_equal_to<>()) == steps.end()) {
    std::fprintf(stderr, "applied step: %lld\n", static_cast<long long>(steps.front()));
  } else {
    // k = 0 shards of a finished job stop at one step: the job did not end cleanly.
    std::string list;
    for (int64_t s : steps) list += " " + std::to_string(s);
    std::fprintf(stderr, "warning: the shards stopped at different applied steps:%s\n",
                 list.c_str());
  }
  return kExitOk;
}

}  // namespace tandem::cli
