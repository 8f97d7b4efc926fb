// `tandem ps`: the shard is open and served (RunDaemon); join the job and serve until the chief
// says the job has ended, then leave a restore point so the next start replays nothing.
#include "cli/member.h"
#include "cli/roles.h"
#include "common/determinism_class.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "server/ps/shard.h"

namespace tandem::cli {
namespace {
bool Ended(const std::string& job_state) {
  return job_state == "done" || job_state == "stopped" || job_state == "failed";
}
}  // namespace

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
  auto chief = JoinJob(ctx, wire::Role::PS, DeterminismClass(1, ""), &exit_status, &reg);
  if (!chief) return exit_status;
  // The daemon restored the shard to the checkpoint the chief named before it opened it; the
  // registration must confirm it (a chief restarted in between may resume from another one), and
  // the shard must run on the timeline the workers are handed, or every push is refused.
  const bool restored_other_step =
      ctx.restored_step >= 0 &&
      (reg.resume_step != ctx.restored_step || shard->applied_step() != reg.resume_step);
  if (restored_other_step || (ctx.restored_step >= 0 && shard->timeline() != reg.timeline)) {
    TLOG_ERROR(
        "the job resumes from the checkpoint of step {} on timeline {}, but this shard was "
        "restored to step {} and is at step {} on timeline {}",
        reg.resume_step, reg.timeline, ctx.restored_step, shard->applied_step(), shard->timeline());
    Progress failed;
    failed.state = "failed";
    failed.detail = "ps:" + std::to_string(ctx.index) + " is at step " +
                    std::to_string(shard->applied_step()) + ", the checkpoint at step " +
                    std::to_string(reg.resume_step);
    chief->SetProgress(failed);
    chief->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
    return kExitRuntimeFailure;
  }
  Progress progress;
  progress.state = "serving";
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
      TLOG_ERROR("this incarnation was replaced: exiting");
      return kExitFenced;
    }
    if (Ended(chief->job_state())) {
      TLOG_INFO("the job has ended ({}): leaving", chief->job_state());
      break;
    }
    if (stop_deadline && std::chrono::steady_clock::now() > *stop_deadline) {
      TLOG_WARN("the job did not end in time after the stop request: leaving");
      break;
    }
  }
  progress.step = shard->applied_step();
  progress.state = "stopped";
  chief->SetProgress(progress);
  chief->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
  chief->StopHeartbeats();
  return kExitOk;
}

}  // namespace tandem::cli
