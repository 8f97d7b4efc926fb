// What each daemon does once its RPC server is bound (RunDaemon does the common part: config,
// task, job id, logging, the server, the ready file). Each returns the exit status
// (PROTOCOLS §12) and stops on SIGTERM/SIGINT as DESIGN §1 says: the whole job stops.
#pragma once

#include <signal.h>

#include <string>
#include <zmq.hpp>

#include "cli/stop_signals.h"
#include "common/config/job_config.h"
#include "common/job_id.h"
#include "common/wire/rpc_server.h"

namespace tandem::ps {
class Shard;
}
namespace tandem::chief {
class ChiefService;
}

namespace tandem::cli {

struct WorkerGauges;

struct RoleContext {
  const config::JobConfig* job = nullptr;
  int index = 0;
  JobId job_id;
  std::string host;  // this task's host (from the cluster spec)
  zmq::context_t* context = nullptr;
  wire::RpcServer* server = nullptr;  // started
  sigset_t stop_signals;              // blocked in every thread; see WaitStopSignal
  // ps: the checkpoint step RunDaemon restored the shard to before serving (a job resuming), or
  // -1 (a fresh job, or a shard restarted while the job trains: it recovers from its own log).
  int64_t restored_step = -1;
  WorkerGauges* worker_gauges = nullptr;  // worker: its progress for /metrics
};

int RunChiefRole(const RoleContext& ctx, chief::ChiefService* service);
int RunPsRole(const RoleContext& ctx, ps::Shard* shard);
int RunWorkerRole(const RoleContext& ctx);

}  // namespace tandem::cli
