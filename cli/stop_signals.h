// SIGTERM/SIGINT handling shared by the daemons and the local supervisor.
#pragma once

#include <signal.h>

namespace tandem::cli {

// Blocks SIGTERM/SIGINT in every thread (call before any thread starts) so that the main thread
// alone receives them through sigwait/sigtimedwait, with no global handler state. Children
// started with Subprocess get an empty mask again.
inline sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

}  // namespace tandem::cli
