#include "server/ps/shard_resume.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <thread>

#include "common/checkpoint_layout.h"
#include "common/daemon/stop_signals.h"
#include "common/log.h"
#include "server/chief/checkpoint_manifest.h"

namespace tandem::ps {
namespace {

const char* HowRestored(RestoreKind kind) {
  switch (kind) {
    case RestoreKind::kLocal:
      return "its local restore point";
    case RestoreKind::kDurable:
      return "the durable copy";
    case RestoreKind::kRepartitioned:
      return "every old part of the durable copy, re-partitioned";
  }
  return "?";
}

}  // namespace

StatusOr<RestoreSource> RestoreSourceOf(const std::string& checkpoint_dir, int64_t step,
                                        uint64_t run_timeline) {
  const std::string name = CheckpointDirName(step) + "/MANIFEST";
  std::ifstream in(checkpoint_dir + "/" + name, std::ios::binary);
  if (!in) return Status::DataLoss("cannot read " + checkpoint_dir + "/" + name);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TANDEM_ASSIGN_OR_RETURN(chief::Manifest m, chief::DecodeManifest(text, name));
  RestoreSource source;
  source.checkpoint_dir = checkpoint_dir;
  source.step = m.step;
  source.manifest_timeline = m.timeline;
  source.run_timeline = run_timeline;
  source.num_ps = m.num_ps;
  for (const chief::ManifestPart& part : m.parts) {
    if (!part.name.starts_with("shard-")) continue;
    TANDEM_ASSIGN_OR_RETURN(CheckpointPart p, CheckpointPartFromJson(part.detail));
    source.parts.push_back(std::move(p));
  }
  std::sort(source.parts.begin(), source.parts.end(),
            [](const auto& a, const auto& b) { return a.shard < b.shard; });
  return source;
}

StatusOr<int64_t> PrepareShardFromView(const std::string& checkpoint_dir,
                                       const ShardOptions& options, const ClusterView& view) {
  // elapsed_ms > 0 while "starting": a restarted chief rejoining a run that trained; its shards
  // are past the checkpoint and must keep what they applied.
  if (view.job_state != JobState::kStarting || view.elapsed_ms > 0) return -1;
  if (view.resume_step < 0) {
    // Nothing to resume from: every shard starts empty, whatever an earlier attempt of this job
    // left behind (a rollback before the first checkpoint must not serve its rows).
    bool cleared = false;
    TANDEM_RETURN_IF_ERROR(ClearShardForFreshStart(options, &cleared));
    if (cleared)
      TLOG_INFO("shard {}: a fresh job start: what an earlier run left was removed",
                options.shard_index);
    return -1;
  }
  TANDEM_ASSIGN_OR_RETURN(RestoreSource source,
                          RestoreSourceOf(checkpoint_dir, view.resume_step, view.timeline));
  if (source.manifest_timeline != source.run_timeline)
    TLOG_INFO("the checkpoint of step {} was taken on timeline {}; the job runs on timeline {}",
              source.step, source.manifest_timeline, source.run_timeline);
  TANDEM_ASSIGN_OR_RETURN(RestoreReport report, PrepareShardForResume(options, source));
  TLOG_INFO("shard {} restored to the checkpoint of step {} ({} shards then, {} now) from {}{}",
            options.shard_index, source.step, source.num_ps, options.num_shards,
            HowRestored(report.kind),
            report.repaired.empty()
                ? std::string()
                : ", " + std::to_string(report.repaired.size()) + " damaged file(s) repaired");
  return source.step;
}

StatusOr<int64_t> RestoreForResume(const config::JobConfig& job, const JobId& job_id,
                                   zmq::context_t* context, const ShardOptions& options,
                                   const sigset_t& stop_signals) {
  ChiefClientOptions o;
  o.chief_endpoint = "tcp://" + job.cluster.chief.at(0);
  o.identity.job_id = job_id;
  o.identity.role = wire::Role::TOOL;  // a query, as `tandem status` makes; not registered yet
  o.identity.index = options.shard_index;
  ChiefClient chief(context, o);
  // The chief may start after us (`tandem local` starts everyone at once): View retries, says
  // so every few seconds, and gives up on SIGTERM.
  const auto stop = [&stop_signals] { return daemon::StopSignalSeen(stop_signals); };
  const auto budget = std::chrono::seconds(job.recovery.max_wait_s);
  TANDEM_ASSIGN_OR_RETURN(ClusterView view, chief.View(budget, stop));
  // A restarted chief expecting the run's members back decides at the first registration: a
  // survivor and the run goes on (keep what was applied), a new process and the job starts over
  // from resume_step (restore it). Deciding before it did, a shard kept step 311 for a job that
  // then started over from 299 (every process of a cluster killed at once, 2026-12-06). Workers
  // register without waiting for shards, so the decision comes.
  const auto deadline = std::chrono::steady_clock::now() + budget;
  auto next_note = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (view.rejoin_pending) {
    if (stop()) return Status::Cancelled("stop signal while the chief decided");
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      return Status::Unavailable(
          "the chief did not decide between rejoining the run and "
          "starting the job over within recovery.max_wait_s");
    if (now >= next_note) {
      TLOG_INFO("shard {}: waiting for the chief to decide whether the run goes on or starts over",
                options.shard_index);
      next_note = now + std::chrono::seconds(5);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    TANDEM_ASSIGN_OR_RETURN(view, chief.View(budget, stop));
  }
  return PrepareShardFromView(job.checkpoint.dir, options, view);
}

}  // namespace tandem::ps
