// `tandem worker`: join the job, wait for the whole cluster, connect to the shards and the other
// replicas, train (rolling forward across the loss of a replica: worker/roll_forward/), report
// the result to the chief and exit (the shared start-up is common/daemon/daemon.h).
#pragma once

#include <optional>
#include <string>

#include "common/daemon/daemon.h"
#include "worker/worker_metrics.h"

namespace tandem::worker {

class WorkerDaemon : public daemon::DaemonRole {
 public:
  std::vector<wire::LaneOptions> Lanes(const config::JobConfig& job) const override;
  std::optional<int> Prepare(const daemon::RoleContext& ctx) override;
  void Started(const daemon::RoleContext& ctx, metrics::Registry* registry) override;
  int Run(const daemon::RoleContext& ctx) override;

 private:
  WorkerGauges gauges_;  // its progress for /metrics
};

// The whole process: the exit status (PROTOCOLS §12) or daemon::kRoleRejoin.
int RunWorker(const daemon::DaemonArgs& args, const std::optional<std::string>& tf_config);

}  // namespace tandem::worker
