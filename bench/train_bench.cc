// End-to-end training benchmark (issue 5, DESIGN §12): samples/s of a whole `tandem local`
// cluster (the real binary, as a subprocess) against the same job trained in one process with
// in-process embeddings (worker::RunTrainingLoop over a LocalEmbeddingTable, no network, no
// collective), measured in the same run. Both sides are read the same way: the step lines of a
// metrics.jsonl (samples/s per logged window), the first kWarmupWindows windows skipped, the
// median of the rest; a figure is the median over runs (rounds interleave the two sides, so a
// noisy neighbour hurts both alike).
//  - train_local_1x1_k0: 1 PS x 1 worker, k = 0, the small config (below), RocksDB storage;
//  - train_local_1x1_k2: the same with train.embedding_staleness 2;
//  - train_local_1x1_k0_memory: the same as k0 with ps.storage memory;
//  - train_local_2x2_k0: 2 PS x 2 workers against the 1 x 1 run (report only: on a 2-core
//    machine this is more processes than cores);
//  - train_local_criteo_shape: 1 x 1, k = 0, the Criteo-Kaggle DLRM shape of dense_bench,
//    against that model's forward + backward + dense update alone in this process.
// Every step line's time breakdown (median over the steady windows) goes to stderr.
// Usage: train_bench [--tandem PATH] [--runs N] [--criteo-runs N] [--scale X]
//                    [--only small|criteo]
// (--scale multiplies every step count, e.g. 0.3 for a quick look).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "common/config/job_config.h"
#include "common/embedding/table_spec.h"
#include "common/log.h"
#include "common/metrics/metrics_writer.h"
#include "common/subprocess.h"
#include "common/testing/local_embedding_table.h"
#include "common/testing/test_util.h"
#include "worker/device/backend_factory.h"
#include "worker/model/dense_optimizer.h"
#include "worker/model/model.h"
#include "worker/model/test_util.h"
#include "worker/training_loop.h"

#ifndef TANDEM_BINARY
#define TANDEM_BINARY "tandem"
#endif

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWarmupWindows = 2;
constexpr int64_t kBatch = 2048;
constexpr auto kClusterTimeout = std::chrono::seconds(300);
constexpr const char* kInProcess = "in_process_local_embedding_table";

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One model/data shape and how long to train it.
struct Shape {
  std::string name;
  std::string bottom_mlp, top_mlp;
  int64_t vocab = 100000;
  int64_t steps = 0;
  int64_t log_every = 10;
};

Shape Small(double scale) {
  return {"small", "[64, 16]", "[128, 64, 1]", 100000, static_cast<int64_t>(200 * scale) / 10 * 10,
          10};
}

// The Criteo-Kaggle DLRM shape of dense_bench, with a large synthetic vocabulary. Windows of 5
// steps: a step takes ~0.1 s here, 10 times the small config's, so fewer steps fit the time.
Shape Criteo(double scale) {
  return {"criteo",
          "[512, 256, 64, 16]",
          "[512, 256, 1]",
          1000000,
          static_cast<int64_t>(80 * scale) / 5 * 5,
          5};
}

struct Setup {
  int64_t k = 0;
  int ps = 1, workers = 1;
  std::string storage = "rocksdb";
};

std::string JobYaml(const Shape& s, const Setup& setup, const std::string& dir) {
  return "data:\n  format: synthetic\n  num_dense: 13\n  num_categorical: 26\n"
         "  synthetic: {vocab: " +
         std::to_string(s.vocab) +
         ", zipf: 1.1, eval_rows: 1000}\n"
         "model:\n  embedding_dim: 16\n  bottom_mlp: " +
         s.bottom_mlp + "\n  top_mlp: " + s.top_mlp +
         "\n  interaction: dot\n"
         "train:\n  steps: " +
         std::to_string(std::max<int64_t>(s.steps, (kWarmupWindows + 1) * s.log_every)) +
         "\n  batch_size: " + std::to_string(kBatch) +
         "\n  embedding_staleness: " + std::to_string(setup.k) +
         "\n  seed: 1\n  threads: 1\n  log_every_steps: " + std::to_string(s.log_every) +
         "\n  eval_every_steps: 0\n"
         "ps:\n  data_dir: " +
         dir + "/ps\n  storage: " + setup.storage +
         "\n  cache_bytes: 536870912\n"
         "chief: {heartbeat_interval_ms: 200, heartbeat_timeout_ms: 5000}\n"
         "checkpoint: {dir: " +
         dir + "/checkpoints, every_steps: 0, resume: never}\noutput:\n  dir: " + dir + "/out\n";
}

