#include "server/ps/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/crc32c.h"

namespace tandem::ps {

namespace {
constexpr size_t kStreamBufferBytes = 1 << 20;
}  // namespace

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

int Fd::Close() {
  int rc = ::close(fd_);
  fd_ = -1;
  return rc;
}

Status WriteAll(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoToStatus(errno, "write " + path);
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

StatusOr<FileSum> StreamFile(const std::string& from, int out_fd, const std::string& out_path) {
  Fd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) return ErrnoToStatus(errno, "open " + from);
  ::posix_fadvise(in.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<char> buf(kStreamBufferBytes);
  FileSum sum;
  for (;;) {
    ssize_t r = ::read(in.get(), buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EIO) {
      return Status::DataLoss(ErrnoToStatus(errno, "read " + from).message());
    }
    if (r < 0) return ErrnoToStatus(errno, "read " + from);
    if (r == 0) return sum;
    sum.crc32c = Crc32cExtend(sum.crc32c, buf.data(), static_cast<size_t>(r));
    sum.size_bytes += static_cast<uint64_t>(r);
    if (out_fd >= 0)
      TANDEM_RETURN_IF_ERROR(WriteAll(out_fd, buf.data(), static_cast<size_t>(r), out_path));
  }
}

}  // namespace tandem::ps
