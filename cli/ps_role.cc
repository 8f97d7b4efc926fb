// `tandem ps`: the shard is open and served (RunDaemon); join the job and serve until the chief
// says the job has ended, then leave a restore point so the next start replays nothing.
#include "cli/member.h"
#include "cli/roles.h"
#include "common/determinism_class.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "server/ps/shard.h"

namespace tandem::cli {

// Without a chief address (port 0: a shard started on its own, as tests and benchmarks do) the
// shard serves until SIGTERM with the incarnation it was given.
static int ServeStandalone(const RoleContext& ctx) {
  TLOG_WARN("cluster.chief has port 0: serving without a chief until SIGTERM");
  int sig = 0;
  while (!WaitStopSignal(ctx.stop_signals, std::chrono::milliseconds(1000), &sig)) {
  }
  TLOG_INFO("received {}, stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  return kExitOk;
}

int RunPsRole(const RoleContext& ctx, ps::Shard* shard) {
  const auto& job = *ctx.job;
  if (job.cluster.chief.at(0).ends_with(":0")) return ServeStandalone(ctx);
  int exit_status = kExitOk;
  Registration reg;
  auto chief = JoinJob(ctx, config::Role::kPs, DeterminismClass(1, ""), &exit_status, &reg);
  if (!chief) return exit_status;
  // The daemon restored the shard to the checkpoint the chief named before it opened it; the
  // registration must confirm it (a chief restarted in between may resume from another one), and
  // the shard must run on the timeline the workers are handed, or every push is refused.
  const bool restored_other_step =
      ctx.restored_step >= 0 &&
      (reg.resume_step != ctx.restored_step || shard->applied_step() != reg.resume_step);
  auto fail = [&](const std::string& detail) {
    TLOG_ERROR("{}", detail);
    Progress failed;
    failed.state = MemberState::kFailed;
    failed.detail = detail;
    chief->SetProgress(failed);
    chief->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
    return kExitRuntimeFailure;
  };
  if (restored_other_step || (ctx.restored_step >= 0 && shard->timeline() != reg.timeline)) {
    return fail("ps:" + std::to_string(ctx.index) + " was restored to step " +
                std::to_string(ctx.restored_step) + " and is at step " +
                std::to_string(shard->applied_step()) + " on timeline " +
                std::to_string(shard->timeline()) +
                ", the job resumes from the checkpoint of step " + std::to_string(reg.resume_step) +
                " on timeline " + std::to_string(reg.timeline));
  }
  // Rejoining a job in training: every push a worker has finished a step with was logged by this
  // shard, so after its replay the shard is at least at the slowest worker's step. A shard far
  // behind it lost its data (a lost machine, a deleted directory): no worker can resend what it
  // lacks, and only a rollback to the last checkpoint can go on (PROTOCOLS §8).
  if (auto view = chief->View(std::chrono::milliseconds(2000));
      view.ok() && view->job_state == JobState::kTraining && view->step >= 0) {
    const int64_t margin = job.train.embedding_staleness + 2;
    if (shard->applied_step() + margin < view->step) {
      return fail("ps:" + std::to_string(ctx.index) + " lost its data: it is at step " +
                  std::to_string(shard->applied_step()) + ", the slowest worker at step " +
                  std::to_string(view->step) + "; the job must roll back to its last checkpoint");
    }
  }
  Progress progress;
  progress.state = MemberState::kServing;
  std::optional<std::chrono::steady_clock::time_point> stop_deadline;
  for (;;) {
    progress.step = shard->applied_step();
    chief->SetProgress(progress);
    int sig = 0;
    if (WaitStopSignal(ctx.stop_signals, std::chrono::milliseconds(200), &sig)) {
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
      return ExitWhenFenced(chief.get(), config::Role::kPs, static_cast<uint32_t>(ctx.index));
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

}  // namespace tandem::cli
