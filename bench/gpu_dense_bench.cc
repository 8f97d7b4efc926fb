// GPU dense-model benchmark (issue 8, DESIGN §12): DLRM forward+backward samples/s on the CUDA
// backend with the Criteo-Kaggle shape (13 dense, 26 tables of dim 16, bottom MLP 512-256-64-16,
// dot interaction, top MLP 512-256-1) at batch 8192 and 65536, fp32 and bf16, against the same
// step's GEMMs alone (the shapes one step issues, replayed through the backend) in the same run;
// and host<->device copies of a pull/push-sized buffer through the backend against cudaMemcpy
// from pinned memory. Prints one JSON line per figure; exits 0 with a note when no GPU is usable.
// `gpu_dense_bench --profile` prints one step's time per op instead.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/dlrm_shape.h"
#include "worker/device/buffer.h"
#include "worker/device/cuda/cuda_backend.h"
#include "worker/device/forwarding_backend.h"
#include "worker/model/model.h"
#include "worker/model/test_util.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
using device::Backend;
using device::Precision;

constexpr int kRuns = 5;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct GemmCall {
  Precision p;
  bool ta, tb;
  int64_t m, n, k;
};

// Forwards every op to the CUDA backend and records the GEMM shapes of one step.
class RecordingBackend final : public device::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  bool record = false;
  std::vector<GemmCall> calls;

  void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    GemmMixed(Precision::kFp32, ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void GemmMixed(Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, const float* b, float beta, float* c) override {
    if (record) calls.push_back({p, ta, tb, m, n, k});
    inner()->GemmMixed(p, ta, tb, m, n, k, alpha, a, b, beta, c);
  }
  void LinearForward(Precision p, int64_t batch, int64_t in, int64_t out, const float* x,
                     const float* w, const float* b, bool relu, float* y) override {
    if (record) calls.push_back({p, false, true, batch, out, in});
    inner()->LinearForward(p, batch, in, out, x, w, b, relu, y);
  }
};

// --profile: waits after every op and adds its time to the op's name, to show where a step
// goes beyond its GEMMs (the waits make the step itself slower; these are shares, not speeds).
class ProfilingBackend final : public device::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::map<std::string, double> seconds;

#define TANDEM_PROFILED(name, call)            \
  do {                                         \
    const Clock::time_point t0 = Clock::now(); \
    call;                                      \
    inner()->Synchronize();                    \
    seconds[name] += Seconds(t0);              \
  } while (0)
  void GemmMixed(Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, const float* b, float beta, float* c) override {
    TANDEM_PROFILED("GemmMixed", inner()->GemmMixed(p, ta, tb, m, n, k, alpha, a, b, beta, c));
  }
  void LinearForward(Precision p, int64_t batch, int64_t in, int64_t out, const float* x,
                     const float* w, const float* b, bool relu, float* y) override {
    TANDEM_PROFILED("LinearForward", inner()->LinearForward(p, batch, in, out, x, w, b, relu, y));
  }
  void BiasGrad(int64_t r, int64_t c, const float* dy, float* db) override {
    TANDEM_PROFILED("BiasGrad", inner()->BiasGrad(r, c, dy, db));
  }
  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override {
    TANDEM_PROFILED("ReluBackward", inner()->ReluBackward(n, y, dy, dx));
  }
  float BceWithLogits(int64_t n, const float* z, const float* l, const float* w, float norm,
                      float* dz) override {
    float loss = 0;
    TANDEM_PROFILED("BceWithLogits", loss = inner()->BceWithLogits(n, z, l, w, norm, dz));
    return loss;
  }
  void CopyStrided(int64_t r, int64_t c, const float* s, int64_t sld, float* d, int64_t dld,
                   bool acc) override {
    TANDEM_PROFILED("CopyStrided", inner()->CopyStrided(r, c, s, sld, d, dld, acc));
  }
  void PairwiseDotsForward(int64_t b, int64_t n, int64_t d, const float* x, float* o,
                           int64_t old) override {
    TANDEM_PROFILED("PairwiseDotsForward", inner()->PairwiseDotsForward(b, n, d, x, o, old));
  }
  void PairwiseDotsBackward(int64_t b, int64_t n, int64_t d, const float* x, const float* dz,
                            int64_t ld, float* dx) override {
    TANDEM_PROFILED("PairwiseDotsBackward", inner()->PairwiseDotsBackward(b, n, d, x, dz, ld, dx));
  }
  void Copy(int64_t n, const float* x, float* y) override {
    TANDEM_PROFILED("Copy", inner()->Copy(n, x, y));
  }
