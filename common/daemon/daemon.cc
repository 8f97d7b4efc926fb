#include "common/daemon/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <variant>

#include "common/build_info.h"
#include "common/config/slurm_env.h"
#include "common/daemon/security_setup.h"
#include "common/daemon/stop_signals.h"
#include "common/exit_codes.h"
#include "common/failpoint.h"
#include "common/job_id.h"
#include "common/log.h"
#include "common/metrics/metrics_http.h"
#include "common/metrics/prometheus.h"
#include "common/wire/rpc_server.h"

namespace tandem::daemon {
namespace {

bool IsLoopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

StatusOr<JobId> ResolveJobId(const DaemonArgs& args, const config::JobConfig& job) {
  if (!args.job_id.empty()) return ParseJobId(args.job_id);
  return LoadOrCreateJobId(job.checkpoint.dir);
}

}  // namespace

// Not WriteFileDurably: these files (--ready-file, cluster.json) are rewritten by every start,
// so nothing needs them after a machine crash and the fsyncs would only slow the start; and
// the pid in the .tmp name keeps concurrent writers of one path apart.
bool WriteFileAtomically(const std::string& path, const std::string& text) {
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

namespace {

// The config and this process's task, logging, the job id and CURVE: what a daemon knows before
// it binds anything.
struct Loaded {
  config::JobConfig job;
  config::ResolvedTask resolved;
  JobId job_id;
};

// The exit status when the daemon must not start (before any port is bound: exit 3 for a bad
// config or task, 2 for a task the command line cannot name).
std::variant<Loaded, int> Load(const DaemonArgs& args,
                               const std::optional<std::string>& tf_config) {
  const std::string role = std::string(config::RoleName(args.role));
  std::vector<config::Override> overrides;
  for (const auto& s : args.sets) overrides.push_back({s});
  auto job = config::LoadJobConfig(args.config_path, overrides);
  if (!job.ok()) {
    std::fprintf(stderr, "tandem %s: %s\n", role.c_str(), job.status().message().c_str());
    return kExitInvalid;
  }
  // --task / TF_CONFIG, else a Slurm heterogeneous job's variables (common/config/slurm_env.h).
  auto resolved = config::ResolveDaemonTask(args.role, args.task, tf_config,
                                            config::ProcessEnvironment(), args.config_path, &*job);
  if (!resolved.ok()) {
    std::fprintf(stderr, "tandem %s: %s\n", role.c_str(), resolved.status().message().c_str());
    // Not ExitCodeFor: kFailedPrecondition here says no task was given (no --task, TF_CONFIG or
    // Slurm variables), a bad command line (2), not a refusal (75); any other error is the
    // config's or the environment's (3).
    return resolved.status().IsFailedPrecondition() ? kExitUsage : kExitInvalid;
  }
  if (resolved->task.role != args.role) {
    std::fprintf(stderr, "tandem %s: the task is %s, but this is `tandem %s`\n", role.c_str(),
                 resolved->task.ToString().c_str(), role.c_str());
    return kExitInvalid;
  }
  log::Init(resolved->task.ToString(), args.log_level);
  log::SetIncarnation(args.incarnation);
  if (Status armed = failpoint::Arm(resolved->task.ToString()); !armed.ok()) {
    TLOG_ERROR("{}", armed.ToString());
    return kExitInvalid;
  }
  TLOG_INFO("tandem {} starting: cluster from {}, task from {}; build {}; config hash {}",
            resolved->task.ToString(), resolved->cluster_from, resolved->task_from, BuildId(),
            job->ComputationHash());
  auto job_id = ResolveJobId(args, *job);
  if (!job_id.ok()) {
    TLOG_ERROR("job id: {}", job_id.status().ToString());
    return kExitInvalid;
  }
  if (Status secured = ApplySecurity(*job); !secured.ok()) {
    TLOG_ERROR("{}", secured.message());
    return kExitInvalid;
  }
  return Loaded{std::move(job).value(), std::move(resolved).value(), *job_id};
}

wire::ServerOptions ServerOptionsFor(const config::JobConfig& job, const config::BindAddress& bind,
                                     std::vector<wire::LaneOptions> lanes) {
  wire::ServerOptions options;
  options.bind_endpoint = "tcp://" + bind.bind;
  options.advertise_host = bind.advertise;
  options.max_connections = job.security.max_connections;
  options.max_in_flight_per_client = job.security.max_in_flight_per_client;
  options.max_frame_bytes = job.security.max_message_bytes;
  options.lanes = std::move(lanes);
  return options;
}

// Where the server listens and whom it serves, said once it is bound.
void LogBound(const config::JobConfig& job, const config::BindAddress& bind,
              const wire::RpcServer& server, const std::string& host, const JobId& job_id) {
  TLOG_INFO("bound {} (job {})", server.endpoint(), job_id.ToHex());
  if (bind.every_interface) {
    TLOG_WARN(
        "{} is no address of this host (it does not resolve here yet?): bound {} (every "
        "interface), advertised as {}",
        bind.advertise, bind.bind, server.endpoint());
  } else if (!bind.advertise.empty()) {
    TLOG_INFO("{} is a host name, which ZeroMQ cannot bind: bound {}, advertised as {}",
              bind.advertise, bind.bind, server.endpoint());
  }
  if (job.security.keys.empty() && !IsLoopback(host))
    TLOG_WARN("no security.keys: the training plane on {} accepts any client", server.endpoint());
  if (!job.security.keys.empty())
    TLOG_INFO("CURVE on: only holders of {}/cluster.key are served", job.security.keys);
}

// /metrics (metrics.port < 0: none).
StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> StartMetrics(const config::JobConfig& job,
                                                                   const config::BindAddress& bind,
                                                                   const std::string& host,
                                                                   metrics::Registry* registry) {
  if (job.metrics.port < 0) return std::unique_ptr<metrics::MetricsHttpServer>();
  const std::string metrics_host = bind.bind.substr(0, bind.bind.rfind(':'));
  TANDEM_ASSIGN_OR_RETURN(
      auto http, metrics::MetricsHttpServer::Start(metrics_host, static_cast<int>(job.metrics.port),
                                                   registry));
  TLOG_INFO("metrics on http://{}:{}/metrics", host, http->port());
  return http;
}

bool WriteReadyFile(const std::string& path, const wire::RpcServer& server, const Loaded& loaded,
                    const metrics::MetricsHttpServer* metrics_http) {
  nlohmann::json ready = {{"address", server.endpoint()},
                          {"pid", ::getpid()},
                          {"task", loaded.resolved.task.ToString()},
                          {"job_id", loaded.job_id.ToHex()}};
  if (metrics_http) ready["metrics_port"] = metrics_http->port();
  return WriteFileAtomically(path, ready.dump() + "\n");
}

}  // namespace

int RunDaemon(const DaemonArgs& args, const std::optional<std::string>& tf_config,
              DaemonRole* role) {
  const sigset_t stop_signals = BlockStopSignals();
  // A file-size limit (RLIMIT_FSIZE) reached must fail the write (EFBIG: the push is refused
  // like on a full disk) instead of killing the daemon.
  ::signal(SIGXFSZ, SIG_IGN);
  auto load = Load(args, tf_config);
  if (const int* refused = std::get_if<int>(&load)) return *refused;
  const Loaded& loaded = std::get<Loaded>(load);
  const config::JobConfig& job = loaded.job;
  zmq::context_t context(2);
  // A task named by DNS name (Kubernetes) is bound on every interface and advertised by name.
  const config::BindAddress bind = config::BindAddressFor(loaded.resolved.address);
  wire::Identity self;
  self.job_id = loaded.job_id;
  self.role = wire::ToWire(args.role);
  self.index = static_cast<uint32_t>(loaded.resolved.task.index);
  self.incarnation = args.incarnation;
  // /metrics (metrics.port): declared first, so that it outlives everything it reads.
  metrics::Registry registry;
  wire::RpcServer server(&context, ServerOptionsFor(job, bind, role->Lanes(job)), self);
  server.SetMetrics(&registry);
  RoleContext ctx;
  ctx.job = &job;
  ctx.index = loaded.resolved.task.index;
  ctx.job_id = loaded.job_id;
  ctx.host = loaded.resolved.address.substr(0, loaded.resolved.address.rfind(':'));
  ctx.context = &context;
  ctx.server = &server;
  ctx.stop_signals = stop_signals;
  if (std::optional<int> refused = role->Prepare(ctx)) return *refused;
  if (Status started = server.Start(); !started.ok()) {
    TLOG_ERROR("{}", started.ToString());
    return kExitRuntimeFailure;
  }
  LogBound(job, bind, server, ctx.host, loaded.job_id);
  role->Started(ctx, &registry);
  auto metrics_http = StartMetrics(job, bind, ctx.host, &registry);
  if (!metrics_http.ok()) {
    TLOG_ERROR("{}", metrics_http.status().ToString());
    return kExitRuntimeFailure;
  }
  if (!args.ready_file.empty() &&
      !WriteReadyFile(args.ready_file, server, loaded, metrics_http->get())) {
    TLOG_ERROR("cannot write ready file {}", args.ready_file);
    return kExitRuntimeFailure;
  }
  role->Ready(ctx);
  const int status = role->Run(ctx);
  server.Stop();
  // Before Stopped, which may release what the role's gauges read.
  metrics_http->reset();
  role->Stopped(status);
  auto st = server.stats();
  TLOG_INFO("stopped: {} requests, {} replies, {} malformed dropped, {} invalid, {} wrong job",
            st.received, st.replied, st.dropped_malformed, st.invalid, st.wrong_job);
  return status;
}

}  // namespace tandem::daemon
