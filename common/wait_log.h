// A long wait says what it waits for, where, and for how long so far: one line when it has
// lasted `first`, then one every `every` (never a flood), so that no daemon waits silently on a
// chief, a shard, a peer or a rendezvous that does not answer.
#pragma once

#include <chrono>
#include <string>

#include "common/log.h"

namespace tandem {

class WaitLog {
 public:
  using Clock = std::chrono::steady_clock;

  explicit WaitLog(std::string what, std::chrono::milliseconds first = std::chrono::seconds(2),
                   std::chrono::milliseconds every = std::chrono::seconds(5))
      : what_(std::move(what)), since_(Clock::now()), next_(since_ + first), every_(every) {}

  // Call on every round of the wait; `last` is the latest reason it goes on (an error, a count).
  void Tick(const std::string& last) {
    if (!due()) return;
    next_ = Clock::now() + every_;
    TLOG_WARN("waiting for {} ({:.0f} s so far): {}", what_, seconds(), last);
  }
  // Whether the next Tick logs (a hot loop builds its description only then).
  bool due() const { return Clock::now() >= next_; }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - since_).count(); }

 private:
  const std::string what_;
  const Clock::time_point since_;
  Clock::time_point next_;
  const std::chrono::milliseconds every_;
};

}  // namespace tandem