#undef TANDEM_PROFILED
};

device::Buffer<float> Upload(Backend* be, const std::vector<float>& host) {
  device::Buffer<float> buf(be, static_cast<int64_t>(host.size()));
  be->CopyToDevice(buf.data(), host.data(), host.size() * sizeof(float));
  return buf;
}

// The benchmark's DLRM on `be` with one batch of random device inputs; Run() is one training
// forward+backward (the loss comes back to the host every step, as in training).
struct DenseStep {
  int64_t batch = 0;
  std::unique_ptr<model::Model> model;
  device::Buffer<float> dense, labels;
  std::vector<device::Buffer<float>> pooled, d_pooled;
  std::vector<const float*> pooled_ptrs;
  std::vector<float*> d_pooled_ptrs;

  static std::unique_ptr<DenseStep> Make(Backend* be, int64_t batch, Precision precision) {
    auto model = model::Model::Create(CriteoKaggleDense(), kDense, kTables, 1, be);
    if (!model.ok()) {
      std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
      return nullptr;
    }
    auto s = std::make_unique<DenseStep>();
    s->batch = batch;
    s->model = std::move(model).value();
    s->model->SetPrecision(precision);
    std::vector<float> labels(static_cast<size_t>(batch), 0.0f);
    for (size_t i = 0; i < labels.size(); i += 4) labels[i] = 1.0f;
    s->dense = Upload(be, model::testing::RandomVector(batch * kDense, 3));
    s->labels = Upload(be, labels);
    for (int64_t t = 0; t < kTables; ++t) {
      s->pooled.push_back(Upload(be, model::testing::RandomVector(batch * kDim, 10 + t)));
      s->d_pooled.emplace_back(be, batch * kDim);
    }
    for (int64_t t = 0; t < kTables; ++t) {
      s->pooled_ptrs.push_back(s->pooled[t].data());
      s->d_pooled_ptrs.push_back(s->d_pooled[t].data());
    }
    return s;
  }
  void Run() {
    model->ForwardBackward(batch, dense.data(), pooled_ptrs.data(), labels.data(), nullptr,
                           static_cast<float>(batch), d_pooled_ptrs.data());
  }
};

// One step's op times at `batch`, to stderr.
void ProfileStep(Backend* cuda, int64_t batch, Precision precision) {
  ProfilingBackend be(cuda);
  auto step = DenseStep::Make(&be, batch, precision);
  if (!step) return;
  for (int s = 0; s < 6; ++s) {
    if (s == 1) be.seconds.clear();  // the first step allocates and plans
    step->Run();
  }
  for (const auto& [name, sec] : be.seconds)
    std::fprintf(stderr, "profile b%lld %s: %-22s %8.3f ms/step\n", static_cast<long long>(batch),
                 precision == Precision::kFp32 ? "fp32" : "bf16", name.c_str(), sec / 5 * 1e3);
}

