// FileStore: rendezvous through a shared directory (see collective.h).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

#include "common/errno_status.h"
#include "worker/collective/collective.h"

namespace tandem::collective {
namespace {

// Polling interval of Wait: short against rendezvous times (tens of ms), cheap on 2 cores.
constexpr std::chrono::milliseconds kPollInterval(5);

Status WriteAll(int fd, std::string_view value, const std::string& path) {
  while (!value.empty()) {
    ssize_t n = ::write(fd, value.data(), value.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "write " + path);
    value.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

// A name no other writer (thread or process) uses at the same time.
std::string TempName(const std::string& dir) {
  static std::atomic<uint64_t> counter{0};
  return dir + "/tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

StatusOr<std::unique_ptr<FileStore>> FileStore::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Unavailable("create store dir " + dir + ": " + ec.message());
  return std::unique_ptr<FileStore>(new FileStore(dir));
}

std::string FileStore::PathOf(std::string_view key) const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string path = dir_ + "/k.";
  for (unsigned char c : key) {
    path += kHex[c >> 4];
    path += kHex[c & 15];
  }
  return path;
}

// Not WriteFileDurably: a rendezvous key means nothing after a crash (the job rendezvouses
// again), so no fsync; and many writers share the directory, hence the unique .tmp names.
Status FileStore::Set(std::string_view key, std::string_view value) {
  const std::string tmp = TempName(dir_);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "open " + tmp);
  Status s = WriteAll(fd, value, tmp);
  ::close(fd);
  // Rename is atomic within a directory: readers see no file or the whole value.
  if (s.ok() && ::rename(tmp.c_str(), PathOf(key).c_str()) != 0) {
    s = ErrnoToStatus(errno, "rename " + tmp);
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

StatusOr<std::string> FileStore::Get(std::string_view key) {
  const std::string path = PathOf(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return Status::NotFound("store key " + std::string(key));
  if (fd < 0) return ErrnoToStatus(errno, "open " + path);
  std::string value;
  char buf[4096];
  ssize_t n;
  int err = 0;
  while ((n = ::read(fd, buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;  // before close() may change it
      break;
    }
    value.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (n < 0) return ErrnoToStatus(err, "read " + path);
  return value;
}

Status FileStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const std::string& key : keys) {
    const std::string path = PathOf(key);
    while (::access(path.c_str(), F_OK) != 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return Status::DeadlineExceeded("store key " + key + " not set within " +
                                        std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }
  return Status::Ok();
}

}  // namespace tandem::collective
