// A TimeSource that stands still until the test moves it: it starts at the real clock's now, so
// time points from either compare sensibly. Safe for concurrent use.
#pragma once

#include <atomic>
#include <chrono>

#include "common/time_source.h"

namespace tandem::testing {

class ManualTimeSource final : public TimeSource {
 public:
  time_point Now() const override {
    return start_ + std::chrono::nanoseconds(offset_ns_.load(std::memory_order_acquire));
  }
  void Advance(std::chrono::nanoseconds d) {
    offset_ns_.fetch_add(d.count(), std::memory_order_acq_rel);
  }

 private:
  const time_point start_ = std::chrono::steady_clock::now();
  std::atomic<int64_t> offset_ns_{0};
};

}  // namespace tandem::testing
