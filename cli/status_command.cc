#include "cli/status_command.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cluster_file.h"
#include "common/chief_client.h"
#include "common/config/job_config.h"
#include "common/daemon/security_setup.h"
#include "common/exit_codes.h"
#include "common/job_id.h"
#include "common/wire/curve_keys.h"

namespace tandem::cli {

using daemon::ApplySecurity;
namespace {

struct Target {
  std::string chief_endpoint;
  std::string job_id;  // hex; empty when unknown
};

// Reads checkpoint.dir/job_id without creating it: status must not change anything.
std::string ExistingJobId(const std::string& checkpoint_dir) {
  std::ifstream in(checkpoint_dir + "/job_id");
  std::string hex;
  in >> hex;
  return hex;
}

StatusOr<Target> FromConfig(const StatusArgs& args) {
  std::vector<config::Override> overrides;
  for (const auto& s : args.sets) overrides.push_back({s});
  auto job = config::LoadJobConfig(args.config_path, overrides);
  if (!job.ok()) return job.status();
  if (Status secured = ApplySecurity(*job); !secured.ok()) return secured;
  if (job->cluster.chief.empty()) return Status::InvalidArgument("cluster.chief is empty");
  const std::string& chief = job->cluster.chief[0];
  if (chief.ends_with(":0"))
    return Status::NotFound("the config names the chief with port 0 (" + chief +
                            "): use `tandem status --dir OUTPUT` for a local cluster");
  return Target{"tcp://" + chief, ExistingJobId(job->checkpoint.dir)};
}

StatusOr<Target> FromDir(const std::string& dir) {
  auto file = ReadClusterFile(dir + "/cluster.json");
  if (!file.ok()) return file.status();
  if (!file->security_keys.empty()) {
    auto keys = wire::LoadCurveKeys(file->security_keys);
    if (!keys.ok()) return keys.status();
    wire::SetDefaultCurveKeys(*keys);
  }
  for (const auto& m : file->members)
    if (m.task == "chief:0") return Target{m.endpoint, file->job_id};
  return Status::NotFound(dir + "/cluster.json names no chief:0");
}

// A member that is running and in touch with the chief.
bool IsUp(const MemberView& m) {
  return IsPresent(m.state) && m.state != MemberState::kFailed && m.state != MemberState::kStopped;
}

nlohmann::json Number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nullptr; }

nlohmann::json ToJson(const std::string& job_id, const std::string& chief, const ClusterView& v) {
  nlohmann::json members = nlohmann::json::array();
  int up = 0;
  for (const auto& m : v.members) {
    up += IsUp(m);
    const std::string role(config::RoleName(m.role));
    members.push_back({{"role", role},
                       {"index", m.index},
                       {"task", role + ":" + std::to_string(m.index)},
                       {"state", Name(m.state)},
                       {"step", m.step},
                       {"generation", m.generation},
                       {"incarnation", m.incarnation},
                       {"samples_per_sec", Number(m.samples_per_sec)},
                       {"pid", m.pid},
                       {"host", m.host},
                       {"address", m.address},
                       {"ms_since_heartbeat", m.ms_since_heartbeat},
                       {"lost_reason", m.lost_reason},
                       {"waiting_on", m.waiting_on},
                       {"determinism_class", m.determinism_class},
                       {"bad_lines", m.bad_lines}});
  }
  return {{"job_id", job_id},
          {"chief", chief},
          {"job_state", Name(v.job_state)},
          {"step", v.step},
          {"total_steps", v.total_steps},
          {"samples_per_sec", Number(v.samples_per_sec)},
          {"loss", Number(v.loss)},
          {"auc", Number(v.auc)},
          {"logloss", Number(v.logloss)},
          {"teacher_auc", Number(v.teacher_auc)},
          {"model_checksum", v.model_checksum},
          {"detail", v.detail},
          {"generation", v.generation},
          {"term", v.term},
          {"timeline", v.timeline},
          {"last_checkpoint_step", v.last_checkpoint_step},
          {"elapsed_ms", v.elapsed_ms},
          {"config_hash", v.config_hash},
          {"bad_lines", v.bad_lines},
          {"members", members},
          {"up", up},
          {"expected", v.members.size()}};
}

std::string Fixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

void PrintText(const std::string& job_id, const ClusterView& v) {
  std::printf(
      "job %s: %s, step %lld/%lld, %s samples/s, loss %s, auc %s, generation %llu, "
      "term %llu, last checkpoint %s\n",
      job_id.empty() ? "?" : job_id.c_str(), std::string(Name(v.job_state)).c_str(),
      static_cast<long long>(v.step), static_cast<long long>(v.total_steps),
      Fixed(v.samples_per_sec, 0).c_str(), Fixed(v.loss, 4).c_str(), Fixed(v.auc, 4).c_str(),
      static_cast<unsigned long long>(v.generation), static_cast<unsigned long long>(v.term),
      v.last_checkpoint_step < 0 ? "none" : std::to_string(v.last_checkpoint_step).c_str());
  if (!v.detail.empty()) std::printf("  %s\n", v.detail.c_str());
  if (!v.model_checksum.empty()) std::printf("  model checksum %s\n", v.model_checksum.c_str());
  // Only when there are some: they are skipped below data.max_bad_fraction, and said here so
  // that a dirty file does not go unnoticed (issue 18).
  if (v.bad_lines > 0)
    std::printf("  malformed data lines skipped %lld (see the workers' logs)\n",
                static_cast<long long>(v.bad_lines));
  std::printf("%-7s %5s %-10s %8s %4s %6s %10s %8s  %s\n", "ROLE", "INDEX", "STATE", "STEP", "GEN",
              "INC", "SAMPLES/S", "PID", "ADDRESS");
  for (const auto& m : v.members) {
    std::printf(
        "%-7s %5u %-10s %8lld %4llu %6llu %10s %8s  %s\n",
        std::string(config::RoleName(m.role)).c_str(), m.index, std::string(Name(m.state)).c_str(),
        static_cast<long long>(m.step), static_cast<unsigned long long>(m.generation),
        static_cast<unsigned long long>(m.incarnation),
        m.role == config::Role::kWorker ? Fixed(m.samples_per_sec, 0).c_str() : "-",
        m.pid ? std::to_string(m.pid).c_str() : "-", m.address.empty() ? "-" : m.address.c_str());
    if (!m.lost_reason.empty()) std::printf("        lost: %s\n", m.lost_reason.c_str());
    if (!m.waiting_on.empty()) std::printf("        waiting: %s\n", m.waiting_on.c_str());
  }
}

}  // namespace

