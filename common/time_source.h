// Where code that decides on elapsed time reads the time: the process's steady clock in the
// daemons, a clock a test moves by hand (common/testing/manual_time_source.h) instead of
// sleeping. Waits on sockets and condition variables stay on the real clock.
#pragma once

#include <chrono>

namespace tandem {

class TimeSource {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~TimeSource() = default;
  virtual time_point Now() const = 0;
  // std::chrono::steady_clock; never destroyed.
  static const TimeSource* Steady();
};

}  // namespace tandem
