#include "server/ps/file_io.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

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

void FreeAligned::operator()(uint8_t* p) const { std::free(p); }

AlignedBytes AllocateAligned(size_t bytes) {
  return AlignedBytes(static_cast<uint8_t*>(std::aligned_alloc(kDirectIoBlock, bytes)));
}

Status WriteDirectAt(int fd, const uint8_t* data, size_t n, uint64_t offset,
                     const std::string& path, const PwritevFn& pwritev_fn, int* failed_errno) {
  size_t done = 0;
  while (done < n) {
    iovec v{const_cast<uint8_t*>(data + done), n - done};
    const off_t at = static_cast<off_t>(offset + done);
    const ssize_t w = pwritev_fn ? pwritev_fn(fd, &v, 1, at) : ::pwritev(fd, &v, 1, at);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      if (failed_errno != nullptr) *failed_errno = errno;
      return ErrnoToStatus(errno, "write " + path);
    }
    if (static_cast<size_t>(w) == n - done) break;
    const size_t whole = BlockFloor(static_cast<size_t>(w));
    if (whole == 0) {
      return Status::Unavailable("write " + path + ": a direct write made no progress (" +
                                 std::to_string(w) + " bytes)");
    }
    done += whole;
  }
  return Status::Ok();
}

bool DropDirectIo(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) == 0;
}

StatusOr<int> CreateForCopy(const std::string& path) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  int fd = ::open(path.c_str(), kFlags, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create " + path);
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) return fd;
  const auto type = static_cast<unsigned long>(fs.f_type);
  if (type != EXT4_SUPER_MAGIC && type != XFS_SUPER_MAGIC && type != BTRFS_SUPER_MAGIC) return fd;
  const int direct = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
  if (direct < 0) return fd;  // refused after all: buffered
  ::close(fd);
  return direct;
}

StatusOr<FileSum> StreamFile(const std::string& from, int out_fd, const std::string& out_path,
                             bool read_direct) {
  // Direct reads of whole buffers at aligned offsets come back whole blocks until the end, so the
  // offsets stay aligned; a file system that refuses them (EINVAL) is read buffered.
  int raw = read_direct ? ::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT) : -1;
  if (raw < 0) raw = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  Fd in(raw);
  if (in.get() < 0) return ErrnoToStatus(errno, "open " + from);
  ::posix_fadvise(in.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  const bool direct = out_fd >= 0 && (::fcntl(out_fd, F_GETFL) & O_DIRECT) != 0;
  AlignedBytes buf = AllocateAligned(kStreamBufferBytes);
  if (buf == nullptr) return Status::ResourceExhausted("no memory to copy " + from);
  FileSum sum;
  bool end = false;
  while (!end) {
    // A whole buffer at a time (reads may come short), so that direct writes stay aligned.
    size_t fill = 0;
    while (fill < kStreamBufferBytes) {
      ssize_t r = ::read(in.get(), buf.get() + fill, kStreamBufferBytes - fill);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EINVAL && (::fcntl(in.get(), F_GETFL) & O_DIRECT) != 0 &&
          DropDirectIo(in.get())) {
        continue;  // refused direct after all: the same read, buffered
      }
      if (r < 0 && errno == EIO) {
        return Status::DataLoss(ErrnoToStatus(errno, "read " + from).message());
      }
      if (r < 0) return ErrnoToStatus(errno, "read " + from);
      if (r == 0) {
        end = true;
        break;
      }
      fill += static_cast<size_t>(r);
    }
    sum.crc32c = Crc32cExtend(sum.crc32c, buf.get(), fill);
    const uint64_t offset = sum.size_bytes;
    sum.size_bytes += fill;
    if (out_fd < 0 || fill == 0) continue;
    if (!direct) {
      TANDEM_RETURN_IF_ERROR(
          WriteAll(out_fd, reinterpret_cast<const char*>(buf.get()), fill, out_path));
      continue;
    }
    const size_t padded = BlockCeil(fill);
    std::memset(buf.get() + fill, 0, padded - fill);
    TANDEM_RETURN_IF_ERROR(WriteDirectAt(out_fd, buf.get(), padded, offset, out_path));
  }
  if (direct && sum.size_bytes % kDirectIoBlock != 0 &&
      ::ftruncate(out_fd, static_cast<off_t>(sum.size_bytes)) != 0) {
    return ErrnoToStatus(errno, "truncate " + out_path);
  }
  return sum;
}

}  // namespace tandem::ps
