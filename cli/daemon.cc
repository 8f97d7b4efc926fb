#include "cli/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/daemon_metrics.h"
#include "cli/member.h"
#include "cli/roles.h"
#include "cli/security_setup.h"
#include "cli/stop_signals.h"
#include "common/build_info.h"
#include "common/checkpoint_layout.h"
#include "common/chief_client.h"
#include "common/config/slurm_env.h"
#include "common/exit_codes.h"
#include "common/job_id.h"
#include "common/log.h"
#include "common/metrics/metrics_http.h"
#include "common/metrics/prometheus.h"
#include "common/sd_notify.h"
#include "common/wire/rpc_server.h"
#include "server/chief/checkpoint_manifest.h"
#include "server/chief/chief_service.h"
#include "server/ps/ps_service.h"
#include "server/ps/shard_options.h"
#include "server/ps/shard_restore.h"
#include "worker/device/device_info.h"
#include "worker/worker_service.h"

namespace tandem::cli {
namespace {

wire::Role WireRole(config::Role r) {
  switch (r) {
    case config::Role::kChief:
      return wire::Role::CHIEF;
    case config::Role::kPs:
      return wire::Role::PS;
    case config::Role::kWorker:
      return wire::Role::WORKER;
  }
  return wire::Role::UNKNOWN;
}

bool IsLoopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

StatusOr<JobId> ResolveJobId(const DaemonArgs& args, const config::JobConfig& job) {
  if (!args.job_id.empty()) return ParseJobId(args.job_id);
  return LoadOrCreateJobId(job.checkpoint.dir);
}

const char* HowRestored(ps::RestoreKind kind) {
  switch (kind) {
    case ps::RestoreKind::kLocal:
      return "its local restore point";
    case ps::RestoreKind::kDurable:
      return "the durable copy";
    case ps::RestoreKind::kRepartitioned:
      return "every old part of the durable copy, re-partitioned";
  }
  return "?";
}

// The shard parts of a committed checkpoint's manifest, as PrepareShardForResume takes them.
StatusOr<ps::RestoreSource> RestoreSourceOf(const config::JobConfig& job, int64_t step,
                                            uint64_t run_timeline) {
  const std::string name = CheckpointDirName(step) + "/MANIFEST";
  std::ifstream in(job.checkpoint.dir + "/" + name, std::ios::binary);
  if (!in) return Status::DataLoss("cannot read " + job.checkpoint.dir + "/" + name);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TANDEM_ASSIGN_OR_RETURN(chief::Manifest m, chief::DecodeManifest(text, name));
  ps::RestoreSource source;
  source.checkpoint_dir = job.checkpoint.dir;
  source.step = m.step;
  source.manifest_timeline = m.timeline;
  source.run_timeline = run_timeline;
  source.num_ps = m.num_ps;
  for (const chief::ManifestPart& part : m.parts) {
    if (!part.name.starts_with("shard-")) continue;
    TANDEM_ASSIGN_OR_RETURN(ps::CheckpointPart p, ps::CheckpointPartFromJson(part.detail));
    source.parts.push_back(std::move(p));
  }
  std::sort(source.parts.begin(), source.parts.end(),
            [](const auto& a, const auto& b) { return a.shard < b.shard; });
  return source;
}

// A PS with a chief, before it opens its shard: asks the chief which checkpoint the job resumes
// from and, while the job is starting, prepares the shard's directory to resume from it, so that
// Shard::Open recovers exactly that step. Once the job trains, a (re)started shard recovers from
// its own restore points and log instead (PROTOCOLS §6). Returns the restored step, or -1.
StatusOr<int64_t> RestoreForResume(const config::JobConfig& job, const JobId& job_id,
                                   uint32_t index, zmq::context_t* context,
                                   const ps::ShardOptions& options, const sigset_t& stop_signals) {
  ChiefClientOptions o;
  o.chief_endpoint = "tcp://" + job.cluster.chief.at(0);
  o.identity.job_id = job_id;
  o.identity.role = wire::Role::TOOL;  // a query, as `tandem status` makes; not registered yet
  o.identity.index = index;
  ChiefClient chief(context, o);
  // The chief may start after us (`tandem local` starts everyone at once): View retries, says
  // so every few seconds, and gives up on SIGTERM.
  TANDEM_ASSIGN_OR_RETURN(ClusterView view,
                          chief.View(std::chrono::seconds(job.recovery.max_wait_s),
                                     [&stop_signals] { return StopSignalSeen(stop_signals); }));
  // elapsed_ms > 0 while "starting": a restarted chief rejoining a run that trained; its shards
  // are past the checkpoint and must keep what they applied.
  if (view.job_state != "starting" || view.elapsed_ms > 0) return -1;
  if (view.resume_step < 0) {
    // Nothing to resume from: every shard starts empty, whatever an earlier attempt of this job
    // left behind (a rollback before the first checkpoint must not serve its rows).
    bool cleared = false;
    TANDEM_RETURN_IF_ERROR(ps::ClearShardForFreshStart(options, &cleared));
    if (cleared)
      TLOG_INFO("shard {}: a fresh job start: what an earlier run left was removed", index);
    return -1;
  }
  TANDEM_ASSIGN_OR_RETURN(ps::RestoreSource source,
                          RestoreSourceOf(job, view.resume_step, view.timeline));
  if (source.manifest_timeline != source.run_timeline)
    TLOG_INFO("the checkpoint of step {} was taken on timeline {}; the job runs on timeline {}",
              source.step, source.manifest_timeline, source.run_timeline);
  TANDEM_ASSIGN_OR_RETURN(ps::RestoreReport report, ps::PrepareShardForResume(options, source));
  TLOG_INFO("shard {} restored to the checkpoint of step {} ({} shards then, {} now) from {}{}",
            index, source.step, source.num_ps, options.num_shards, HowRestored(report.kind),
            report.repaired.empty()
                ? std::string()
                : ", " + std::to_string(report.repaired.size()) + " damaged file(s) repaired");
  return source.step;
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

int RunDaemon(const DaemonArgs& args, const std::optional<std::string>& tf_config) {
  const sigset_t stop_signals = BlockStopSignals();
  // A file-size limit (RLIMIT_FSIZE) reached must fail the write (EFBIG: the push is refused
  // like on a full disk) instead of killing the daemon.
  ::signal(SIGXFSZ, SIG_IGN);
  std::vector<config::Override> overrides;
  for (const auto& s : args.sets) overrides.push_back({s});
  auto job = config::LoadJobConfig(args.config_path, overrides);
  if (!job.ok()) {
    std::fprintf(stderr, "tandem %s: %s\n", std::string(config::RoleName(args.role)).c_str(),
                 job.status().message().c_str());
    return kExitInvalid;
  }
  // --task / TF_CONFIG, else a Slurm heterogeneous job's variables (common/config/slurm_env.h).
  auto resolved = config::ResolveDaemonTask(args.role, args.task, tf_config,
                                            config::ProcessEnvironment(), args.config_path, &*job);
  if (!resolved.ok()) {
    std::fprintf(stderr, "tandem %s: %s\n", std::string(config::RoleName(args.role)).c_str(),
                 resolved.status().message().c_str());
    // Not ExitCodeFor: kFailedPrecondition here says no task was given (no --task, TF_CONFIG or
    // Slurm variables), a bad command line (2), not a refusal (75); any other error is the
    // config's or the environment's (3).
    return resolved.status().IsFailedPrecondition() ? kExitUsage : kExitInvalid;
  }
  if (resolved->task.role != args.role) {
    std::fprintf(stderr, "tandem %s: the task is %s, but this is `tandem %s`\n",
                 std::string(config::RoleName(args.role)).c_str(),
                 resolved->task.ToString().c_str(),
                 std::string(config::RoleName(args.role)).c_str());
    return kExitInvalid;
  }
  log::Init(resolved->task.ToString(), args.log_level);
  log::SetIncarnation(args.incarnation);
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
  zmq::context_t context(2);
  wire::ServerOptions options;
  // A task named by DNS name (Kubernetes) is bound on every interface and advertised by name.
  const config::BindAddress bind = config::BindAddressFor(resolved->address);
  options.bind_endpoint = "tcp://" + bind.bind;
  options.advertise_host = bind.advertise;
  options.max_connections = job->security.max_connections;
  options.max_in_flight_per_client = job->security.max_in_flight_per_client;
  options.max_frame_bytes = job->security.max_message_bytes;
  std::vector<wire::LaneOptions> lanes;
  switch (args.role) {
    case config::Role::kChief:
      options.lanes = chief::ChiefLanes();
      break;
    case config::Role::kPs:
      options.lanes = ps::PsLanes(static_cast<int>(job->ps.handler_threads));
      break;
    case config::Role::kWorker:
      options.lanes = worker::WorkerLanes();
      break;
  }
  wire::Identity self;
  self.job_id = *job_id;
  self.role = WireRole(args.role);
  self.index = static_cast<uint32_t>(resolved->task.index);
  self.incarnation = args.incarnation;
  // /metrics (metrics.port): declared first, so that it outlives everything it reads.
  metrics::Registry registry;
  wire::RpcServer server(&context, options, self);
  server.SetMetrics(&registry);
  std::unique_ptr<ps::Shard> shard;
  std::unique_ptr<ps::PsService> ps_service;
  std::unique_ptr<chief::ChiefService> chief_service;
  int64_t restored_step = -1;
  switch (args.role) {
    case config::Role::kChief: {
      auto created = chief::ChiefService::Create(*job, &server, args.new_run);
      if (!created.ok()) {
        TLOG_ERROR("cannot start the chief: {}", created.status().ToString());
        // Refusing to restart a job that keeps failing (recovery.max_rollbacks) is
        // kFailedPrecondition: 75, which the units do not restart.
        return ExitCodeFor(created.status());
      }
      chief_service = std::move(created).value();
      chief_service->Register();
      break;
    }
    case config::Role::kPs: {
      // Recovery (restore point + push-log replay), and before it the restore of the checkpoint
      // a starting job resumes from, complete before the port is bound, so no request ever sees
      // a half-recovered shard.
      const auto shard_options =
          ps::ShardOptionsFromConfig(*job, static_cast<uint32_t>(resolved->task.index));
      if (!job->cluster.chief.at(0).ends_with(":0")) {
        auto restored = RestoreForResume(*job, *job_id, shard_options.shard_index, &context,
                                         shard_options, stop_signals);
        if (restored.status().IsCancelled()) {
          TLOG_INFO("{}: stopping before the shard was opened", restored.status().message());
          return kExitOk;
        }
        if (!restored.ok()) {
          TLOG_ERROR("cannot restore the shard from the checkpoint: {}",
                     restored.status().ToString());
          // Refused by the chief (another job's, scenario 16) is kPermissionDenied: 75, do not
          // restart (PROTOCOLS §12).
          return ExitCodeFor(restored.status());
        }
        restored_step = *restored;
      }
      auto opened = ps::Shard::Open(shard_options);
      if (!opened.ok()) {
        TLOG_ERROR("cannot open the shard: {}", opened.status().ToString());
        return ExitCodeFor(opened.status());
      }
      shard = std::move(opened).value();
      ps_service = std::make_unique<ps::PsService>(shard.get(), &server);
      ps_service->Register();
      break;
    }
    case config::Role::kWorker:
      worker::RegisterWorkerService(&server);
      break;
  }
  Status started = server.Start();
  if (!started.ok()) {
    TLOG_ERROR("{}", started.ToString());
    return kExitRuntimeFailure;
  }
  const std::string host = resolved->address.substr(0, resolved->address.rfind(':'));
  TLOG_INFO("bound {} (job {})", server.endpoint(), job_id->ToHex());
  if (bind.every_interface) {
    TLOG_WARN(
        "{} is no address of this host (it does not resolve here yet?): bound {} (every "
        "interface), advertised as {}",
        bind.advertise, bind.bind, server.endpoint());
  } else if (!bind.advertise.empty()) {
    TLOG_INFO("{} is a host name, which ZeroMQ cannot bind: bound {}, advertised as {}",
              bind.advertise, bind.bind, server.endpoint());
  }
  if (job->security.keys.empty() && !IsLoopback(host))
    TLOG_WARN("no security.keys: the training plane on {} accepts any client", server.endpoint());
  if (!job->security.keys.empty())
    TLOG_INFO("CURVE on: only holders of {}/cluster.key are served", job->security.keys);
  // Only a GPU worker opens the CUDA plugin (and its ~90 MiB of cuBLASLt); `tandem --version`
  // shows the devices on any host.
  if (args.role == config::Role::kWorker && job->train.device == "cuda")
    TLOG_INFO("devices: {}", device::ProbeDevices().ToString());
  WorkerGauges worker_gauges;
  if (chief_service) AddChiefMetrics(&registry, chief_service.get());
  if (shard) AddPsMetrics(&registry, shard.get());
  if (args.role == config::Role::kWorker) AddWorkerMetrics(&registry, &worker_gauges);
  std::unique_ptr<metrics::MetricsHttpServer> metrics_http;
  if (job->metrics.port >= 0) {
    const std::string metrics_host = bind.bind.substr(0, bind.bind.rfind(':'));
    auto http = metrics::MetricsHttpServer::Start(metrics_host, static_cast<int>(job->metrics.port),
                                                  &registry);
    if (!http.ok()) {
      TLOG_ERROR("{}", http.status().ToString());
      return kExitRuntimeFailure;
    }
    metrics_http = std::move(http).value();
    TLOG_INFO("metrics on http://{}:{}/metrics", host, metrics_http->port());
  }
  if (!args.ready_file.empty()) {
    nlohmann::json ready = {{"address", server.endpoint()},
                            {"pid", ::getpid()},
                            {"task", resolved->task.ToString()},
                            {"job_id", job_id->ToHex()}};
    if (metrics_http) ready["metrics_port"] = metrics_http->port();
    if (!WriteFileAtomically(args.ready_file, ready.dump() + "\n")) {
      TLOG_ERROR("cannot write ready file {}", args.ready_file);
      return kExitRuntimeFailure;
    }
  }
  // systemd (Type=notify): the chief is ready once bound (its monitor pings the watchdog); a PS
  // or worker once registered, when its heartbeat thread starts pinging (cli/member.cc).
  if (args.role == config::Role::kChief)
    SdNotify("READY=1\nSTATUS=chief bound " + server.endpoint());
  RoleContext ctx;
  ctx.job = &*job;
  ctx.index = resolved->task.index;
  ctx.job_id = *job_id;
  ctx.host = host;
  ctx.context = &context;
  ctx.server = &server;
  ctx.stop_signals = stop_signals;
  ctx.restored_step = restored_step;
  ctx.worker_gauges = &worker_gauges;
  int status = kExitOk;
  switch (args.role) {
    case config::Role::kChief:
      status = RunChiefRole(ctx, chief_service.get());
      break;
    case config::Role::kPs:
      status = RunPsRole(ctx, shard.get());
      break;
    case config::Role::kWorker:
      status = RunWorkerRole(ctx);
      break;
  }
  server.Stop();
  if (shard && status != kRoleRejoin) {
    // A clean stop leaves a restore point, so the next start replays nothing. Not before a
    // rejoin: the replay of the log rebuilds the pre-images of the last applied step, which a
    // replacement worker's pulls of that step may need (PROTOCOLS §8); a restore point would
    // drop them.
    Status rp = shard->TakeRestorePoint();
    if (!rp.ok()) TLOG_WARN("final restore point failed: {}", rp.ToString());
    auto ss = shard->stats();
    TLOG_INFO("shard: applied step {}, {} pushes logged, {} duplicates, {} rows applied",
              shard->applied_step(), ss.pushes_logged, ss.duplicates, ss.rows_applied);
  }
  auto st = server.stats();
  TLOG_INFO("stopped: {} requests, {} replies, {} malformed dropped, {} invalid, {} wrong job",
            st.received, st.replied, st.dropped_malformed, st.invalid, st.wrong_job);
  return status;
}

}  // namespace tandem::cli
