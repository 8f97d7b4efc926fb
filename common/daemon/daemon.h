// The start-up every daemon (chief, ps, worker) shares: config and task first (exit 3 before any
// port is bound), logging, the job id, CURVE, the RPC server, /metrics, the ready file; then the
// role runs until it ends or SIGTERM/SIGINT stops it (DESIGN §1: the whole job stops). What
// differs between the roles is a DaemonRole, which each process's folder provides
// (server/chief/chief_main.h, server/ps/ps_main.h, worker/worker_main.h).
#pragma once

#include <signal.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/config/cluster_spec.h"
#include "common/config/job_config.h"
#include "common/job_id.h"
#include "common/metrics/prometheus.h"
#include "common/wire/rpc_server.h"

namespace tandem::daemon {

struct DaemonArgs {
  config::Role role = config::Role::kWorker;
  std::string config_path;
  std::vector<std::string> sets;    // --set key=value
  std::optional<std::string> task;  // --task TYPE:INDEX
  std::string job_id;               // --job-id HEX; empty: checkpoint.dir/job_id
  uint64_t incarnation = 0;         // --incarnation: the last one the chief issued (0: none)
  std::string ready_file;           // --ready-file: JSON {address, pid, ...} written after bind
  std::string log_level = "info";
  bool new_run = false;  // --new-run (chief): every process was started afresh; see ChiefService
};

// What a role is given once its RPC server exists. Everything outlives the role's calls.
struct RoleContext {
  const config::JobConfig* job = nullptr;
  int index = 0;
  JobId job_id;
  std::string host;  // this task's host (from the cluster spec)
  zmq::context_t* context = nullptr;
  wire::RpcServer* server = nullptr;  // not started yet in Prepare, serving from Started on
  sigset_t stop_signals;              // blocked in every thread; see WaitStopSignal
};

// A daemon's own part, called by RunDaemon in this order on the main thread: Lanes, Prepare,
// Started, Ready, Run, Stopped.
class DaemonRole {
 public:
  virtual ~DaemonRole() = default;
  // The RPC server's lanes: which requests get which threads.
  virtual std::vector<wire::LaneOptions> Lanes(const config::JobConfig& job) const = 0;
  // Before the port is bound: opens the role's state and registers its services on ctx.server,
  // so that no request ever sees a half-opened daemon. Returns the exit status when the daemon
  // must not go on (it has logged why), nullopt otherwise.
  virtual std::optional<int> Prepare(const RoleContext& ctx) = 0;
  // Once bound: the role's gauges on /metrics, and what it has to say about the host.
  virtual void Started(const RoleContext& ctx, metrics::Registry* registry) = 0;
  // Once /metrics and the ready file are there (the chief tells systemd it is ready).
  virtual void Ready(const RoleContext&) {}
  // The role's life: returns the exit status (PROTOCOLS §12) or kRoleRejoin (member.h).
  virtual int Run(const RoleContext& ctx) = 0;
  // After the server stopped, with Run's status. A role that holds requests (parked ones) answers
  // or drops them here: their answers report to the daemon's metrics, which are gone once
  // RunDaemon has returned and the role is destroyed.
  virtual void Stopped(int /*status*/) {}
};

// Returns the process exit status (PROTOCOLS §12). `tf_config` is TF_CONFIG's value, if set.
int RunDaemon(const DaemonArgs& args, const std::optional<std::string>& tf_config,
              DaemonRole* role);

// Writes `text` to `path` atomically (tmp + rename).
bool WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace tandem::daemon
