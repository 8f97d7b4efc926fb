// TimedCollective: a Collective that tells, from any thread, since when its op in flight has
// been running. A stop (SIGTERM) is honoured by the op's own return when the group is healthy;
// when a peer is cut off the op would block until collective.timeout_ms, and the worker's
// watcher uses this to abort it instead (worker/roll_forward/replica_group.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "worker/collective/collective.h"

namespace tandem::collective {

// Forwards every call to `inner` (not owned; it must outlive this object). Thread safety: as
// `inner`; InFlightFor() is safe from any thread.
class TimedCollective : public Collective {
 public:
  using Clock = std::chrono::steady_clock;

  TimedCollective() = default;
  explicit TimedCollective(Collective* inner) : inner_(inner) {}
  void Reset(Collective* inner) { inner_ = inner; }

  Status AllReduceSum(float* data, size_t count) override {
    Timed t(this);
    return inner_->AllReduceSum(data, count);
  }
  Status Broadcast(float* data, size_t count, int root) override {
    Timed t(this);
    return inner_->Broadcast(data, count, root);
  }
  Status Barrier() override {
    Timed t(this);
    return inner_->Barrier();
  }
  void Abort() override { inner_->Abort(); }
  Status Rebuild(const std::string& prefix) override { return inner_->Rebuild(prefix); }
  bool Wedged() const override { return inner_->Wedged(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  bool device_memory() const override { return inner_->device_memory(); }

  // How long the op in flight has been running; zero when none is.
  Clock::duration InFlightFor() const {
    const int64_t since = started_.load(std::memory_order_acquire);
    if (since == 0) return Clock::duration::zero();
    return Clock::now().time_since_epoch() - Clock::duration(since);
  }

 private:
  struct Timed {
    explicit Timed(TimedCollective* c) : c(c) {
      // A steady clock's epoch is far in the past: 0 never is a real start.
      c->started_.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
    }
    ~Timed() { c->started_.store(0, std::memory_order_release); }
    TimedCollective* c;
  };

  Collective* inner_ = nullptr;
  std::atomic<int64_t> started_{0};  // Clock ticks since its epoch; 0: no op in flight
};

}  // namespace tandem::collective
