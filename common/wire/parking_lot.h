// ParkingLot: requests that cannot be answered yet (a pull for a step not applied yet) wait here
// holding no thread (PROTOCOLS §2.3). Just before a parked request's budget ends it is answered
// NOT_READY, so the sender simply sends it again: waiting for a slow peer is never reported as a
// timeout (PROTOCOLS §13).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "common/sync.h"
#include "common/wire/rpc_server.h"

namespace tandem::wire {

// A parked request: its responder and, when the handler needs it later, the request itself.
struct Parked {
  Responder responder;
  std::unique_ptr<InMessage> request;
};

// Safe for concurrent use.
class ParkingLot {
 public:
  // `margin`: how long before a request's deadline it is answered NOT_READY.
  explicit ParkingLot(std::chrono::milliseconds margin = std::chrono::milliseconds(50));
  ParkingLot(const ParkingLot&) = delete;
  ParkingLot& operator=(const ParkingLot&) = delete;
  // Answers everything still parked NOT_READY.
  ~ParkingLot();

  // Parks `responder` under `key` (e.g. the version it waits for), keeping `request` with it.
  void Park(int64_t key, Responder responder, std::unique_ptr<InMessage> request = nullptr);
  // Removes and returns the requests parked under keys <= `up_to`, oldest key first.
  std::vector<Parked> ReleaseUpTo(int64_t up_to);
  // Removes and returns every parked request (e.g. to answer them STALE on a rollback).
  std::vector<Parked> ReleaseAll();
  size_t size() const;
  uint64_t not_ready_sent() const;

 private:
  void SweepLoop();

  const std::chrono::milliseconds margin_;
  mutable Mutex mu_;
  CondVar cv_{&mu_};
  std::multimap<int64_t, Parked> parked_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t not_ready_sent_ GUARDED_BY(mu_) = 0;
  std::thread sweeper_;
};

}  // namespace tandem::wire
