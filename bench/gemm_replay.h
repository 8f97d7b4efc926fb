// One dense step's GEMMs replayed with raw cblas_sgemm: the baseline the dense benchmarks
// (dense_bench, models_bench) compare their steps and their GEMM throughput against.
#pragma once

#include <cblas.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "worker/model/test_util.h"

namespace tandem::bench {

struct GemmShape {
  bool ta, tb;
  int64_t m, n, k;
  double flops() const { return 2.0 * m * n * k; }
};

// Raw cblas_sgemm on the recorded shapes, with its own operands (made once).
class RawSgemm {
 public:
  explicit RawSgemm(const std::vector<GemmShape>& shapes) : shapes_(shapes) {
    for (const GemmShape& s : shapes_) {
      a_.push_back(model::testing::RandomVector(s.m * s.k, 1));
      b_.push_back(model::testing::RandomVector(s.k * s.n, 2));
      c_.emplace_back(s.m * s.n);
      flops_ += s.flops();
    }
  }

  double flops_per_step() const { return flops_; }
  // Seconds for `steps` replays of the step's GEMMs.
  double Run(int steps) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int step = 0; step < steps; ++step) {
      for (size_t i = 0; i < shapes_.size(); ++i) Call(shapes_[i], i);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // GFLOP/s over `steps` replays.
  double Gflops(int steps) { return flops_ * steps / Run(steps) / 1e9; }

 private:
  void Call(const GemmShape& s, size_t i) {
    cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                s.m, s.n, s.k, 1.0f, a_[i].data(), s.ta ? s.m : s.k, b_[i].data(), s.tb ? s.k : s.n,
                0.0f, c_[i].data(), s.n);
  }

  std::vector<GemmShape> shapes_;
  std::vector<std::vector<float>> a_, b_, c_;
  double flops_ = 0;
};

}  // namespace tandem::bench
