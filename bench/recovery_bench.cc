// Recovery benchmark (issue 7, DESIGN §12): time from a fault to the first step beyond the
// highest step completed before it, as `tandem drill` measures it, on a 2 PS x 2 workers job at
// k = 0 with the default heartbeat settings (200 ms, 2 s), each fault alone in its own run
// (medians of --runs runs; one fault-free reference run is shared):
//  - recovery_worker_kill_s: kill -9 of a worker (rolled forward: restarted, the survivor's dense
//    state taken, at most one step recomputed) vs a 3 s target;
//  - recovery_worker_stop_s: SIGSTOP of a worker past the heartbeat timeout (declared lost,
//    killed, rolled forward) vs the heartbeat timeout that bounds its detection;
//  - recovery_two_workers_kill_s: both workers killed at once (nothing to roll forward from: a
//    whole-job rollback to the last checkpoint) vs the checkpoint interval;
//  - recovery_ps_kill_s: kill -9 of a PS (restart + push-log replay, nobody rolls back) vs 3 s;
//  - recovery_rollback_lost_ps_s: a lost PS machine (a rollback) vs the job's checkpoint
//    interval in seconds (what a rollback can cost at most in lost training).
// Every run must also end with the fault-free model_checksum, or the benchmark fails.
// Usage: recovery_bench [--tandem PATH] [--runs N] [--only NAME]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "common/testing/test_util.h"

#ifndef TANDEM_BINARY
#define TANDEM_BINARY "tandem"
#endif

namespace tandem::bench {
namespace {

using ::tandem::testing::ReadFile;
using ::tandem::testing::RunCommand;
using ::tandem::testing::TempDir;
using ::tandem::testing::WriteFile;

constexpr int64_t kSteps = 600;
constexpr int64_t kEverySteps = 100;
constexpr int64_t kBatch = 256;
constexpr int64_t kWorkers = 2;

std::string Job(const std::string& dir) {
  return "cluster:\n  chief: [\"127.0.0.1:0\"]\n  ps: [\"127.0.0.1:0\"]\n"
         "  workers: [\"127.0.0.1:0\"]\n"
         "model:\n  embedding_dim: 16\n  bottom_mlp: [64, 16]\n  top_mlp: [64, 32, 1]\n"
         "data:\n  format: synthetic\n  synthetic:\n    vocab: 1000\n    eval_rows: 4000\n"
         "train:\n  steps: " +
         std::to_string(kSteps) + "\n  batch_size: " + std::to_string(kBatch) +
         "\n  seed: 3\n  log_every_steps: 20\n  eval_every_steps: 0\n"
         "ps:\n  data_dir: " +
         dir + "/ps\n" + "checkpoint:\n  dir: " + dir +
         "/ckpt\n  every_steps: " + std::to_string(kEverySteps) + "\noutput:\n  dir: " + dir +
         "/out\n";
}

struct DrillResult {
  bool ok = false;
  double recovery_s = 0;
  std::string path;
};

// One drill of `fault` in a fresh directory; `reference` (may be empty) is reused.
DrillResult RunDrill(const std::string& tandem, const std::string& fault, std::string* reference) {
  static int counter = 0;
  TempDir dir;
  WriteFile(dir.File("job.yaml"), Job(dir.path()));
  std::vector<std::string> argv = {tandem,     "drill", "--config",        dir.File("job.yaml"),
                                   "--ps",     "2",     "--workers",       std::to_string(kWorkers),
                                   "--faults", fault,   "--max-rollbacks", "3"};
  if (!reference->empty()) argv.insert(argv.end(), {"--reference", *reference});
  auto r = RunCommand(argv, {}, {}, std::chrono::minutes(5));
  DrillResult out;
  auto report = nlohmann::json::parse(ReadFile(dir.path() + "/out/drill.json"), nullptr, false);
  if (r.timed_out || !report.is_object() || !report.value("ok", false) ||
      report["faults"].empty() || !report["faults"].back()["recovery_ms"].is_number()) {
    std::fprintf(stderr, "recovery_bench: drill '%s' failed:\n%s\n", fault.c_str(),
                 r.output.c_str());
    return out;
  }
  out.ok = true;
  // Faults fired together: the last one's recovery is the job's.
  out.recovery_s = report["faults"].back()["recovery_ms"].get<double>() / 1000.0;
  out.path = report["faults"].back().value("path", "");
  if (reference->empty()) {
    // Keep the fault-free run for the next drills (outside the temporary directory).
    const std::string keep = "/tmp/tandem-recovery-reference-" + std::to_string(::getpid()) + "-" +
                             std::to_string(counter++);
    std::error_code ec;
    std::filesystem::copy(dir.path() + "/out-reference", keep,
                          std::filesystem::copy_options::recursive, ec);
    if (!ec) *reference = keep;
  }
  return out;
}

// Seconds one checkpoint interval takes in the fault-free run: kEverySteps steps at its median
// logged rate.
double IntervalSeconds(const std::string& reference) {
  std::vector<double> rates;
  std::istringstream in(ReadFile(reference + "/metrics.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("samples_per_sec") && j["samples_per_sec"].is_number())
      rates.push_back(j["samples_per_sec"].get<double>());
  }
  if (rates.empty()) return 0;
  const double steps_per_s = Median(rates) / static_cast<double>(kBatch * kWorkers);
  return static_cast<double>(kEverySteps) / steps_per_s;
}

int Run(const std::string& tandem, int runs, const std::string& only) {
  struct Kind {
    const char* name;
    const char* fault;
    const char* baseline;
    double baseline_value;  // <= 0: the checkpoint interval
  };
  const Kind kinds[] = {
      {"recovery_worker_kill_s", "kill worker:1 @step 250", "target_3s", 3.0},
      {"recovery_worker_stop_s", "stop worker:1 @step 250 for 4s", "heartbeat_timeout_s", 2.0},
      {"recovery_two_workers_kill_s", "kill worker:0 @step 250; kill worker:1 @step 250",
       "checkpoint_interval_s", 0},
      {"recovery_ps_kill_s", "kill ps:0 @step 250", "target_3s", 3.0},
      {"recovery_rollback_lost_ps_s", "lose ps:1 @step 250", "checkpoint_interval_s", 0},
  };
  std::string reference;
  bool ok = true;
  for (const Kind& k : kinds) {
    if (!only.empty() && only != k.name) continue;
    std::vector<double> seconds;
    std::string path;
    for (int r = 0; r < runs; ++r) {
      DrillResult d = RunDrill(tandem, k.fault, &reference);
      if (!d.ok) {
        ok = false;
        break;
      }
      seconds.push_back(d.recovery_s);
      path = d.path;
    }
    if (seconds.empty()) continue;
    std::fprintf(stderr, "%s: %s (path: %s)\n", k.name, k.fault, path.c_str());
    const double baseline = k.baseline_value > 0 ? k.baseline_value : IntervalSeconds(reference);
    PrintFigure(k.name, Median(seconds), "s", false, k.baseline, baseline);
  }
  std::error_code ec;
  if (!reference.empty()) std::filesystem::remove_all(reference, ec);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  std::string tandem = TANDEM_BINARY;
  int runs = 3;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--tandem")
      tandem = argv[i + 1];
    else if (flag == "--runs")
      runs = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--only")
      only = argv[i + 1];
  }
  return tandem::bench::Run(tandem, runs, only);
}
