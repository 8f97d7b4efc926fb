// `tandem chief`: serve membership, barriers, the rendezvous store and the cluster view until
// the job has ended and its members have left.
#include "cli/roles.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "server/chief/chief_service.h"

namespace tandem::cli {

namespace {
bool Ended(const std::string& s) { return s == "done" || s == "stopped" || s == "failed"; }
}  // namespace

int RunChiefRole(const RoleContext& ctx, chief::ChiefService* service) {
  const auto& job = *ctx.job;
  if (Status s = service->Start(); !s.ok()) {
    TLOG_ERROR("cannot start the heartbeat monitor: {}", s.ToString());
    return kExitRuntimeFailure;
  }
  // How long members get to report and leave once the job has ended or was asked to stop.
  const auto leave_grace =
      std::chrono::milliseconds(job.collective.timeout_ms + job.chief.heartbeat_timeout_ms + 10000);
  for (;;) {
    int sig = 0;
    if (WaitStopSignal(ctx.stop_signals, std::chrono::milliseconds(200), &sig)) {
      TLOG_INFO("received {}: stopping the job", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      service->RequestStop(std::string(sig == SIGTERM ? "SIGTERM" : "SIGINT") + " to the chief");
      break;
    }
    if (Ended(service->job_state())) break;
    if (Status s = service->fatal(); !s.ok()) {
      service->Stop();
      if (Status c = service->CloseRun(); !c.ok()) TLOG_WARN("closing the run: {}", c.ToString());
      // kFailedPrecondition (recovery.max_rollbacks) is 75: do not restart.
      return ExitCodeFor(s);
    }
  }
  const std::string state = service->WaitFinished(std::chrono::steady_clock::now() + leave_grace);
  TLOG_INFO("job {}: the chief leaves", state);
  service->Stop();
  // Leaving on purpose closes the run; a chief killed before this line is rejoined by the next.
  if (Status c = service->CloseRun(); !c.ok()) TLOG_WARN("closing the run: {}", c.ToString());
  return state == "failed" ? kExitRuntimeFailure : kExitOk;
}

}  // namespace tandem::cli
