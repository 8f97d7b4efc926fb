#include "common/daemon/member.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/daemon/stop_signals.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/sd_notify.h"

namespace tandem::daemon {

std::unique_ptr<ChiefClient> JoinJob(const RoleContext& ctx, config::Role role,
                                     const std::string& determinism_class, int* exit_status,
                                     Registration* registration) {
  const auto& job = *ctx.job;
  ChiefClientOptions o;
  o.chief_endpoint = "tcp://" + job.cluster.chief.at(0);
  o.identity = ctx.server->identity();
  o.identity.role = wire::ToWire(role);
  o.address = ctx.server->endpoint();
  o.config_hash = job.ComputationHash();
  o.determinism_class = determinism_class;
  o.heartbeat_interval = std::chrono::milliseconds(job.chief.heartbeat_interval_ms);
  auto client = std::make_unique<ChiefClient>(ctx.context, o);
  auto reg = client->Register(/*step=*/-1, std::chrono::seconds(job.recovery.max_wait_s),
                              [&ctx] { return StopSignalSeen(ctx.stop_signals); });
  if (reg.status().IsCancelled()) {
    TLOG_INFO("{}: stopping before the chief answered", reg.status().message());
    *exit_status = kExitOk;
    return nullptr;
  }
  if (!reg.ok()) {
    TLOG_ERROR("registration with the chief at {} failed: {}", o.chief_endpoint,
               reg.status().ToString());
    *exit_status = ExitCodeFor(reg.status());  // refused (kPermissionDenied): 75
    return nullptr;
  }
  wire::Identity self = ctx.server->identity();
  self.incarnation = reg->incarnation;
  self.generation = reg->generation;
  self.timeline = reg->timeline;
  self.term = reg->term;
  ctx.server->SetIdentity(self);
  log::SetIncarnation(reg->incarnation);
  log::SetGeneration(reg->generation);
  TLOG_INFO("registered with the chief (term {}): incarnation {}, generation {}, timeline {}",
            reg->term, reg->incarnation, reg->generation, reg->timeline);
  if (registration != nullptr) *registration = *reg;
  client->StartHeartbeats();
  // systemd (Type=notify): registered, and the heartbeat thread now pings the watchdog.
  SdNotify("READY=1\nSTATUS=" + std::string(config::RoleName(role)) + ":" +
           std::to_string(ctx.index) + " registered as incarnation " +
           std::to_string(reg->incarnation));
  return client;
}

int ExitWhenFenced(ChiefClient* chief, config::Role role, uint32_t index) {
  const std::string rank = std::string(config::RoleName(role)) + ":" + std::to_string(index);
  const uint64_t mine = chief->identity().incarnation;
  auto view = chief->View(std::chrono::milliseconds(3000));
  if (view.ok()) {
    for (const MemberView& m : view->members) {
      if (m.role != role || m.index != index) continue;
      if (m.incarnation > mine && m.state != MemberState::kLost) {
        TLOG_ERROR("{} was replaced by incarnation {} ({} at {}): exiting {}", rank, m.incarnation,
                   Name(m.state), m.address, static_cast<int>(kExitFenced));
        return kExitFenced;
      }
    }
  }
  TLOG_WARN(
      "{}#{} was declared lost and no successor holds the rank{}: starting again to rejoin as "
      "its successor",
      rank, mine, view.ok() ? "" : " (the chief did not answer: it decides at the registration)");
  return kRoleRejoin;
}

int ExecAgainToRejoin(char** argv) {
  const char* before = std::getenv("TANDEM_REJOINS");
  const int rejoins = before != nullptr ? std::atoi(before) + 1 : 1;
  const std::string count = std::to_string(rejoins);
  ::setenv("TANDEM_REJOINS", count.c_str(), 1);
  TLOG_INFO("rejoin {}: executing the same command line again (pid {})", rejoins, ::getpid());
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv("/proc/self/exe", argv);
  const int err = errno;
  TLOG_ERROR("cannot execute /proc/self/exe to rejoin: {}: exiting {} for the supervisor",
             std::strerror(err), static_cast<int>(kExitRuntimeFailure));
  return kExitRuntimeFailure;
}

}  // namespace tandem::daemon
