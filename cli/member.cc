#include "cli/member.h"

#include "common/exit_codes.h"
#include "common/log.h"
#include "common/sd_notify.h"

namespace tandem::cli {

std::unique_ptr<ChiefClient> JoinJob(const RoleContext& ctx, wire::Role role,
                                     const std::string& determinism_class, int* exit_status,
                                     Registration* registration) {
  const auto& job = *ctx.job;
  ChiefClientOptions o;
  o.chief_endpoint = "tcp://" + job.cluster.chief.at(0);
  o.identity = ctx.server->identity();
  o.identity.role = role;
  o.address = ctx.server->endpoint();
  o.config_hash = job.ComputationHash();
  o.determinism_class = determinism_class;
  o.heartbeat_interval = std::chrono::milliseconds(job.chief.heartbeat_interval_ms);
  auto client = std::make_unique<ChiefClient>(ctx.context, o);
  auto reg = client->Register(/*step=*/-1, std::chrono::seconds(job.recovery.max_wait_s));
  if (!reg.ok()) {
    TLOG_ERROR("registration with the chief at {} failed: {}", o.chief_endpoint,
               reg.status().ToString());
    *exit_status =
        reg.status().code() == StatusCode::kPermissionDenied ? kExitFenced : kExitRuntimeFailure;
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
  SdNotify("READY=1\nSTATUS=" + std::string(wire::RoleName(role)) + ":" +
           std::to_string(ctx.index) + " registered as incarnation " +
           std::to_string(reg->incarnation));
  return client;
}

}  // namespace tandem::cli
