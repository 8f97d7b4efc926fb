// Test-only helpers for the model tests: seeded random inputs and a finite-difference gradient
// check. Not part of tandem_model.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "worker/device/cpu/cpu_backend.h"

namespace tandem::model::testing {

inline std::unique_ptr<device::CpuBackend> MakeCpuBackend() {
  auto backend = device::CpuBackend::Create(1);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return std::move(backend).value();
}

// Uniform values in [lo, hi) from a seeded engine (tests only: <random> is fine here).
inline std::vector<float> RandomVector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(engine);
  return v;
}

// Like RandomVector but with |x| >= margin, so that a ReLU kink is never within a step.
inline std::vector<float> RandomAwayFromZero(size_t n, uint32_t seed, float margin) {
  std::vector<float> v = RandomVector(n, seed);
  for (float& x : v) x = x >= 0 ? x + margin : x - margin;
  return v;
}

// sum_i r_i * y_i in double: the scalar whose gradient w.r.t. y is r.
inline double Project(const std::vector<float>& r, const float* y) {
  double sum = 0;
  for (size_t i = 0; i < r.size(); ++i) sum += static_cast<double>(r[i]) * y[i];
  return sum;
}

struct GradCheckOptions {
  double step = 1e-2;  // central-difference step
  double rtol = 1e-3;  // relative tolerance
  double atol = 2e-4;  // absolute floor for float rounding in f
};

// Compares analytic[i] with the central difference of f at x[i] (x is perturbed and restored).
// Returns the number of mismatches (each also reported as a test failure).
inline int CheckGradient(const std::function<double()>& f, float* x, size_t n,
                         const std::vector<float>& analytic, GradCheckOptions opt = {}) {
  int mismatches = 0;
  for (size_t i = 0; i < n; ++i) {
    const float saved = x[i];
    const float plus = saved + static_cast<float>(opt.step);
    const float minus = saved - static_cast<float>(opt.step);
    x[i] = plus;
    const double f_plus = f();
    x[i] = minus;
    const double f_minus = f();
    x[i] = saved;
    const double fd = (f_plus - f_minus) / (static_cast<double>(plus) - minus);
    const double an = analytic[i];
    const double tol = opt.rtol * std::max(std::fabs(fd), std::fabs(an)) + opt.atol;
    if (std::fabs(fd - an) > tol) {
      ++mismatches;
      ADD_FAILURE() << "element " << i << ": analytic " << an << " vs finite difference " << fd;
    }
  }
  return mismatches;
}

}  // namespace tandem::model::testing
