// Plain-file helpers shared by the durable copy and the checkpoint restore: a descriptor closed
// on destruction, and a file streamed through CRC32C (and optionally copied). Errors come from
// ErrnoToStatus (common/errno_status.h).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
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

// Direct I/O (O_DIRECT): offsets, sizes and buffers aligned to this suit every logical block
// size in use. Written this way, a file's bytes skip the page cache, whose fresh pages cost more
// CPU than the copy itself (2.6 s of kernel time per GiB on the 2-core benchmark VM, 0.06 s
// direct).
constexpr size_t kDirectIoBlock = 4096;
constexpr uint64_t BlockFloor(uint64_t n) { return n / kDirectIoBlock * kDirectIoBlock; }
constexpr uint64_t BlockCeil(uint64_t n) { return BlockFloor(n + kDirectIoBlock - 1); }

struct FreeAligned {
  void operator()(uint8_t* p) const;
};
using AlignedBytes = std::unique_ptr<uint8_t[], FreeAligned>;
// `bytes` (a multiple of kDirectIoBlock) aligned to kDirectIoBlock; null when out of memory.
AlignedBytes AllocateAligned(size_t bytes);

// pwritev(2), or a stand-in that behaves like it (tests inject short writes and ENOSPC).
using PwritevFn = std::function<ssize_t(int fd, const iovec* iov, int iovcnt, off_t offset)>;

// Writes data[0, n) at `offset` to `fd` opened with O_DIRECT (all three aligned to
// kDirectIoBlock), retrying EINTR and short writes from the last whole block written. A failed
// write's errno goes to *failed_errno when it is given (EINVAL: the file system wants a larger
// alignment than kDirectIoBlock).
Status WriteDirectAt(int fd, const uint8_t* data, size_t n, uint64_t offset,
                     const std::string& path, const PwritevFn& pwritev_fn = nullptr,
                     int* failed_errno = nullptr);

// Turns O_DIRECT off on `fd` (a file system that took it at open but refuses an access later);
// false with errno when fcntl fails.
bool DropDirectIo(int fd);

// Creates (or truncates) `path` for a copy: with O_DIRECT when the file system is a local block
// one (ext4, XFS, btrfs) that takes it; elsewhere (NFS, FUSE, tmpfs) O_DIRECT writes are
// synchronous round trips or refused, and the copy is buffered.
StatusOr<int> CreateForCopy(const std::string& path);

struct FileSum {
  uint64_t size_bytes = 0;
  uint32_t crc32c = 0;  // of the whole content
};

// Reads `from` to its end, computing its size and CRC32C and, when `out_fd` >= 0, writing every
// byte to it (write errors name `out_path`; an `out_fd` opened with O_DIRECT is written in whole
// blocks and cut to the file's size at the end). A read the medium fails (EIO) is kDataLoss: the
// file's bytes are lost to us, and callers copy it again from elsewhere (PoolHolds in
// durable_copy.cc) or report the checkpoint damaged. `read_direct` reads `from` with O_DIRECT
// where its file system takes it: for a file that was itself written direct (a change log
// segment), whose bytes are not in the page cache, a buffered read would fill fresh pages.
StatusOr<FileSum> StreamFile(const std::string& from, int out_fd = -1,
                             const std::string& out_path = "", bool read_direct = false);

}  // namespace tandem::ps
