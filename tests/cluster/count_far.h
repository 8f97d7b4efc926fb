// Element-wise closeness of two float arrays, for the tests that compare models trained in
// different ways (distributed_math_test.cc, multi_hot_job_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

namespace tandem::testing {

// How many elements differ by more than `rel` of the larger magnitude, with a floor for values
// near zero.
inline int64_t CountFar(std::span<const float> a, std::span<const float> b, double rel) {
  EXPECT_EQ(a.size(), b.size());
  int64_t far = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double tol = rel * std::max({std::fabs(a[i]), std::fabs(b[i]), 1e-2f});
    if (!(std::fabs(double{a[i]} - b[i]) <= tol)) ++far;
  }
  return far;
}

}  // namespace tandem::testing
