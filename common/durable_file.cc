#include "common/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "common/errno_status.h"

namespace tandem {
namespace {

Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "write " + path);
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  return rc == 0 ? Status::Ok() : ErrnoToStatus(err, "fsync " + dir);
}

Status WriteFileDurably(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create " + tmp);
  Status s = WriteAll(fd, bytes, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoToStatus(errno, "fsync " + tmp);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    s = ErrnoToStatus(errno, "rename " + tmp + " to " + path);
  if (!s.ok()) {
    // A half-written .tmp is never read, but it would take space until the next write.
    ::unlink(tmp.c_str());
    return s;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  return FsyncDir(dir.empty() ? "." : dir);
}

}  // namespace tandem