// The steady-state figures of one run: medians over the logged windows after the warm-up.
struct RunFigures {
  double samples_per_sec = 0;
  metrics::StepTimes times;
  int windows = 0;
};

StatusOr<RunFigures> ReadMetrics(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("no " + path);
  std::vector<double> rate, data, pull, compute, allreduce, push, wait;
  int seen = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("samples_per_sec") || j.contains("replay")) continue;
    if (seen++ < kWarmupWindows) continue;
    rate.push_back(j["samples_per_sec"].get<double>());
    data.push_back(j["data_s"].get<double>());
    pull.push_back(j["pull_s"].get<double>());
    compute.push_back(j["compute_s"].get<double>());
    allreduce.push_back(j["allreduce_s"].get<double>());
    push.push_back(j["push_s"].get<double>());
    wait.push_back(j["wait_s"].get<double>());
  }
  if (rate.empty()) return Status::DataLoss(path + ": no step lines after the warm-up");
  RunFigures f;
  f.samples_per_sec = Median(rate);
  f.times = {Median(data),      Median(pull), Median(compute),
             Median(allreduce), Median(push), Median(wait)};
  f.windows = static_cast<int>(rate.size());
  return f;
}

void Report(const std::string& what, const RunFigures& f, double wall_s) {
  const auto& t = f.times;
  std::fprintf(stderr,
               "train_bench: %-28s %8.0f samples/s (%d windows, %.1f s wall); per step ms: "
               "data %.1f pull %.1f compute %.1f allreduce %.1f push %.1f wait %.1f\n",
               what.c_str(), f.samples_per_sec, f.windows, wall_s, t.data_s * 1e3, t.pull_s * 1e3,
               t.compute_s * 1e3, t.allreduce_s * 1e3, t.push_s * 1e3, t.wait_s * 1e3);
}

std::string Tail(const std::string& text, size_t n) {
  return text.size() > n ? text.substr(text.size() - n) : text;
}

// `tandem local` on a fresh directory under /tmp.
StatusOr<RunFigures> RunCluster(const std::string& tandem, const Shape& s, const Setup& setup) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("job.yaml"), JobYaml(s, setup, dir.path()));
  SpawnOptions o;
  o.argv = {tandem,           "local",
            "--config",       dir.File("job.yaml"),
            "--ps",           std::to_string(setup.ps),
            "--workers",      std::to_string(setup.workers),
            "--max-restarts", "0"};
  o.set_env = {"OPENBLAS_NUM_THREADS=1"};
  o.unset_env = {"TF_CONFIG"};
  o.output_path = dir.File("local.log");
  const auto t0 = Clock::now();
  TANDEM_ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(o));
  auto exit = child.Wait(kClusterTimeout);
  if (!exit) exit = child.Stop(std::chrono::seconds(5));
  const double wall_s = Seconds(t0);
  if (!exit->exited() || exit->exit_code != 0)
    return Status::Internal("tandem local " + exit->ToString() + "; its output ends:\n" +
                            Tail(testing::ReadFile(dir.File("local.log")), 3000));
  TANDEM_ASSIGN_OR_RETURN(RunFigures f, ReadMetrics(dir.File("out/metrics.jsonl")));
  Report("cluster " + s.name + " " + std::to_string(setup.ps) + "x" +
             std::to_string(setup.workers) + " k" + std::to_string(setup.k) + " " + setup.storage,
         f, wall_s);
  return f;
}

