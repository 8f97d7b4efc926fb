// Annotated Mutex / MutexLock / CondVar (std::mutex has no thread-safety annotations).
// With clang, -Wthread-safety checks GUARDED_BY and friends; with gcc they compile away.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TANDEM_TSA(x) __attribute__((x))
#else
#define TANDEM_TSA(x)
#endif

#define CAPABILITY(x) TANDEM_TSA(capability(x))
#define SCOPED_CAPABILITY TANDEM_TSA(scoped_lockable)
#define GUARDED_BY(x) TANDEM_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) TANDEM_TSA(pt_guarded_by(x))
#define EXCLUSIVE_LOCKS_REQUIRED(...) TANDEM_TSA(exclusive_locks_required(__VA_ARGS__))
#define LOCKS_EXCLUDED(...) TANDEM_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) TANDEM_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TANDEM_TSA(release_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) TANDEM_TSA(assert_capability(x))
#define NO_THREAD_SAFETY_ANALYSIS TANDEM_TSA(no_thread_safety_analysis)

namespace tandem {

// A non-recursive mutex. Safe for concurrent use.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds the lock where it cannot see it (inside a lambda run
  // under the caller's lock). Checks nothing at run time.
  void AssertHeld() ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable bound to one Mutex. REQUIRES: the mutex is held around Wait*.
class CondVar {
 public:
  explicit CondVar(Mutex* mu) : mu_(mu) {}
  void Wait() NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu_->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Returns false on timeout.
  template <typename Clock, typename Dur>
  bool WaitUntil(std::chrono::time_point<Clock, Dur> t) NO_THREAD_SAFETY_ANALYSIS {
    std::unique_lock<std::mutex> lock(mu_->mu_, std::adopt_lock);
    bool signalled = cv_.wait_until(lock, t) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  Mutex* const mu_;
  std::condition_variable cv_;
};

}  // namespace tandem
