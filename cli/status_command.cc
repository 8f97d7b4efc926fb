#include "cli/status_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/cluster_file.h"
#include "common/config/job_config.h"
#include "common/exit_codes.h"
#include "common/job_id.h"
#include "common/wire/diagnostics.h"

namespace tandem::cli {
namespace {

// Reads checkpoint.dir/job_id without creating it: status must not change anything.
std::string ExistingJobId(const std::string& checkpoint_dir) {
  std::ifstream in(checkpoint_dir + "/job_id");
  std::string hex;
  in >> hex;
  return hex;
}

StatusOr<ClusterFile> FromConfig(const StatusArgs& args) {
  std::vector<config::Override> overrides;
  for (const auto& s : args.sets) overrides.push_back({s});
  auto job = config::LoadJobConfig(args.config_path, overrides);
  if (!job.ok()) return job.status();
  ClusterFile f;
  f.job_id = ExistingJobId(job->checkpoint.dir);
  auto add = [&](const std::string& role, const std::vector<std::string>& addrs) {
    for (size_t i = 0; i < addrs.size(); ++i)
      f.members.push_back({role + ":" + std::to_string(i), "tcp://" + addrs[i], 0});
  };
  add("chief", job->cluster.chief);
  add("ps", job->cluster.ps);
  add("worker", job->cluster.workers);
  return f;
}

}  // namespace

int RunStatus(const StatusArgs& args) {
  if (args.config_path.empty() == args.dir.empty()) {
    std::fprintf(stderr, "tandem status: give exactly one of --config or --dir\n");
    return kExitUsage;
  }
  StatusOr<ClusterFile> cluster =
      args.dir.empty() ? FromConfig(args) : ReadClusterFile(args.dir + "/cluster.json");
  if (!cluster.ok()) {
    std::fprintf(stderr, "tandem status: %s\n", cluster.status().message().c_str());
    return cluster.status().IsInvalidArgument() ? kExitInvalid : kExitRuntimeFailure;
  }
  wire::Identity me;
  me.role = wire::Role::TOOL;
  std::string job_hex = args.job_id.empty() ? cluster->job_id : args.job_id;
  if (!job_hex.empty()) {
    auto id = ParseJobId(job_hex);
    if (!id.ok()) {
      std::fprintf(stderr, "tandem status: %s\n", id.status().message().c_str());
      return kExitUsage;
    }
    me.job_id = *id;
  }
  zmq::context_t context(1);
  wire::RpcClient client(&context, me);
  nlohmann::json out = {{"job_id", job_hex}, {"members", nlohmann::json::array()}};
  int up = 0;
  for (const auto& m : cluster->members) {
    nlohmann::json row = {{"task", m.task}, {"endpoint", m.endpoint}};
    if (m.endpoint.ends_with(":0")) {
      row["state"] = "unknown";
      row["error"] = "port 0 in the config: use `tandem status --dir OUTPUT`";
    } else {
      auto handle = client.Connect(m.endpoint);
      auto pong = handle.ok()
                      ? wire::Ping(&client, *handle, std::chrono::milliseconds(args.timeout_ms))
                      : StatusOr<wire::PingResult>(handle.status());
      if (pong.ok()) {
        ++up;
        row["state"] = "up";
        row["pid"] = pong->pid;
        row["incarnation"] = pong->peer.incarnation;
        row["generation"] = pong->peer.generation;
        row["uptime_ms"] = pong->uptime_ms;
        row["build_id"] = pong->build_id;
      } else {
        row["state"] = "down";
        row["error"] = pong.status().ToString();
      }
    }
    out["members"].push_back(row);
  }
  out["up"] = up;
  out["expected"] = cluster->members.size();
  if (args.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("job %s: %d/%zu processes answer\n", job_hex.empty() ? "?" : job_hex.c_str(), up,
                cluster->members.size());
    std::printf("%-10s %-28s %-6s %-8s %s\n", "TASK", "ENDPOINT", "STATE", "PID", "DETAIL");
    for (const auto& r : out["members"]) {
      std::string detail = r.contains("error")
                               ? r["error"].get<std::string>()
                               : "inc " + std::to_string(r["incarnation"].get<uint64_t>()) +
                                     ", up " +
                                     std::to_string(r["uptime_ms"].get<uint64_t>() / 1000) +
                                     " s, " + r["build_id"].get<std::string>();
      std::printf("%-10s %-28s %-6s %-8s %s\n", r["task"].get<std::string>().c_str(),
                  r["endpoint"].get<std::string>().c_str(), r["state"].get<std::string>().c_str(),
                  r.contains("pid") ? std::to_string(r["pid"].get<int>()).c_str() : "-",
                  detail.c_str());
    }
  }
  return up == static_cast<int>(cluster->members.size()) ? kExitOk : kExitRuntimeFailure;
}

}  // namespace tandem::cli
