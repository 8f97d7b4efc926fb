// A full disk for a test's own process, without root or a small filesystem.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

namespace tandem::testing {

// Until Lift() (or the end of the scope) the process's file-size limit (RLIMIT_FSIZE, SIGXFSZ
// ignored) is `bytes`: every write past it to a regular file fails with EFBIG, which tandem maps
// as it maps ENOSPC. Process-wide: every thread's writes fail meanwhile. A direct write (O_DIRECT)
// that crosses the limit is cut short at it, and a cut that is not a whole block fails with
// EINVAL instead: code that writes direct needs a limit of whole blocks (4096).
class FullDisk {
 public:
  explicit FullDisk(rlim_t bytes = 16) {
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &before_), 0);
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit full{bytes, before_.rlim_max};
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &full), 0);
  }
  ~FullDisk() { Lift(); }
  FullDisk(const FullDisk&) = delete;
  FullDisk& operator=(const FullDisk&) = delete;
  void Lift() { ::setrlimit(RLIMIT_FSIZE, &before_); }

 private:
  rlimit before_{};
};

}  // namespace tandem::testing
