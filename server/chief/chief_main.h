// `tandem chief`: serve membership, barriers, the rendezvous store and the cluster view until
// the job has ended and its members have left (the shared start-up is common/daemon/daemon.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/daemon/daemon.h"
#include "server/chief/chief_service.h"

namespace tandem::chief {

class ChiefDaemon : public daemon::DaemonRole {
 public:
  explicit ChiefDaemon(bool new_run) : new_run_(new_run) {}
  std::vector<wire::LaneOptions> Lanes(const config::JobConfig& job) const override;
  std::optional<int> Prepare(const daemon::RoleContext& ctx) override;
  void Started(const daemon::RoleContext& ctx, metrics::Registry* registry) override;
  void Ready(const daemon::RoleContext& ctx) override;
  int Run(const daemon::RoleContext& ctx) override;
  void Stopped(int status) override;

 private:
  const bool new_run_;
  std::unique_ptr<ChiefService> service_;
};

// The whole process: the exit status (PROTOCOLS §12).
int RunChief(const daemon::DaemonArgs& args, const std::optional<std::string>& tf_config);

}  // namespace tandem::chief
