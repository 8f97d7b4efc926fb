// One long-lived thread that runs tasks one at a time beside their caller: the k = 0 push's log
// record, written while the push is applied. Header-only; internal to server/ps.
#pragma once

#include <deque>
#include <functional>
#include <future>
#include <thread>
#include <utility>

#include "common/status.h"
#include "common/sync.h"

namespace tandem::ps::internal {

// std::async started a thread for every push: on a busy 2-core host the record's write began
// 0.3 to 2.3 ms after the push asked for it (the new thread waited to be scheduled, and touched
// a fresh stack), while the write itself takes ~3.5 ms at 64 k ids of dim 16 (issue 21).
//
// Unlike std::async's, the returned future does not wait in its destructor: a caller whose task
// refers to its stack must wait for the future before it returns (WaitOnExit).
class SideThread {
 public:
  SideThread() : thread_([this] { Loop(); }) {}
  ~SideThread() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    queued_.Signal();
    thread_.join();  // after the tasks already queued have run
  }
  SideThread(const SideThread&) = delete;
  SideThread& operator=(const SideThread&) = delete;

  std::future<Status> Run(std::function<Status()> fn) {
    std::packaged_task<Status()> task(std::move(fn));
    std::future<Status> result = task.get_future();
    {
      MutexLock lock(&mu_);
      tasks_.push_back(std::move(task));
    }
    queued_.Signal();
    return result;
  }

 private:
  void Loop() {
    MutexLock lock(&mu_);
    for (;;) {
      while (!stop_ && tasks_.empty()) queued_.Wait();
      if (tasks_.empty()) return;  // stop_
      std::packaged_task<Status()> task = std::move(tasks_.front());
      tasks_.pop_front();
      mu_.Unlock();
      task();
      mu_.Lock();
    }
  }

  Mutex mu_;
  CondVar queued_{&mu_};
  std::deque<std::packaged_task<Status()>> tasks_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// Waits for a future when the scope ends, so that a task that refers to the scope's variables
// never outlives them.
class WaitOnExit {
 public:
  explicit WaitOnExit(std::future<Status>* f) : f_(f) {}
  ~WaitOnExit() {
    if (f_->valid()) f_->wait();
  }
  WaitOnExit(const WaitOnExit&) = delete;
  WaitOnExit& operator=(const WaitOnExit&) = delete;

 private:
  std::future<Status>* f_;
};

}  // namespace tandem::ps::internal