// The same job in this process: the training loop over in-process embeddings.
StatusOr<RunFigures> RunInProcess(const Shape& s) {
  testing::TempDir dir;
  TANDEM_ASSIGN_OR_RETURN(
      auto job, config::ParseJobConfig(JobYaml(s, Setup{}, dir.path()), "bench.yaml", {}));
  TANDEM_ASSIGN_OR_RETURN(auto backend, device::CreateBackend(job.train));
  LocalEmbeddingTable table(embedding::TableSpecsFromConfig(job), job.train.seed);
  TANDEM_ASSIGN_OR_RETURN(auto writer, metrics::MetricsWriter::Open(dir.File("metrics.jsonl")));
  worker::TrainingLoopOptions o;
  o.job = &job;
  o.embeddings = &table;
  o.backend = backend.get();
  o.metrics = writer.get();
  const auto t0 = Clock::now();
  TANDEM_ASSIGN_OR_RETURN(auto result, worker::RunTrainingLoop(o));
  const double wall_s = Seconds(t0);
  if (!result.completed) return Status::Internal("the in-process run stopped early");
  TANDEM_ASSIGN_OR_RETURN(RunFigures f, ReadMetrics(dir.File("metrics.jsonl")));
  Report("in-process " + s.name, f, wall_s);
  return f;
}

// The Criteo-shape model's forward + backward + dense update alone (as dense_bench does it,
// plus the optimizer step the trainer runs): median samples/s over several timed runs.
StatusOr<double> DenseStepSamplesPerSec(const Shape& s) {
  testing::TempDir dir;
  TANDEM_ASSIGN_OR_RETURN(
      auto job, config::ParseJobConfig(JobYaml(s, Setup{}, dir.path()), "bench.yaml", {}));
  TANDEM_ASSIGN_OR_RETURN(auto backend, device::CreateBackend(job.train));
  const int64_t tables = job.data.num_categorical, dense_n = job.data.num_dense;
  const int64_t dim = job.model.embedding_dim;
  TANDEM_ASSIGN_OR_RETURN(auto model,
                          model::Model::Create(job.model, dense_n, tables, 1, backend.get()));
  TANDEM_ASSIGN_OR_RETURN(auto opt_options, model::DenseOptimizerOptionsFromConfig(job.train));
  TANDEM_ASSIGN_OR_RETURN(auto optimizer,
                          model::DenseOptimizer::Create(opt_options, model->num_params()));
  const auto dense = model::testing::RandomVector(kBatch * dense_n, 3);
  std::vector<float> labels(kBatch, 0.0f);
  for (int64_t i = 0; i < kBatch; i += 4) labels[i] = 1.0f;
  std::vector<std::vector<float>> pooled, d_pooled;
  std::vector<const float*> pooled_ptrs;
  std::vector<float*> d_pooled_ptrs;
  for (int64_t t = 0; t < tables; ++t) {
    pooled.push_back(model::testing::RandomVector(kBatch * dim, 10 + t));
    d_pooled.emplace_back(kBatch * dim);
  }
  for (int64_t t = 0; t < tables; ++t) {
    pooled_ptrs.push_back(pooled[t].data());
    d_pooled_ptrs.push_back(d_pooled[t].data());
  }
  int64_t step = 0;
  auto train_step = [&] {
    model->ForwardBackward(kBatch, dense.data(), pooled_ptrs.data(), labels.data(), nullptr, kBatch,
                           d_pooled_ptrs.data());
    optimizer->Step(step++, model->params(), model->grads());
  };
  train_step();  // warm-up
  std::vector<double> rates;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 10; ++i) train_step();
    rates.push_back(kBatch * 10 / Seconds(t0));
  }
  std::fprintf(stderr, "train_bench: dense step alone (criteo shape) %8.0f samples/s\n",
               Median(rates));
  return Median(rates);
}

struct Args {
  std::string tandem = TANDEM_BINARY;
  int runs = 3;
  int criteo_runs = 2;
  double scale = 1.0;
  std::string only;  // "small" or "criteo": run just those figures
};

