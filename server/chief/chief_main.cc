#include "server/chief/chief_main.h"

#include "common/daemon/stop_signals.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/sd_notify.h"
#include "server/chief/chief_metrics.h"

namespace tandem::chief {

std::vector<wire::LaneOptions> ChiefDaemon::Lanes(const config::JobConfig&) const {
  return ChiefLanes();
}

std::optional<int> ChiefDaemon::Prepare(const daemon::RoleContext& ctx) {
  auto created = ChiefService::Create(*ctx.job, ctx.server, new_run_);
  if (!created.ok()) {
    TLOG_ERROR("cannot start the chief: {}", created.status().ToString());
    // Refusing to restart a job that keeps failing (recovery.max_rollbacks) is
    // kFailedPrecondition: 75, which the units do not restart.
    return ExitCodeFor(created.status());
  }
  service_ = std::move(created).value();
  service_->Register();
  return std::nullopt;
}

void ChiefDaemon::Started(const daemon::RoleContext&, metrics::Registry* registry) {
  AddChiefMetrics(registry, service_.get());
}

void ChiefDaemon::Ready(const daemon::RoleContext& ctx) {
  // systemd (Type=notify): the chief is ready once bound (its monitor pings the watchdog); a PS
  // or worker once registered, when its heartbeat thread starts pinging (common/daemon/member.cc).
  SdNotify("READY=1\nSTATUS=chief bound " + ctx.server->endpoint());
}

int ChiefDaemon::Run(const daemon::RoleContext& ctx) {
  ChiefService* service = service_.get();
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
    if (daemon::WaitStopSignal(ctx.stop_signals, std::chrono::milliseconds(50), &sig)) {
      TLOG_INFO("received {}: stopping the job", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      service->RequestStop(std::string(sig == SIGTERM ? "SIGTERM" : "SIGINT") + " to the chief");
      break;
    }
    if (IsTerminal(service->job_state())) break;
    if (Status s = service->fatal(); !s.ok()) {
      service->Stop();
      if (Status c = service->CloseRun(); !c.ok()) TLOG_WARN("closing the run: {}", c.ToString());
      // kFailedPrecondition (recovery.max_rollbacks) is 75: do not restart.
      return ExitCodeFor(s);
    }
  }
  // A stop signal now (the first one if the job ended by itself, else the second) means leave
  // now: a supervisor rolling a failed job back, or stopping it, does not wait out the grace.
  const JobState state =
      service->WaitFinished(std::chrono::steady_clock::now() + leave_grace, [&ctx] {
        int sig = 0;
        if (!daemon::WaitStopSignal(ctx.stop_signals, std::chrono::milliseconds(0), &sig))
          return false;
        TLOG_INFO("received {} while the members leave: leaving now",
                  sig == SIGTERM ? "SIGTERM" : "SIGINT");
        return true;
      });
  TLOG_INFO("job {}: the chief leaves", Name(state));
  service->Stop();
  // Leaving on purpose closes the run; a chief killed before this line is rejoined by the next.
  if (Status c = service->CloseRun(); !c.ok()) TLOG_WARN("closing the run: {}", c.ToString());
  return state == JobState::kFailed ? kExitRuntimeFailure : kExitOk;
}

// Parked barriers are answered now (DaemonRole::Stopped).
void ChiefDaemon::Stopped(int) { service_.reset(); }

int RunChief(const daemon::DaemonArgs& args, const std::optional<std::string>& tf_config) {
  ChiefDaemon role(args.new_run);
  return daemon::RunDaemon(args, tf_config, &role);
}

}  // namespace tandem::chief
