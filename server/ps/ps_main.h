// `tandem ps`: the shard is restored and opened before the port is bound, joins the job and
// serves until the chief says the job has ended, then leaves a restore point so that the next
// start replays nothing (the shared start-up is common/daemon/daemon.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/chief_client.h"
#include "common/daemon/daemon.h"
#include "server/ps/ps_service.h"
#include "server/ps/shard.h"

namespace tandem::ps {

class PsDaemon : public daemon::DaemonRole {
 public:
  std::vector<wire::LaneOptions> Lanes(const config::JobConfig& job) const override;
  std::optional<int> Prepare(const daemon::RoleContext& ctx) override;
  void Started(const daemon::RoleContext& ctx, metrics::Registry* registry) override;
  int Run(const daemon::RoleContext& ctx) override;
  void Stopped(int status) override;

  std::string malloc_arenas;  // what LimitMallocArenas did, for Prepare's log (set by RunPs)

 private:
  // Why the opened shard cannot serve the job the chief registered it in (restored to another
  // checkpoint or timeline, or far behind the workers: its data was lost), or "".
  std::string WrongState(const daemon::RoleContext& ctx, ChiefClient* chief,
                         const Registration& reg) const;

  // The checkpoint step the shard was restored to before serving (a job resuming), or -1 (a
  // fresh job, or a shard restarted while the job trains: it recovers from its own log).
  int64_t restored_step_ = -1;
  std::unique_ptr<Shard> shard_;
  std::unique_ptr<PsService> service_;
};

// The whole process: the exit status (PROTOCOLS §12) or daemon::kRoleRejoin.
int RunPs(const daemon::DaemonArgs& args, const std::optional<std::string>& tf_config);

}  // namespace tandem::ps
