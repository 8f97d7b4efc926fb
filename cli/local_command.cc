#include "cli/local_command.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cluster_file.h"
#include "cli/stop_signals.h"
#include "common/config/job_config.h"
#include "common/exit_codes.h"
#include "common/job_id.h"
#include "common/subprocess.h"
#include "common/wire/diagnostics.h"

namespace tandem::cli {
namespace {

using std::chrono::milliseconds;

struct Child {
  std::string role;
  int index = 0;
  std::string task() const { return role + ":" + std::to_string(index); }
  std::string ready_file;
  std::string log_file;
  std::optional<Subprocess> process;
  std::string endpoint;
  int restarts = 0;
};

std::string LoopbackList(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ",127.0.0.1:0" : "127.0.0.1:0");
  return s + "]";
}

Status StartChild(const LocalArgs& args, const std::string& job_hex, Child* c) {
  std::error_code ec;
  std::filesystem::remove(c->ready_file, ec);
  SpawnOptions o;
  o.argv = {SelfExecutable(), c->role, "--config", args.config_path, "--task", c->task()};
  for (const auto& s : args.sets) o.argv.insert(o.argv.end(), {"--set", s});
  // The counts come from --ps/--workers; every port is 0 and read back from the ready file.
  o.argv.insert(o.argv.end(), {"--set", "cluster.chief=[127.0.0.1:0]", "--set",
                               "cluster.ps=" + LoopbackList(args.num_ps), "--set",
                               "cluster.workers=" + LoopbackList(args.num_workers), "--job-id",
                               job_hex, "--ready-file", c->ready_file, "--incarnation",
                               std::to_string(c->restarts + 1), "--log-level", args.log_level});
  o.unset_env = {"TF_CONFIG"};  // DESIGN §1: `local` ignores it and removes it from children
  o.output_path = c->log_file;
  auto p = Subprocess::Spawn(o);
  if (!p.ok()) return p.status();
  c->process.emplace(std::move(p).value());
  return Status::Ok();
}

std::string Tail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return all.size() > max_bytes ? all.substr(all.size() - max_bytes) : all;
}

// Waits for the child's ready file; fails if it exits first or time runs out.
Status AwaitReady(Child* c, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    std::ifstream in(c->ready_file);
    if (in) {
      auto j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_discarded() && j.contains("address")) {
        c->endpoint = j["address"].get<std::string>();
        return Status::Ok();
      }
    }
    if (!c->process->running())
      return Status::Unavailable(c->task() + " exited (" + c->process->exit_info()->ToString() +
                                 ") before binding; its log:\n" + Tail(c->log_file, 2000));
    if (std::chrono::steady_clock::now() > deadline)
      return Status::DeadlineExceeded(c->task() + " did not bind in time");
    std::this_thread::sleep_for(milliseconds(20));
  }
}

int StopAll(std::vector<Child>& children) {
  for (auto& c : children)
    if (c.process) c.process->Signal(SIGTERM);
  int worst = kExitOk;
  for (auto& c : children) {
    if (!c.process) continue;
    ExitInfo e = c.process->Stop(milliseconds(10000));
    if (!e.exited() || e.exit_code != 0) {
      std::fprintf(stderr, "tandem local: %s ended with %s (log %s)\n", c.task().c_str(),
                   e.ToString().c_str(), c.log_file.c_str());
      worst = kExitRuntimeFailure;
    }
  }
  return worst;
}

int PingAll(const std::string& job_hex, std::vector<Child>& children) {
  wire::Identity me;
  me.role = wire::Role::TOOL;
  me.job_id = *ParseJobId(job_hex);
  zmq::context_t context(1);
  wire::RpcClient client(&context, me);
  int up = 0;
  for (auto& c : children) {
    auto h = client.Connect(c.endpoint);
    auto pong = h.ok() ? wire::Ping(&client, *h, milliseconds(3000))
                       : StatusOr<wire::PingResult>(h.status());
    if (pong.ok()) ++up;
    std::printf("  %-10s %-28s pid %-8d %s\n", c.task().c_str(), c.endpoint.c_str(),
                c.process->pid(), pong.ok() ? "answers" : pong.status().ToString().c_str());
  }
  return up;
}

