// SIGTERM/SIGINT handling shared by the daemons and the local supervisor.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <ctime>

namespace tandem::daemon {

namespace internal {
// A stop signal that reached a thread which had not blocked it (OpenBLAS starts its thread pool
// in a static constructor, before main can block anything), kept for WaitStopSignal.
inline std::atomic<int> pending_stop{0};
extern "C" inline void KeepStopSignal(int sig) { pending_stop.store(sig); }
// Set for good once any stop signal was seen, whoever consumed it: the waits outside a role's
// own loop (registration, the cluster, a recovery) give up on it.
inline std::atomic<bool> stop_seen{false};
}  // namespace internal

// Blocks SIGTERM/SIGINT in this thread and every thread it starts later (call first thing in
// main) so that they arrive through WaitStopSignal, with no work done in a signal handler.
// Threads that libraries started before main do not inherit the mask; there a handler keeps the
// signal instead of letting it kill the process. Children started with Subprocess get an empty
// mask and default dispositions again (exec resets handlers).
inline sigset_t BlockStopSignals() {
  struct sigaction sa = {};
  sa.sa_handler = internal::KeepStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// True when a stop signal arrived within `wait` (SIGTERM or SIGINT); *signal gets it.
inline bool WaitStopSignal(const sigset_t& set, std::chrono::milliseconds wait, int* signal) {
  if (int s = internal::pending_stop.exchange(0); s != 0) {
    *signal = s;
    internal::stop_seen.store(true);
    return true;
  }
  timespec t{static_cast<time_t>(wait.count() / 1000),
             static_cast<long>((wait.count() % 1000) * 1000000)};
  siginfo_t info;
  const int sig = sigtimedwait(&set, &info, &t);
  if (sig > 0) {
    *signal = sig;
    internal::stop_seen.store(true);
    return true;
  }
  if (int s = internal::pending_stop.exchange(0); s != 0) {
    *signal = s;
    internal::stop_seen.store(true);
    return true;
  }
  return false;
}

// Whether some thread's WaitStopSignal or StopSignalSeen has seen a stop signal.
inline bool StopSignalReceived() { return internal::stop_seen.load(); }

// Whether a stop signal arrived, without waiting. A signal found here stays pending for the
// next WaitStopSignal, so a wait that gives up on it leaves the stop to the role's own loop.
inline bool StopSignalSeen(const sigset_t& set) {
  if (internal::stop_seen.load() || internal::pending_stop.load() != 0) return true;
  timespec zero{0, 0};
  siginfo_t info;
  const int sig = sigtimedwait(&set, &info, &zero);
  if (sig <= 0) return false;
  internal::pending_stop.store(sig);
  internal::stop_seen.store(true);
  return true;
}

}  // namespace tandem::daemon