int RunStatus(const StatusArgs& args) {
  if (args.config_path.empty() == args.dir.empty()) {
    std::fprintf(stderr, "tandem status: give exactly one of --config or --dir\n");
    return kExitUsage;
  }
  if (args.timeout_ms <= 0) {
    std::fprintf(stderr, "tandem status: --timeout-ms must be positive\n");
    return kExitUsage;
  }
  StatusOr<Target> target = args.dir.empty() ? FromConfig(args) : FromDir(args.dir);
  if (!target.ok()) {
    std::fprintf(stderr, "tandem status: %s\n", target.status().message().c_str());
    return ExitCodeFor(target.status());
  }
  ChiefClientOptions o;
  o.chief_endpoint = target->chief_endpoint;
  o.identity.role = wire::Role::TOOL;
  o.call_budget = std::chrono::milliseconds(args.timeout_ms);
  const std::string job_hex = args.job_id.empty() ? target->job_id : args.job_id;
  if (!job_hex.empty()) {
    auto id = ParseJobId(job_hex);
    if (!id.ok()) {
      std::fprintf(stderr, "tandem status: %s\n", id.status().message().c_str());
      return kExitUsage;
    }
    o.identity.job_id = *id;
  }
  zmq::context_t context(1);
  ChiefClient client(&context, o);
  auto view = client.View(std::chrono::milliseconds(args.timeout_ms));
  if (!view.ok()) {
    if (args.json) {
      nlohmann::json out = {{"job_id", job_hex},
                            {"chief", target->chief_endpoint},
                            {"error", "the chief does not answer: " + view.status().ToString()}};
      std::printf("%s\n", out.dump().c_str());
    } else {
      std::printf("tandem status: the chief at %s does not answer: %s\n",
                  target->chief_endpoint.c_str(), view.status().ToString().c_str());
    }
    return kExitRuntimeFailure;
  }
  if (args.json)
    std::printf("%s\n", ToJson(job_hex, target->chief_endpoint, *view).dump().c_str());
  else
    PrintText(job_hex, *view);
  bool all_up = true;
  for (const auto& m : view->members) all_up = all_up && IsUp(m);
  return all_up || view->job_state == JobState::kDone ? kExitOk : kExitRuntimeFailure;
}

}  // namespace tandem::cli
