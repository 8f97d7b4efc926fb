#include "cli/checksum_command.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <utility>

#include "common/checkpoint_layout.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "offline/checkpoint_reader.h"
#include "server/chief/checkpoint_manifest.h"
#include "server/ps/embedding_store.h"
#include "server/ps/shard.h"
#include "server/ps/shard_options.h"
#include "server/ps/store_checksum.h"
#include "worker/dense_state.h"

namespace tandem::cli {

using offline::CheckpointJobConfig;
using offline::OpenCheckpoint;
using offline::OpenCheckpointShard;
using offline::OpenedCheckpoint;
using offline::ScratchDir;
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

std::string DenseStatePath(const config::JobConfig& job) {
  return job.output.dir + "/model/dense.ckpt";
}

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
  // The dense file first: a missing or corrupt one must not cost a replay of every shard.
  std::optional<worker::DenseState> dense;
  if (!args.sparse) {
    auto read = worker::ReadDenseState(DenseStatePath(*job));
    if (!read.ok()) {
      const Status& s = read.status();
      std::fprintf(stderr, "tandem checksum: %s%s\n", s.ToString().c_str(),
                   s.IsNotFound() ? " (rank 0 writes it when training ends; --sparse prints the "
                                    "embedding part alone)"
                                  : "");
      return ExitCodeFor(s);
    }
    dense = std::move(read).value();
  }
  auto sum = SparseChecksumOfJob(*job);
  if (!sum.ok()) {
    std::fprintf(stderr, "tandem checksum: %s\n", sum.status().ToString().c_str());
    // Only a config the shards refuse is the input's fault here (3). Anything else, even a
    // kDataLoss or kFailedPrecondition from replaying a log the config cannot replay (more
    // workers than it names) or a shard another process holds, is 1 (checksum_cli_test): the
    // shards may be fine, and the command may be run again with the right config or later.
    return sum.status().IsInvalidArgument() ? ExitCodeFor(sum.status()) : kExitRuntimeFailure;
  }
  if (dense) sum->sum.Merge(worker::DenseStateChecksum(*dense));
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
  if (dense) {
    std::fprintf(stderr, "dense step: %lld\n", static_cast<long long>(dense->step));
    // A dense.ckpt left by an earlier job in the same output.dir, or a job that did not end
    // cleanly: the sum is printed, but it mixes two models.
    if (std::any_of(steps.begin(), steps.end(), [&](int64_t s) { return s != dense->step; }))
      std::fprintf(stderr, "warning: %s is of step %lld, the shards' applied step differs\n",
                   DenseStatePath(*job).c_str(), static_cast<long long>(dense->step));
  }
  return kExitOk;
}

namespace {

// One shard's rows from its durable copy: materialised, rebuilt into a live DB, opened.
// With `verify` every row is read and summed, and the sum compared with the one the shard kept.
Status AddShardPart(const OpenedCheckpoint& ckpt, const chief::ManifestPart& part,
                    const config::JobConfig& job, const std::string& scratch, bool verify,
                    ModelChecksum* sum, uint64_t* rows) {
  TANDEM_ASSIGN_OR_RETURN(auto store, OpenCheckpointShard(ckpt, part, job, scratch));
  uint64_t n = 0;
  TANDEM_RETURN_IF_ERROR(ps::AddStoreToChecksum(store.get(), sum, &n, verify, part.name));
  *rows += n;
  return Status::Ok();
}

}  // namespace

int RunCheckpointChecksum(const ChecksumArgs& args) {
  log::Init("checksum", args.log_level);
  auto opened = OpenCheckpoint(args.checkpoint);
  if (!opened.ok()) {
    std::fprintf(stderr, "tandem checksum: %s\n", opened.status().ToString().c_str());
    return ExitCodeFor(opened.status());
  }
  const OpenedCheckpoint& ckpt = *opened;
  const chief::Manifest& m = ckpt.manifest;
  const std::string& root = ckpt.root;
  std::vector<std::string> bad;
  Status verified = chief::VerifyManifestFiles(root, m, args.verify, &bad);
  if (!verified.ok()) {
    std::fprintf(stderr, "tandem checksum: checkpoint of step %lld: %s\n",
                 static_cast<long long>(m.step), verified.ToString().c_str());
    return kExitInvalid;
  }
  auto job = CheckpointJobConfig(ckpt);
  if (!job.ok()) {
    std::fprintf(stderr, "tandem checksum: %s\n", job.status().ToString().c_str());
    return kExitInvalid;
  }
  ModelChecksum sum;
  uint64_t rows = 0;
  auto scratch = ScratchDir::Create("tandem-checksum");
  if (!scratch.ok()) {
    std::fprintf(stderr, "tandem checksum: %s\n", scratch.status().ToString().c_str());
    return kExitRuntimeFailure;
  }
  Status s = Status::Ok();
  for (const auto& part : m.parts) {
    if (!s.ok()) break;
    if (part.name == "dense") {
      auto dense = worker::ReadDenseState(root + "/" + CheckpointDirName(m.step) + "/" +
                                          kDenseCheckpointFile);
      if (!dense.ok()) {
        s = dense.status();
      } else if (dense->step != m.step) {
        s = Status::DataLoss("the dense file is of step " + std::to_string(dense->step));
      } else {
        sum.Merge(worker::DenseStateChecksum(*dense));
      }
    } else {
      s = AddShardPart(ckpt, part, *job, (*scratch)->path(), args.verify, &sum, &rows)
              .WithContext(part.name);
    }
  }
  scratch->reset();
  if (!s.ok()) {
    std::fprintf(stderr, "tandem checksum: checkpoint of step %lld: %s\n",
                 static_cast<long long>(m.step), s.ToString().c_str());
    return ExitCodeFor(s);
  }
  std::printf("%s\n", sum.Hex().c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "checkpoint step: %lld\nrows: %llu\n%s\n", static_cast<long long>(m.step),
               static_cast<unsigned long long>(rows),
               args.verify ? "every file verified (CRC32C), every row summed"
                           : "files present with their sizes; the sum each shard kept");
  return kExitOk;
}

}  // namespace tandem::cli
