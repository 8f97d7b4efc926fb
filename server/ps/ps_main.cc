#include "server/ps/ps_main.h"

#include "common/daemon/member.h"
#include "common/daemon/stop_signals.h"
#include "common/determinism_class.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "server/ps/malloc_arenas.h"
#include "server/ps/open_files.h"
#include "server/ps/ps_metrics.h"
#include "server/ps/shard_options.h"
#include "server/ps/shard_resume.h"

namespace tandem::ps {

using daemon::RoleContext;

// Without a chief address (port 0: a shard started on its own, as tests and benchmarks do) the
// shard serves until SIGTERM with the incarnation it was given.
static int ServeStandalone(const RoleContext& ctx) {
  TLOG_WARN("cluster.chief has port 0: serving without a chief until SIGTERM");
  int sig = 0;
  while (!daemon::WaitStopSignal(ctx.stop_signals, std::chrono::milliseconds(1000), &sig)) {
  }
  TLOG_INFO("received {}, stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  return kExitOk;
}

std::vector<wire::LaneOptions> PsDaemon::Lanes(const config::JobConfig& job) const {
  return PsLanes(static_cast<int>(job.ps.handler_threads));
}

std::optional<int> PsDaemon::Prepare(const RoleContext& ctx) {
  // Recovery (restore point + push-log replay), and before it the restore of the checkpoint a
  // starting job resumes from, complete before the port is bound, so no request ever sees a
  // half-recovered shard.
  const auto& job = *ctx.job;
  const uint64_t open_files = RaiseOpenFileLimit();
  TLOG_INFO("open-file limit {}: up to {} SSTs open; {}", open_files, MaxOpenTables(),
            malloc_arenas);
  const auto shard_options = ShardOptionsFromConfig(job, static_cast<uint32_t>(ctx.index));
  if (!job.cluster.chief.at(0).ends_with(":0")) {
    auto restored = RestoreForResume(job, ctx.job_id, ctx.context, shard_options, ctx.stop_signals);
    if (restored.status().IsCancelled()) {
      TLOG_INFO("{}: stopping before the shard was opened", restored.status().message());
      return kExitOk;
    }
    if (!restored.ok()) {
      TLOG_ERROR("cannot restore the shard from the checkpoint: {}", restored.status().ToString());
      // Refused by the chief (another job's, scenario 16) is kPermissionDenied: 75, do not
      // restart (PROTOCOLS §12).
      return ExitCodeFor(restored.status());
    }
    restored_step_ = *restored;
  }
  auto opened = Shard::Open(shard_options);
  if (!opened.ok()) {
    TLOG_ERROR("cannot open the shard: {}", opened.status().ToString());
    return ExitCodeFor(opened.status());
  }
  shard_ = std::move(opened).value();
  service_ = std::make_unique<PsService>(shard_.get(), ctx.server);
  service_->Register();
  return std::nullopt;
}

void PsDaemon::Started(const RoleContext&, metrics::Registry* registry) {
  AddPsMetrics(registry, shard_.get());
}

void PsDaemon::Stopped(int status) {
  // Parked pulls are answered now (DaemonRole::Stopped), and a part copy in flight is finished.
  service_.reset();
  if (status == daemon::kRoleRejoin) return;
  // A clean stop leaves a restore point, so the next start replays nothing. Not before a
  // rejoin: the replay of the log rebuilds the pre-images of the last applied step, which a
  // replacement worker's pulls of that step may need (PROTOCOLS §8); a restore point would
  // drop them.
  Status rp = shard_->TakeRestorePoint();
  if (!rp.ok()) TLOG_WARN("final restore point failed: {}", rp.ToString());
  auto ss = shard_->stats();
  TLOG_INFO("shard: applied step {}, {} pushes logged, {} duplicates, {} rows applied",
            shard_->applied_step(), ss.pushes_logged, ss.duplicates, ss.rows_applied);
}

std::string PsDaemon::WrongState(const RoleContext& ctx, ChiefClient* chief,
                                 const Registration& reg) const {
  const Shard* shard = shard_.get();
  // The daemon restored the shard to the checkpoint the chief named before it opened it; the
  // registration must confirm it (a chief restarted in between may resume from another one), and
  // the shard must run on the timeline the workers are handed, or every push is refused.
  const bool restored_other_step =
      restored_step_ >= 0 &&
      (reg.resume_step != restored_step_ || shard->applied_step() != reg.resume_step);
  if (restored_other_step || (restored_step_ >= 0 && shard->timeline() != reg.timeline)) {
    return "ps:" + std::to_string(ctx.index) + " was restored to step " +
           std::to_string(restored_step_) + " and is at step " +
           std::to_string(shard->applied_step()) + " on timeline " +
           std::to_string(shard->timeline()) + ", the job resumes from the checkpoint of step " +
           std::to_string(reg.resume_step) + " on timeline " + std::to_string(reg.timeline);
  }
  // Rejoining a job in training: every push a worker has finished a step with was logged by this
  // shard, so after its replay the shard is at least at the slowest worker's step. A shard far
  // behind it lost its data (a lost machine, a deleted directory): no worker can resend what it
  // lacks, and only a rollback to the last checkpoint can go on (PROTOCOLS §8).
  if (auto view = chief->View(std::chrono::milliseconds(2000));
      view.ok() && view->job_state == JobState::kTraining && view->step >= 0) {
    const int64_t margin = ctx.job->train.embedding_staleness + 2;
    if (shard->applied_step() + margin < view->step) {
      return "ps:" + std::to_string(ctx.index) + " lost its data: it is at step " +
             std::to_string(shard->applied_step()) + ", the slowest worker at step " +
             std::to_string(view->step) + "; the job must roll back to its last checkpoint";
    }
  }
  return "";
}

int PsDaemon::Run(const RoleContext& ctx) {
  Shard* shard = shard_.get();
  const auto& job = *ctx.job;
  if (job.cluster.chief.at(0).ends_with(":0")) return ServeStandalone(ctx);
  int exit_status = kExitOk;
  Registration reg;
  auto chief = daemon::JoinJob(ctx, config::Role::kPs, DeterminismClass(1, ""), &exit_status, &reg);
  if (!chief) return exit_status;
  // A run that has not trained yet starts every shard at the checkpoint it resumes from. A shard
  // that kept what it applied (it opened while a restarted chief expected the run's members
  // back, and the first to come was a new process, so that chief started the job over: every
  // process had been restarted) would serve rows of later steps than the workers' restored dense
  // state; at k > 0 no pull would even notice. It exits before the job trains, which fails
  // nothing, and its restart sees a starting job and restores the checkpoint (Prepare).
  if (restored_step_ < 0 && reg.job_start && shard->applied_step() != reg.resume_step) {
    TLOG_WARN(
        "ps:{} kept step {} for a rejoin, but the chief started the job over from {}: "
        "exiting for a restart that restores it",
        ctx.index, shard->applied_step(),
        reg.resume_step < 0 ? std::string("scratch")
                            : "the checkpoint of step " + std::to_string(reg.resume_step));
    return kExitRuntimeFailure;
  }
  if (std::string wrong = WrongState(ctx, chief.get(), reg); !wrong.empty()) {
    TLOG_ERROR("{}", wrong);
    Progress failed;
    failed.state = MemberState::kFailed;
    failed.detail = wrong;
    chief->SetProgress(failed);
    chief->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
    return kExitRuntimeFailure;
  }
  Progress progress;
  progress.state = MemberState::kServing;
  std::optional<std::chrono::steady_clock::time_point> stop_deadline;
  for (;;) {
    progress.step = shard->applied_step();
    chief->SetProgress(progress);
    chief->SetWaitingOn(service_->Holdup());
    int sig = 0;
    // 50 ms: the job's end (heard by the heartbeat thread) is acted on within a poll.
    if (daemon::WaitStopSignal(ctx.stop_signals, std::chrono::milliseconds(50), &sig)) {
      if (stop_deadline) break;  // a second signal: stop now
      TLOG_INFO("received {}: asking the chief to stop the job",
                sig == SIGTERM ? "SIGTERM" : "SIGINT");
      chief->StopJob("SIGTERM to ps:" + std::to_string(ctx.index)).status().IgnoreError();
      // Serve the workers' last steps; never wait forever for a chief that is gone.
      stop_deadline = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(job.collective.timeout_ms + 10000);
    }
    if (chief->fenced()) {
      chief->StopHeartbeats();
      return daemon::ExitWhenFenced(chief.get(), config::Role::kPs,
                                    static_cast<uint32_t>(ctx.index));
    }
    if (IsTerminal(chief->job_state())) {
      TLOG_INFO("the job has ended ({}): leaving", Name(chief->job_state()));
      break;
    }
    if (stop_deadline && std::chrono::steady_clock::now() > *stop_deadline) {
      TLOG_WARN("the job did not end in time after the stop request: leaving");
      break;
    }
  }
  const bool job_failed = chief->job_state() == JobState::kFailed;
  progress.step = shard->applied_step();
  progress.state = MemberState::kStopped;
  chief->SetProgress(progress);
  chief->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
  chief->StopHeartbeats();
  chief->Leave(std::chrono::milliseconds(200)).IgnoreError();
  // A failed job goes on only from its last checkpoint, with every process started again (the
  // chief and the workers of a failed job exit non-zero too): under systemd's
  // Restart=on-failure a shard that exited 0 would never come back for that restart.
  if (job_failed) {
    TLOG_WARN("the job failed: exiting {} so that the supervisor restarts this shard",
              static_cast<int>(kExitRuntimeFailure));
    return kExitRuntimeFailure;
  }
  return kExitOk;
}

int RunPs(const daemon::DaemonArgs& args, const std::optional<std::string>& tf_config) {
  PsDaemon role;
  role.malloc_arenas = LimitMallocArenas();  // before RunDaemon starts any thread
  return daemon::RunDaemon(args, tf_config, &role);
}

}  // namespace tandem::ps