// Medians over runs of every small-config figure.
struct SmallFigures {
  std::vector<double> base, k0, k2, k0_memory, k0_2x2;
};

Status RunSmall(const Args& a, SmallFigures* f) {
  const Shape small = Small(a.scale);
  for (int run = 0; run < a.runs; ++run) {
    TANDEM_ASSIGN_OR_RETURN(RunFigures base, RunInProcess(small));
    TANDEM_ASSIGN_OR_RETURN(RunFigures k0, RunCluster(a.tandem, small, {}));
    TANDEM_ASSIGN_OR_RETURN(RunFigures k2, RunCluster(a.tandem, small, {.k = 2}));
    TANDEM_ASSIGN_OR_RETURN(RunFigures mem, RunCluster(a.tandem, small, {.storage = "memory"}));
    TANDEM_ASSIGN_OR_RETURN(RunFigures two, RunCluster(a.tandem, small, {.ps = 2, .workers = 2}));
    f->base.push_back(base.samples_per_sec);
    f->k0.push_back(k0.samples_per_sec);
    f->k2.push_back(k2.samples_per_sec);
    f->k0_memory.push_back(mem.samples_per_sec);
    f->k0_2x2.push_back(two.samples_per_sec);
  }
  return Status::Ok();
}

int RunSmallFigures(const Args& a) {
  SmallFigures f;
  Status s = RunSmall(a, &f);
  if (!s.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  const double base = Median(f.base);
  PrintFigure("train_local_1x1_k0_samples_per_sec", Median(f.k0), "samples/s", true,
              std::string(kInProcess) + "_k0", base);
  PrintFigure("train_local_1x1_k2_samples_per_sec", Median(f.k2), "samples/s", true,
              std::string(kInProcess) + "_k_does_not_apply", base);
  PrintFigure("train_local_1x1_k0_memory_samples_per_sec", Median(f.k0_memory), "samples/s", true,
              std::string(kInProcess) + "_k0", base);
  PrintFigure("train_local_2x2_k0_samples_per_sec", Median(f.k0_2x2), "samples/s", true,
              "train_local_1x1_k0_same_config", Median(f.k0));
  return 0;
}

int RunCriteoFigure(const Args& a) {
  const Shape criteo = Criteo(a.scale);
  auto dense = DenseStepSamplesPerSec(criteo);
  std::vector<double> cluster;
  for (int run = 0; dense.ok() && run < a.criteo_runs; ++run) {
    auto c = RunCluster(a.tandem, criteo, {});
    if (!c.ok()) {
      std::fprintf(stderr, "train_bench: %s\n", c.status().ToString().c_str());
      return 1;
    }
    cluster.push_back(c->samples_per_sec);
  }
  if (!dense.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", dense.status().ToString().c_str());
    return 1;
  }
  PrintFigure("train_local_criteo_shape_samples_per_sec", Median(cluster), "samples/s", true,
              "dense_fwd_bwd_update_single_process", *dense);
  return 0;
}

int Run(const Args& a) {
  std::fprintf(stderr,
               "train_bench: note: PyTorch DLRM does 65-73k samples/s on 2 cores at the small "
               "shape (dim 16, bottom 64-16, top 128-64-1, batch 2048)\n");
  if (a.only != "criteo") {
    const int status = RunSmallFigures(a);
    if (status != 0 || a.only == "small") return status;
  }
  return RunCriteoFigure(a);
}

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--tandem") {
      a->tandem = value;
    } else if (flag == "--runs") {
      a->runs = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "--criteo-runs") {
      a->criteo_runs = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "--only" && (value == "small" || value == "criteo")) {
      a->only = value;
    } else if (flag == "--scale") {
      a->scale = std::atof(value.c_str());
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && a->scale > 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  tandem::bench::Args args;
  if (!tandem::bench::ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: train_bench [--tandem PATH] [--runs N] [--criteo-runs N] [--scale X]\n"
                 "                   [--only small|criteo]\n");
    return 2;
  }
  tandem::log::Init("train_bench", "warn");  // the in-process loop's info lines are noise here
  return tandem::bench::Run(args);
}