// One figure pair per (batch, precision): the step's samples/s and its GEMMs' alone.
bool BenchDense(Backend* cuda, int64_t batch, Precision precision, const char* name) {
  RecordingBackend be(cuda);
  auto dense_step = DenseStep::Make(&be, batch, precision);
  if (!dense_step) return false;
  auto step = [&] { dense_step->Run(); };
  be.record = true;
  step();
  be.record = false;
  // The GEMMs of one step on operands of their own, through the same backend.
  std::vector<device::Buffer<float>> a, b, c;
  for (const GemmCall& g : be.calls) {
    a.emplace_back(cuda, g.m * g.k);
    b.emplace_back(cuda, g.k * g.n);
    c.emplace_back(cuda, g.m * g.n);
  }
  auto gemms = [&] {
    for (size_t i = 0; i < be.calls.size(); ++i) {
      const GemmCall& g = be.calls[i];
      cuda->GemmMixed(g.p, g.ta, g.tb, g.m, g.n, g.k, 1.0f, a[i].data(), b[i].data(), 0.0f,
                      c[i].data());
    }
  };
  gemms();
  cuda->Synchronize();
  const int steps = batch >= 65536 ? 10 : 40;
  std::vector<double> step_rate, gemm_rate;
  for (int run = 0; run < kRuns; ++run) {
    Clock::time_point t0 = Clock::now();
    for (int s = 0; s < steps; ++s) step();
    cuda->Synchronize();
    step_rate.push_back(static_cast<double>(batch) * steps / Seconds(t0));
    t0 = Clock::now();
    for (int s = 0; s < steps; ++s) gemms();
    cuda->Synchronize();
    gemm_rate.push_back(static_cast<double>(batch) * steps / Seconds(t0));
  }
  if (!cuda->status().ok()) {
    std::fprintf(stderr, "%s\n", cuda->status().ToString().c_str());
    return false;
  }
  PrintFigure(std::string("gpu_dense_fwd_bwd_samples_per_s_") + name + "_b" + std::to_string(batch),
              Median(step_rate), "samples/s", true, "same_step_gemms_alone_samples_per_s",
              Median(gemm_rate));
  return true;
}

// Host<->device copies of one step's pulled rows (26 tables x 65536 rows x dim 16) through
// the backend (pageable source, staged through pinned memory) against cudaMemcpy from pinned.
bool BenchCopies(Backend* cuda) {
  const size_t floats = static_cast<size_t>(kTables) * 65536 * kDim;
  const size_t bytes = floats * sizeof(float);
  std::vector<float> host = model::testing::RandomVector(floats, 5);
  device::Buffer<float> dev(cuda, static_cast<int64_t>(floats));
  float* pinned = nullptr;
  if (cudaHostAlloc(reinterpret_cast<void**>(&pinned), bytes, cudaHostAllocDefault) != cudaSuccess)
    return false;
  std::vector<double> h2d, d2h, peak_h2d, peak_d2h;
  for (int run = 0; run < kRuns; ++run) {
    Clock::time_point t0 = Clock::now();
    cuda->CopyToDevice(dev.data(), host.data(), bytes);
    cuda->Synchronize();
    h2d.push_back(bytes / Seconds(t0) / 1e9);
    t0 = Clock::now();
    cuda->CopyToHost(host.data(), dev.data(), bytes);
    d2h.push_back(bytes / Seconds(t0) / 1e9);
    t0 = Clock::now();
    cudaMemcpy(dev.data(), pinned, bytes, cudaMemcpyHostToDevice);
    peak_h2d.push_back(bytes / Seconds(t0) / 1e9);
    t0 = Clock::now();
    cudaMemcpy(pinned, dev.data(), bytes, cudaMemcpyDeviceToHost);
    peak_d2h.push_back(bytes / Seconds(t0) / 1e9);
  }
  cudaFreeHost(pinned);
  PrintFigure("gpu_pull_copy_h2d_gb_per_s", Median(h2d), "GB/s", true, "cudaMemcpy_pinned_h2d",
              Median(peak_h2d));
  PrintFigure("gpu_push_copy_d2h_gb_per_s", Median(d2h), "GB/s", true, "cudaMemcpy_pinned_d2h",
              Median(peak_d2h));
  return cuda->status().ok();
}

int Run(bool profile) {
  auto cuda = device::CreateCudaBackend(0);
  if (!cuda.ok()) {
    std::fprintf(stderr, "gpu_dense_bench: no GPU: %s\n", cuda.status().ToString().c_str());
    return 0;
  }
  if (profile) {
    for (int64_t batch : {8192, 65536}) {
      ProfileStep(cuda->get(), batch, Precision::kFp32);
      ProfileStep(cuda->get(), batch, Precision::kBf16);
    }
    return cuda->get()->status().ok() ? 0 : 1;
  }
  bool ok = true;
  for (int64_t batch : {8192, 65536}) {
    ok = ok && BenchDense(cuda->get(), batch, Precision::kFp32, "fp32");
    ok = ok && BenchDense(cuda->get(), batch, Precision::kBf16, "bf16");
  }
  ok = ok && BenchCopies(cuda->get());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  const bool profile = argc > 1 && std::string(argv[1]) == "--profile";
  return tandem::bench::Run(profile);
}
