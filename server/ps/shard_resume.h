// A PS's resume from a committed checkpoint (PROTOCOLS §6, §7): before it opens its shard, a PS
// asks the chief which checkpoint the job resumes from and, while the job is starting, prepares
// the shard's directory so that Shard::Open recovers exactly that step. Once the job trains, a
// (re)started shard recovers from its own restore points and log instead.
#pragma once

#include <signal.h>

#include <cstdint>
#include <string>
#include <zmq.hpp>

#include "common/chief_client.h"
#include "common/config/job_config.h"
#include "common/job_id.h"
#include "common/status.h"
#include "server/ps/shard_options.h"
#include "server/ps/shard_restore.h"

namespace tandem::ps {

// The shard parts of the manifest of the committed checkpoint of `step` under `checkpoint_dir`,
// as PrepareShardForResume takes them. kDataLoss when the manifest is missing or malformed.
StatusOr<RestoreSource> RestoreSourceOf(const std::string& checkpoint_dir, int64_t step,
                                        uint64_t run_timeline);

// What the chief's view decides for a shard about to open: -1 when it keeps what it has (the job
// trains, or a restarted chief rejoins a run that trained) or starts empty (nothing to resume
// from: what an earlier attempt left is removed), else the step it was restored to.
StatusOr<int64_t> PrepareShardFromView(const std::string& checkpoint_dir,
                                       const ShardOptions& options, const ClusterView& view);

// Asks the chief of `job` for its view (waiting for a chief that starts after us; kCancelled on
// a stop signal) and calls PrepareShardFromView.
StatusOr<int64_t> RestoreForResume(const config::JobConfig& job, const JobId& job_id,
                                   zmq::context_t* context, const ShardOptions& options,
                                   const sigset_t& stop_signals);

}  // namespace tandem::ps
