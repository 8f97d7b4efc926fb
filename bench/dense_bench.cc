// Dense-model benchmark (issue 4, DESIGN §12): DLRM forward+backward samples/s on the CPU
// backend at batch 2048 with the Criteo-Kaggle shape (13 dense, 26 tables of dim 16, bottom MLP
// 512-256-64-16, dot interaction, top MLP 512-256-1), the share of the step spent in GEMM, and
// the backend's GEMM GFLOP/s against raw cblas_sgemm on the same shapes in the same run.
// Usage: dense_bench [threads] (OpenBLAS threads, default 1). Prints one JSON line per figure;
// the OpenBLAS kernel set goes to stderr (pin it with OPENBLAS_CORETYPE, see cpu_backend.h).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/dlrm_shape.h"
#include "bench/gemm_replay.h"
#include "worker/device/cpu/cpu_backend.h"
#include "worker/device/forwarding_backend.h"
#include "worker/model/model.h"
#include "worker/model/test_util.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kBatch = 2048;
constexpr int kStepsPerRun = 10;
constexpr int kRuns = 5;
constexpr double kPublishedPerCore = 7400;  // best published CPU DLRM figure we know, per core

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Forwards every op to the CPU backend and times the GEMMs (and records their shapes once).
class TimingBackend final : public device::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

  double gemm_seconds = 0;
  double gemm_flops = 0;
  bool record = false;
  std::vector<GemmShape> shapes;

  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    if (record) shapes.push_back({ta, tb, m, n, k});
    const Clock::time_point t0 = Clock::now();
    inner()->Gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
    gemm_seconds += Seconds(t0);
    gemm_flops += 2.0 * m * n * k;
  }
  // fp32 only here: the GEMMs go through Gemm above, so they are timed and recorded.
  void GemmMixed(device::Precision, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, const float* b, float beta, float* c) override {
    Gemm(ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void LinearForward(device::Precision p, int64_t batch, int64_t in, int64_t out, const float* x,
                     const float* w, const float* b, bool relu, float* y) override {
    GemmMixed(p, false, true, batch, out, in, 1.0f, x, w, 0.0f, y);
    inner()->AddBias(batch, out, b, y);
    if (relu) inner()->ReluForward(batch * out, y, y);
  }
};

std::vector<float> Random(size_t n, uint32_t seed) { return model::testing::RandomVector(n, seed); }

struct Inputs {
  std::vector<float> dense = Random(kBatch * kDense, 3);
  std::vector<float> labels = std::vector<float>(kBatch, 0.0f);
  std::vector<std::vector<float>> pooled, d_pooled;
  std::vector<const float*> pooled_ptrs;
  std::vector<float*> d_pooled_ptrs;

  Inputs() {
    for (int64_t i = 0; i < kBatch; i += 4) labels[i] = 1.0f;
    for (int64_t t = 0; t < kTables; ++t) {
      pooled.push_back(Random(kBatch * kDim, 10 + t));
      d_pooled.emplace_back(kBatch * kDim);
    }
    for (int64_t t = 0; t < kTables; ++t) {
      pooled_ptrs.push_back(pooled[t].data());
      d_pooled_ptrs.push_back(d_pooled[t].data());
    }
  }
};

int Run(int64_t threads) {
  auto cpu = device::CpuBackend::Create(threads);
  if (!cpu.ok()) {
    std::fprintf(stderr, "%s\n", cpu.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "dense_bench: OpenBLAS core %s, %lld thread(s)\n",
               device::CpuBackend::BlasCoreName().c_str(), static_cast<long long>(threads));
  TimingBackend timing(cpu->get());
  auto model = model::Model::Create(CriteoKaggleDense(), kDense, kTables, 1, &timing);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  Inputs in;
  auto step = [&] {
    (*model)->ForwardBackward(kBatch, in.dense.data(), in.pooled_ptrs.data(), in.labels.data(),
                              nullptr, kBatch, in.d_pooled_ptrs.data());
  };
  timing.record = true;
  step();  // warm-up; records one step's GEMM shapes
  timing.record = false;
  RawSgemm raw(timing.shapes);
  std::vector<double> samples_per_s, gemm_share, gemm_gflops, raw_gflops;
  for (int run = 0; run < kRuns; ++run) {
    timing.gemm_seconds = timing.gemm_flops = 0;
    const Clock::time_point t0 = Clock::now();
    for (int s = 0; s < kStepsPerRun; ++s) step();
    const double seconds = Seconds(t0);
    samples_per_s.push_back(kBatch * kStepsPerRun / seconds);
    gemm_share.push_back(timing.gemm_seconds / seconds);
    gemm_gflops.push_back(timing.gemm_flops / timing.gemm_seconds / 1e9);
    raw_gflops.push_back(raw.Gflops(kStepsPerRun));
  }
  const double per_core = Median(samples_per_s) / static_cast<double>(threads);
  PrintFigure("dense_fwd_bwd_samples_per_s_per_core", per_core, "samples/s/core", true,
              "published_cpu_dlrm_per_core", kPublishedPerCore);
  PrintFigure("dense_fwd_bwd_samples_per_s", Median(samples_per_s), "samples/s", true,
              "target_10000_per_core", 10000.0 * static_cast<double>(threads));
  PrintFigure("dense_gemm_time_share", Median(gemm_share), "fraction", true, "none", 0);
  PrintFigure("dense_gemm_gflops", Median(gemm_gflops), "GFLOP/s", true, "raw_cblas_sgemm",
              Median(raw_gflops));
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  const int64_t threads = argc > 1 ? std::atoll(argv[1]) : 1;
  return tandem::bench::Run(threads);
}
