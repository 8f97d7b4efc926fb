#include "common/wire/parking_lot.h"

#include <algorithm>

namespace tandem::wire {

using Clock = std::chrono::steady_clock;

ParkingLot::ParkingLot(std::chrono::milliseconds margin)
    : margin_(margin), sweeper_([this] { SweepLoop(); }) {}

ParkingLot::~ParkingLot() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  sweeper_.join();
  for (auto& p : ReleaseAll()) p.responder.SendError(ReplyCode::NOT_READY, "server stopping");
}

void ParkingLot::Park(int64_t key, Responder responder, std::unique_ptr<InMessage> request) {
  MutexLock lock(&mu_);
  parked_.emplace(key, Parked{std::move(responder), std::move(request)});
  cv_.Signal();  // the new request may have the earliest deadline
}

std::vector<Parked> ParkingLot::ReleaseUpTo(int64_t up_to) {
  std::vector<Parked> out;
  MutexLock lock(&mu_);
  auto end = parked_.upper_bound(up_to);
  for (auto it = parked_.begin(); it != end; ++it) out.push_back(std::move(it->second));
  parked_.erase(parked_.begin(), end);
  return out;
}

std::vector<Parked> ParkingLot::ReleaseAll() {
  return ReleaseUpTo(std::numeric_limits<int64_t>::max());
}

size_t ParkingLot::size() const {
  MutexLock lock(&mu_);
  return parked_.size();
}

uint64_t ParkingLot::not_ready_sent() const {
  MutexLock lock(&mu_);
  return not_ready_sent_;
}

void ParkingLot::SweepLoop() {
  MutexLock lock(&mu_);
  while (!stop_) {
    const auto now = Clock::now();
    auto next = Clock::time_point::max();
    for (auto it = parked_.begin(); it != parked_.end();) {
      const auto due = it->second.responder.deadline() == Clock::time_point::max()
                           ? Clock::time_point::max()
                           : it->second.responder.deadline() - margin_;
      if (due <= now) {
        // Sending only queues the reply for the I/O thread: cheap enough under the lock.
        it->second.responder.SendError(ReplyCode::NOT_READY, "still waiting; send again");
        ++not_ready_sent_;
        it = parked_.erase(it);
      } else {
        next = std::min(next, due);
        ++it;
      }
    }
    if (next == Clock::time_point::max()) {
      cv_.Wait();
    } else {
      cv_.WaitUntil(next);
    }
  }
}

}  // namespace tandem::wire
