// Helpers of the whole-job tests (local_job_test.cc, restore_test.cc): a small synthetic job's
// config, `tandem local` run to its end, and the metrics file read back.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "common/testing/test_util.h"

namespace tandem::testing {

// A small synthetic DLRM job under `dir`. Cluster addresses come from `tandem local`.
inline std::string SmallJob(const std::string& dir, int64_t steps) {
  return "cluster:\n  chief: [\"127.0.0.1:0\"]\n  ps: [\"127.0.0.1:0\"]\n"
         "  workers: [\"127.0.0.1:0\"]\n"
         "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 1]\n"
         "tables:\n  default:\n    optimizer: adagrad\n    lr: 0.3\n"
         "    init: {dist: uniform, scale: 0.01}\n"
         "data:\n  format: synthetic\n  num_categorical: 26\n"
         "  synthetic:\n    vocab: 200\n    zipf: 1.1\n    eval_rows: 8000\n"
         "train:\n  steps: " +
         std::to_string(steps) +
         "\n  batch_size: 128\n  seed: 7\n  dense_optimizer: adam\n  dense_lr: 0.01\n"
         "  log_every_steps: 50\n  eval_every_steps: 0\n"
         "ps:\n  data_dir: " +
         dir + "/ps\n  storage: memory\n" +
         "chief:\n  heartbeat_interval_ms: 200\n  heartbeat_timeout_ms: 5000\n"
         "collective:\n  timeout_ms: 20000\n"
         "checkpoint:\n  dir: " +
         dir + "/ckpt\noutput:\n  dir: " + dir + "/out\n";
}

inline std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(ReadFile(path));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline CommandResult Local(const TempDir& dir, int ps, int workers,
                           std::vector<std::string> sets = {},
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(240000)) {
  std::vector<std::string> argv = {TANDEM_BINARY, "local",
                                   "--config",    dir.File("job.yaml"),
                                   "--ps",        std::to_string(ps),
                                   "--workers",   std::to_string(workers)};
  for (auto& s : sets) argv.insert(argv.end(), {"--set", s});
  return RunCommand(argv, {"TF_CONFIG={\"task\": {\"type\": \"ps\", \"index\": 7}}"}, {}, timeout);
}

// `tandem local` on dir's job.yaml with `ps` and `workers`, its output to dir/`log`; `extra`
// arguments go after the counts.
inline SpawnOptions LocalSpawn(const TempDir& dir, int ps, int workers, const std::string& log,
                               std::vector<std::string> extra = {}) {
  SpawnOptions o;
  o.argv = {TANDEM_BINARY, "local",
            "--config",    dir.File("job.yaml"),
            "--ps",        std::to_string(ps),
            "--workers",   std::to_string(workers)};
  o.argv.insert(o.argv.end(), extra.begin(), extra.end());
  o.output_path = dir.File(log);
  return o;
}

// Starts `tandem local` on dir's job.yaml (log in dir/first.log), waits until metrics.jsonl
// under dir/out reports step `min_step` or later, stops the job with SIGTERM and returns the log
// once it exited 0 having said "job stopped" (a test failure otherwise: check HasFatalFailure).
inline std::string StopLocalJobAfterStep(const TempDir& dir, int ps, int workers, int64_t min_step,
                                         std::chrono::milliseconds poll) {
  const SpawnOptions o = LocalSpawn(dir, ps, workers, "first.log");
  auto first = Subprocess::Spawn(o);
  EXPECT_TRUE(first.ok()) << first.status();
  if (!first.ok()) return "";
  const std::string metrics = dir.path() + "/out/metrics.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ADD_FAILURE() << "no step " << min_step << " within 60 s: " << ReadFile(o.output_path);
      return "";
    }
    std::this_thread::sleep_for(poll);
    if (!std::filesystem::exists(metrics)) continue;
    auto lines = ReadJsonLines(metrics);
    if (!lines.empty() && lines.back().value("step", 0) >= min_step) break;
  }
  first->Signal(SIGTERM);
  auto e = first->Wait(std::chrono::milliseconds(60000));
  const std::string log = ReadFile(o.output_path);
  EXPECT_TRUE(e.has_value() && e->exit_code == 0) << log;
  EXPECT_NE(log.find("job stopped"), std::string::npos) << log;
  return log;
}

// `tandem status --dir OUT --json`: its exit status and the JSON (null when none came).
inline std::pair<int, nlohmann::json> StatusJson(const std::string& out_dir) {
  auto r = RunCommand({TANDEM_BINARY, "status", "--dir", out_dir, "--json"}, {}, {},
                      std::chrono::milliseconds(10000));
  const auto brace = r.output.find('{');
  return {r.exit.exit_code, brace == std::string::npos
                                ? nlohmann::json()
                                : nlohmann::json::parse(r.output.substr(brace), nullptr, false)};
}

// The pid `tandem local` wrote for `task` ("chief:0") in OUT/cluster.json; 0 when not there.
inline int ClusterPid(const std::string& out_dir, const std::string& task) {
  auto j = nlohmann::json::parse(ReadFile(out_dir + "/cluster.json"), nullptr, false);
  if (j.is_discarded() || !j.contains("members")) return 0;
  for (const auto& m : j["members"])
    if (m.value("task", "") == task) return m.value("pid", 0);
  return 0;
}

// Kills what a drill interrupted by its timeout left running: the pids of cluster.json files,
// each only while it is still a tandem process.
inline void KillLeftovers(const std::string& out_dir) {
  for (const char* task : {"chief:0", "ps:0", "ps:1", "worker:0", "worker:1"}) {
    const int pid = ClusterPid(out_dir, task);
    if (pid > 0 &&
        ReadFile("/proc/" + std::to_string(pid) + "/cmdline").find("tandem") != std::string::npos)
      ::kill(pid, SIGKILL);
  }
}

// The last line of `output` that is a JSON object (predict's summary, eval's result).
inline nlohmann::json LastJson(const std::string& output) {
  nlohmann::json last;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') last = nlohmann::json::parse(line, nullptr, false);
  return last;
}

}  // namespace tandem::testing