// Supervises until SIGTERM/SIGINT: a child that exits non-zero or by a signal is restarted with
// a higher incarnation; one that exits 0 or 75 (fenced) is left down.
void Supervise(const LocalArgs& args, const std::string& job_hex, std::vector<Child>& children,
               const sigset_t& stop_signals, const std::string& cluster_path) {
  timespec tick{0, 200 * 1000 * 1000};
  for (;;) {
    siginfo_t info;
    if (sigtimedwait(&stop_signals, &info, &tick) > 0) {
      std::printf("tandem local: stopping the cluster\n");
      return;
    }
    bool changed = false;
    for (auto& c : children) {
      if (c.process->running()) continue;
      const ExitInfo e = *c.process->exit_info();
      if (e.exited() && (e.exit_code == kExitOk || e.exit_code == kExitFenced)) continue;
      c.restarts++;
      std::printf("tandem local: %s ended (%s); restarting (incarnation %d)\n", c.task().c_str(),
                  e.ToString().c_str(), c.restarts + 1);
      if (StartChild(args, job_hex, &c).ok() &&
          AwaitReady(&c,
                     std::chrono::steady_clock::now() + std::chrono::seconds(args.start_timeout_s))
              .ok())
        changed = true;
    }
    if (changed) {
      ClusterFile f{job_hex, {}};
      for (auto& c : children) f.members.push_back({c.task(), c.endpoint, c.process->pid()});
      WriteClusterFile(cluster_path, f).IgnoreError();  // status --dir shows stale pids at worst
    }
  }
}

}  // namespace

int RunLocal(const LocalArgs& args) {
  const sigset_t stop_signals = BlockStopSignals();
  // Progress lines must appear as they happen, also when stdout is a file or a pipe.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (args.num_ps < 1 || args.num_workers < 1) {
    std::fprintf(stderr, "tandem local: --ps and --workers must be >= 1\n");
    return kExitUsage;
  }
  std::vector<config::Override> overrides;
  for (const auto& s : args.sets) overrides.push_back({s});
  auto job = config::LoadJobConfig(args.config_path, overrides);
  if (!job.ok()) {
    std::fprintf(stderr, "tandem local: %s\n", job.status().message().c_str());
    return kExitInvalid;
  }
  auto job_id = LoadOrCreateJobId(job->checkpoint.dir);
  if (!job_id.ok()) {
    std::fprintf(stderr, "tandem local: %s\n", job_id.status().ToString().c_str());
    return kExitRuntimeFailure;
  }
  const std::string job_hex = job_id->ToHex();
  const std::string out = job->output.dir;
  std::vector<Child> children;
  auto add = [&](const std::string& role, int n) {
    for (int i = 0; i < n; ++i) {
      Child c;
      c.role = role;
      c.index = i;
      c.ready_file = out + "/run/" + role + "-" + std::to_string(i) + ".json";
      c.log_file = out + "/logs/" + role + "-" + std::to_string(i) + ".log";
      children.push_back(std::move(c));
    }
  };
  add("chief", 1);
  add("ps", args.num_ps);
  add("worker", args.num_workers);

  std::printf("tandem local: job %s, 1 chief, %d ps, %d workers; logs in %s/logs\n",
              job_hex.c_str(), args.num_ps, args.num_workers, out.c_str());
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(args.start_timeout_s);
  for (auto& c : children) {
    Status s = StartChild(args, job_hex, &c);
    if (!s.ok()) {
      std::fprintf(stderr, "tandem local: %s\n", s.ToString().c_str());
      StopAll(children);
      return kExitRuntimeFailure;
    }
  }
  for (auto& c : children) {
    Status s = AwaitReady(&c, deadline);
    if (!s.ok()) {
      std::fprintf(stderr, "tandem local: %s\n", s.message().c_str());
      StopAll(children);
      return c.process->exit_info() && c.process->exit_info()->exit_code == kExitInvalid
                 ? kExitInvalid
                 : kExitRuntimeFailure;
    }
  }
  ClusterFile f{job_hex, {}};
  for (auto& c : children) f.members.push_back({c.task(), c.endpoint, c.process->pid()});
  const std::string cluster_path = out + "/cluster.json";
  if (Status s = WriteClusterFile(cluster_path, f); !s.ok())
    std::fprintf(stderr, "tandem local: %s\n", s.ToString().c_str());
  const int up = PingAll(job_hex, children);
  std::printf("tandem local: %d/%zu processes answer; cluster file %s\n", up, children.size(),
              cluster_path.c_str());
  std::fflush(stdout);
  if (args.hold && up == static_cast<int>(children.size()))
    Supervise(args, job_hex, children, stop_signals, cluster_path);
  const int stopped = StopAll(children);
  if (up != static_cast<int>(children.size())) return kExitRuntimeFailure;
  if (!args.hold)
    std::printf(
        "tandem local: cluster checked and stopped (training arrives with the "
        "distributed-training issue)\n");
  return stopped;
}

}  // namespace tandem::cli
