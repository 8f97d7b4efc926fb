// A small fixed pool of threads for the shard's data-parallel loops: the tables of one step's
// apply, the tables of one pull's reads. Header-only; internal to server/ps.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

#include "common/sync.h"

namespace tandem::ps::internal {

// ParallelFor(n, fn) runs fn(0), ..., fn(n - 1), each once, on the pool's threads and on the
// calling thread, and returns when all have returned. Indexes are handed out in ascending order;
// the order in which they finish is unspecified.
//
// Safe for concurrent use: several threads may run loops at once (the push lane's apply and the
// pull lane's reads share one pool). The caller always works on its own loop, so a loop finishes
// even when every pool thread is busy with another one: no caller can deadlock on the pool.
// fn must not throw.
class ApplyPool {
 public:
  // `threads` counts the caller: a pool of 1 (or less) starts no thread and runs loops inline.
  explicit ApplyPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~ApplyPool() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    work_.SignalAll();
    for (std::thread& t : workers_) t.join();
  }
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  // The threads a loop may use, the caller's included.
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
    if (workers_.empty() || n <= 1) {
      for (size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    Loop loop{&fn, n};
    mu_.Lock();
    loops_.push_back(&loop);
    if (n - 1 >= workers_.size()) {
      work_.SignalAll();
    } else {
      for (size_t i = 0; i + 1 < n; ++i) work_.Signal();
    }
    while (loop.next < loop.n) RunOne(&loop);
    while (loop.done < loop.n) finished_.Wait();
    mu_.Unlock();
  }

 private:
  struct Loop {
    const std::function<void(size_t)>* fn;
    size_t n;
    size_t next = 0;  // the next index to hand out
    size_t done = 0;  // indexes whose fn has returned
  };

  // Claims the next index of `loop` and runs it without the lock.
  // REQUIRES: loop->next < loop->n.
  void RunOne(Loop* loop) EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t i = loop->next++;
    if (loop->next == loop->n) loops_.erase(std::find(loops_.begin(), loops_.end(), loop));
    mu_.Unlock();
    (*loop->fn)(i);
    mu_.Lock();
    if (++loop->done == loop->n) finished_.SignalAll();
  }

  void WorkerLoop() {
    MutexLock lock(&mu_);
    for (;;) {
      while (!stop_ && loops_.empty()) work_.Wait();
      if (stop_) return;
      RunOne(loops_.front());
    }
  }

  Mutex mu_;
  CondVar work_{&mu_};      // a loop was added, or stop_
  CondVar finished_{&mu_};  // some loop's last index returned
  // Loops with indexes not yet handed out, oldest first (each lives on its caller's stack).
  std::vector<Loop*> loops_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace tandem::ps::internal
