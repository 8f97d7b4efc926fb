// The dense step of every model type (issue 19) on one core: samples/s of Model::ForwardBackward
// at batch 2048 on the CPU backend, each model at its example config (configs/local.yaml for
// dlrm, configs/dcn-v2.yaml, deepfm.yaml, wide-deep.yaml, mmoe.yaml), against the same step's
// GEMMs alone, replayed with raw cblas_sgemm in the same run (target: >= 0.7 of it).
// bench/models_vs_torch.sh puts the PyTorch twins (bench/torch_models.py) beside it.
//
// The model's inputs are built from the config as worker/trainer.cc builds them (feature widths
// from the tables, DeepFM's and Wide & Deep's wide features after the fields, the labels and
// their loss weights), with random pooled bags and dense values; no optimizer step, as the
// dense step is what the worker times as compute.
//
// The step runs through a ForwardingBackend that records the GEMM shapes in one untimed step
// and otherwise only forwards, so the timed step is the CPU backend's own (fused bias and ReLU
// included). A run is --steps steps of the model, then --steps replays of its GEMM shapes on
// operands of their own; each figure is the median over --runs runs.
//
// Usage: models_bench [--configs DIR] [--config FILE] [--models a,b,...] [--batch 2048]
//                     [--steps 10] [--runs 5] [--threads 1] [--set KEY=VALUE]... [--describe]
//   --config FILE benchmarks that one config (named by its model.type) instead of the examples,
//   --set overrides a key of every config read (as `tandem local --set`);
//   --describe prints each model's inputs and settings as one JSON line and times nothing (what
//   bench/torch_models.py builds its twin from, so both sides read one config loader).
// Prints one JSON line per model (bench/bench_json.h's fields, plus details).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/gemm_replay.h"
#include "common/config/job_config.h"
#include "common/embedding/table_spec.h"
#include "worker/data/record_source.h"
#include "worker/device/cpu/cpu_backend.h"
#include "worker/device/forwarding_backend.h"
#include "worker/model/model.h"
#include "worker/model/test_util.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kTargetRatio = 0.7;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Records the GEMM shapes of the ops while `record` is set; always forwards, so the timed steps
// run the inner backend's code paths (LinearForward stays fused).
class RecordingBackend final : public device::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

  bool record = false;
  std::vector<GemmShape> shapes;

  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    if (record) shapes.push_back({ta, tb, m, n, k});
    inner()->Gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void GemmMixed(device::Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, const float* b, float beta, float* c) override {
    if (record) shapes.push_back({ta, tb, m, n, k});
    inner()->GemmMixed(p, ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void LinearForward(device::Precision p, int64_t batch, int64_t in, int64_t out, const float* x,
                     const float* w, const float* b, bool relu, float* y) override {
    if (record) shapes.push_back({false, true, batch, out, in});  // y = x W^T
    inner()->LinearForward(p, batch, in, out, x, w, b, relu, y);
  }
};

std::vector<float> Random(size_t n, uint32_t seed) { return model::testing::RandomVector(n, seed); }

// The model's inputs as the trainer derives them from the job (worker/trainer.cc).
model::ModelInputs InputsFromJob(const config::JobConfig& job) {
  const data::Schema schema = data::SchemaFromConfig(job);
  std::vector<int64_t> table_dims;
  for (const auto& spec : embedding::TableSpecsFromConfig(job)) table_dims.push_back(spec.dim);
  model::ModelInputs inputs;
  inputs.num_dense = job.data.num_dense;
  inputs.num_labels = static_cast<int64_t>(job.data.labels.size());
  for (double w : job.train.loss_weights) inputs.loss_weights.push_back(static_cast<float>(w));
  const int fields = schema.num_categorical;
  for (int f = 0; f < fields; ++f) {
    inputs.dims.push_back(table_dims[static_cast<size_t>(schema.table_of(f))]);
    inputs.mean.push_back(schema.mean_of(f));
  }
  if (schema.wide) {
    for (int f = 0; f < fields; ++f) {
      inputs.dims.push_back(
          table_dims[static_cast<size_t>(schema.num_tables() + schema.table_of(f))]);
      inputs.mean.push_back(schema.mean_of(f));
    }
    inputs.num_wide = fields;
  }
  return inputs;
}

std::string IntList(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string DoubleList(const std::vector<double>& v) {
  std::string s = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.1f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

// Everything bench/torch_models.py needs to build the same network and train it the same way.
void Describe(const std::string& path, const config::JobConfig& job, const model::ModelInputs& in,
              int64_t num_params) {
  const config::ModelConfig& m = job.model;
  const config::TableConfig& t = job.table_default;
  std::string mean = "[";
  for (size_t f = 0; f < in.dims.size(); ++f)
    mean += std::string(f ? ", " : "") + (in.mean.empty() || !in.mean[f] ? "false" : "true");
  mean += "]";
  std::string labels = "[";
  for (size_t i = 0; i < job.data.labels.size(); ++i)
    labels += std::string(i ? ", " : "") + "\"" + job.data.labels[i] + "\"";
  labels += "]";
  std::string lw = "[";
  for (size_t i = 0; i < in.loss_weights.size(); ++i)
    lw += (i ? ", " : "") + std::to_string(in.loss_weights[i]);
  lw += "]";
  std::printf(
      "{\"model\": \"%s\", \"config\": \"%s\", \"num_dense\": %lld, \"dims\": %s, \"mean\": %s, "
      "\"num_wide\": %lld, \"num_labels\": %lld, \"labels\": %s, \"loss_weights\": %s, "
      "\"bottom_mlp\": %s, "
      "\"top_mlp\": %s, \"interaction\": \"%s\", \"dcn_cross_layers\": %lld, "
      "\"dcn_low_rank\": %lld, \"dcn_structure\": \"%s\", \"mmoe_num_experts\": %lld, "
      "\"mmoe_expert_mlp\": %s, \"wide_optimizer\": \"%s\", \"num_params\": %lld, "
      "\"table_optimizer\": \"%s\", \"table_lr\": %.9g, \"table_init_dist\": \"%s\", "
      "\"table_init_scale\": %.9g, \"adagrad_initial_accumulator\": %.9g, \"ftrl_alpha\": %.9g, "
      "\"ftrl_beta\": %.9g, \"ftrl_l1\": %.9g, \"ftrl_l2\": %.9g, \"dense_optimizer\": \"%s\", "
      "\"dense_lr\": %.9g, \"seed\": %llu, \"batch_size\": %lld, \"steps\": %lld}\n",
      m.type.c_str(), path.c_str(), static_cast<long long>(in.num_dense), IntList(in.dims).c_str(),
      mean.c_str(), static_cast<long long>(in.num_wide), static_cast<long long>(in.num_labels),
      labels.c_str(), lw.c_str(), IntList(m.bottom_mlp).c_str(), IntList(m.top_mlp).c_str(),
      m.interaction.c_str(), static_cast<long long>(m.dcn_cross_layers),
      static_cast<long long>(m.dcn_low_rank), m.dcn_structure.c_str(),
      static_cast<long long>(m.mmoe_num_experts), IntList(m.mmoe_expert_mlp).c_str(),
      m.wide_optimizer.c_str(), static_cast<long long>(num_params), t.optimizer.c_str(), t.lr,
      t.init_dist.c_str(), t.init_scale, t.adagrad_initial_accumulator, t.ftrl_alpha, t.ftrl_beta,
      t.ftrl_l1, t.ftrl_l2, job.train.dense_optimizer.c_str(), job.train.dense_lr,
      static_cast<unsigned long long>(job.train.seed), static_cast<long long>(job.train.batch_size),
      static_cast<long long>(job.train.steps));
  std::fflush(stdout);
}

struct Options {
  std::string configs_dir = TANDEM_SOURCE_DIR "/configs";
  std::string config;  // one config instead of the examples
  std::vector<config::Override> sets;
  std::vector<std::string> models = {"dlrm", "dcn_v2", "deepfm", "wide_deep", "mmoe"};
  int64_t batch = 2048;
  int steps = 10;
  int runs = 5;
  int64_t threads = 1;
  bool describe = false;
};

std::string ExampleConfig(const std::string& model) {
  if (model == "dlrm") return "local.yaml";
  if (model == "dcn_v2") return "dcn-v2.yaml";
  if (model == "wide_deep") return "wide-deep.yaml";
  return model + ".yaml";  // deepfm, mmoe
}

int Bench(const Options& opt, const std::string& path, device::CpuBackend* cpu) {
  auto job = config::LoadJobConfig(path, opt.sets);
  if (!job.ok()) {
    std::fprintf(stderr, "models_bench: %s\n", job.status().ToString().c_str());
    return 1;
  }
  const model::ModelInputs inputs = InputsFromJob(*job);
  RecordingBackend be(cpu);
  auto made = model::Model::Create(job->model, inputs, job->train.seed, &be);
  if (!made.ok()) {
    std::fprintf(stderr, "models_bench: %s: %s\n", path.c_str(), made.status().ToString().c_str());
    return 1;
  }
  model::Model& model = **made;
  if (opt.describe) {
    Describe(path, *job, inputs, model.num_params());
    return 0;
  }

  const int64_t batch = opt.batch;
  const size_t features = inputs.dims.size();
  std::vector<float> dense = Random(static_cast<size_t>(batch * inputs.num_dense), 3);
  std::vector<float> labels(static_cast<size_t>(batch * inputs.num_labels), 0.0f);
  for (size_t i = 0; i < labels.size(); i += 4) labels[i] = 1.0f;
  std::vector<std::vector<float>> pooled, d_pooled;
  std::vector<const float*> pooled_ptrs;
  std::vector<float*> d_pooled_ptrs;
  for (size_t f = 0; f < features; ++f) {
    const size_t n = static_cast<size_t>(batch * inputs.dims[f]);
    pooled.push_back(Random(n, 10 + static_cast<uint32_t>(f)));
    d_pooled.emplace_back(n);
  }
  for (size_t f = 0; f < features; ++f) {
    pooled_ptrs.push_back(pooled[f].data());
    d_pooled_ptrs.push_back(d_pooled[f].data());
  }
  auto step = [&] {
    model.ForwardBackward(batch, dense.data(), pooled_ptrs.data(), labels.data(), nullptr,
                          static_cast<float>(batch), d_pooled_ptrs.data());
  };
  be.record = true;
  step();  // warm-up: grows the workspaces, records one step's GEMM shapes
  be.record = false;
  RawSgemm raw(be.shapes);
  raw.Run(1);  // warm-up of the replay's operands

  std::vector<double> step_sps, gemm_sps;
  for (int run = 0; run < opt.runs; ++run) {
    const Clock::time_point t0 = Clock::now();
    for (int s = 0; s < opt.steps; ++s) step();
    step_sps.push_back(static_cast<double>(batch * opt.steps) / Seconds(t0));
    gemm_sps.push_back(static_cast<double>(batch * opt.steps) / raw.Run(opt.steps));
  }
  const double value = Median(step_sps);
  const double gemm = Median(gemm_sps);
  const double ratio = gemm > 0 ? value / gemm : 0;
  const std::string& type = job->model.type;
  std::printf(
      "{\"bench\": \"%s_dense_step_samples_per_s\", \"value\": %.1f, \"unit\": \"samples/s\", "
      "\"better\": \"higher\", \"baseline\": \"gemm_only_samples_per_s\", \"baseline_value\": "
      "%.1f, \"ratio\": %.4f, \"target_ratio\": %.1f, \"meets_target\": %s, \"model\": \"%s\", "
      "\"config\": \"%s\", \"batch\": %lld, \"threads\": %lld, \"steps_per_run\": %d, "
      "\"runs\": %s, \"gemm_only_runs\": %s, \"gemms_per_step\": %zu, "
      "\"gemm_gflop_per_step\": %.4f, \"step_gflop_per_s\": %.2f, \"gemm_only_gflop_per_s\": "
      "%.2f, \"num_params\": %lld}\n",
      type.c_str(), value, gemm, ratio, kTargetRatio, ratio >= kTargetRatio ? "true" : "false",
      type.c_str(), path.c_str(), static_cast<long long>(batch),
      static_cast<long long>(opt.threads), opt.steps, DoubleList(step_sps).c_str(),
      DoubleList(gemm_sps).c_str(), be.shapes.size(), raw.flops_per_step() / 1e9,
      value / static_cast<double>(batch) * raw.flops_per_step() / 1e9,
      gemm / static_cast<double>(batch) * raw.flops_per_step() / 1e9,
      static_cast<long long>(model.num_params()));
  std::fflush(stdout);
  return 0;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(',', start);
    const std::string part = s.substr(start, end == std::string::npos ? end : end - start);
    if (!part.empty()) out.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

int Usage() {
  std::fprintf(stderr,
               "usage: models_bench [--configs DIR] [--config FILE] [--models a,b,...] "
               "[--batch N] [--steps N] [--runs N] [--threads N] [--set KEY=VALUE]... "
               "[--describe]\n");
  return 2;
}

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--describe") {
      opt.describe = true;
      continue;
    }
    if (i + 1 >= argc) return Usage();
    const std::string value = argv[++i];
    if (arg == "--configs") {
      opt.configs_dir = value;
    } else if (arg == "--config") {
      opt.config = value;
    } else if (arg == "--set") {
      opt.sets.push_back({value});
    } else if (arg == "--models") {
      opt.models = Split(value);
    } else if (arg == "--batch") {
      opt.batch = std::atoll(value.c_str());
    } else if (arg == "--steps") {
      opt.steps = std::atoi(value.c_str());
    } else if (arg == "--runs") {
      opt.runs = std::atoi(value.c_str());
    } else if (arg == "--threads") {
      opt.threads = std::atoll(value.c_str());
    } else {
      return Usage();
    }
  }
  if (opt.batch < 1 || opt.steps < 1 || opt.runs < 1 || opt.threads < 1) return Usage();
  auto cpu = device::CpuBackend::Create(opt.threads);
  if (!cpu.ok()) {
    std::fprintf(stderr, "models_bench: %s\n", cpu.status().ToString().c_str());
    return 1;
  }
  if (!opt.describe) {
    std::fprintf(stderr, "models_bench: OpenBLAS core %s, %lld thread(s)\n",
                 device::CpuBackend::BlasCoreName().c_str(), static_cast<long long>(opt.threads));
  }
  if (!opt.config.empty()) return Bench(opt, opt.config, cpu->get());
  for (const std::string& m : opt.models) {
    if (const int rc = Bench(opt, opt.configs_dir + "/" + ExampleConfig(m), cpu->get()); rc != 0)
      return rc;
  }
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) { return tandem::bench::Main(argc, argv); }
