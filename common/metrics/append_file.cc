#include "common/metrics/append_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace tandem::metrics::internal {

StatusOr<AppendFile> AppendFile::Open(const std::string& path, Mode mode) {
  int flags = O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC;
  if (mode == Mode::kCreateNew) flags |= O_EXCL;
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "open " + path);
  return AppendFile(fd, path);
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status AppendFile::WriteAll(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "write " + path_);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status AppendFile::Append(std::string_view bytes) {
  // Single writer: the end before this write is where a failed record must be cut back to.
  const off_t start = ::lseek(fd_, 0, SEEK_END);
  if (start < 0) return ErrnoToStatus(errno, "lseek " + path_);
  Status status = WriteAll(bytes);
  if (!status.ok()) Truncate(start).IgnoreError();  // the write error is the one to report
  return status;
}

Status AppendFile::Sync() {
  if (::fsync(fd_) != 0) return ErrnoToStatus(errno, "fsync " + path_);
  return Status::Ok();
}

StatusOr<off_t> AppendFile::Size() const {
  const off_t size = ::lseek(fd_, 0, SEEK_END);
  if (size < 0) return ErrnoToStatus(errno, "lseek " + path_);
  return size;
}

StatusOr<std::string> AppendFile::ReadAt(off_t offset, size_t n) const {
  std::string bytes(n, '\0');
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, bytes.data() + done, n - done, offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoToStatus(errno, "read " + path_);
    if (got == 0) return Status::DataLoss("short read of " + path_);
    done += static_cast<size_t>(got);
  }
  return bytes;
}

Status AppendFile::Truncate(off_t size) {
  if (::ftruncate(fd_, size) != 0) return ErrnoToStatus(errno, "truncate " + path_);
  return Status::Ok();
}

}  // namespace tandem::metrics::internal
