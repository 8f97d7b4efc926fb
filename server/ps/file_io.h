// Plain-file helpers shared by the durable copy and the checkpoint restore: a descriptor closed
// on destruction, and a file streamed through CRC32C (and optionally copied). Errors come from
// ErrnoToStatus (common/errno_status.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/errno_status.h"
#include "common/status.h"

namespace tandem::ps {

// A file descriptor closed on destruction.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, so that a failing close (deferred write errors on some file systems) is seen.
  int Close();

 private:
  int fd_;
};

// Writes all of data[0, n) to `fd` (retrying short writes); errors name `path`.
Status WriteAll(int fd, const char* data, size_t n, const std::string& path);

struct FileSum {
  uint64_t size_bytes = 0;
  uint32_t crc32c = 0;  // of the whole content
};

// Reads `from` to its end, computing its size and CRC32C and, when `out_fd` >= 0, writing every
// byte to it (write errors name `out_path`). A read the medium fails (EIO) is kDataLoss: the
// file's bytes are lost to us, and callers copy it again from elsewhere (PoolHolds in
// durable_copy.cc) or report the checkpoint damaged.
StatusOr<FileSum> StreamFile(const std::string& from, int out_fd = -1,
                             const std::string& out_path = "");

}  // namespace tandem::ps
