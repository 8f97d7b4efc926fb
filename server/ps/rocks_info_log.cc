#include "server/ps/rocks_info_log.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "common/errno_status.h"
#include "common/log.h"

namespace tandem::ps {

InfoLogFile::InfoLogFile(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  OpenLocked(/*rotate=*/true);
}

InfoLogFile::~InfoLogFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool InfoLogFile::OpenLocked(bool rotate) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  const std::string log = path();
  if (rotate) ::rename(log.c_str(), (log + ".old").c_str());  // none yet: ENOENT, nothing to keep
  fd_ = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return false;
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  bytes_ = end > 0 ? static_cast<uint64_t>(end) : 0;
  return true;
}

void InfoLogFile::WriteLocked(const char* data, size_t n) {
  if (fd_ < 0 && !OpenLocked(/*rotate=*/false)) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // One write(2) a line: with O_APPEND a failed or short one leaves at most a torn line, and
  // the next line starts on its own.
  const ssize_t w = ::write(fd_, data, n);
  const int err = errno;
  if (w == static_cast<ssize_t>(n)) {
    bytes_ += n;
    if (failing_) TLOG_INFO("RocksDB's info log {} takes lines again", path());
    failing_ = false;
    if (bytes_ >= max_bytes_) OpenLocked(/*rotate=*/true);
    return;
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
  if (w > 0) bytes_ += static_cast<uint64_t>(w);
  if (!failing_)
    TLOG_WARN("RocksDB's info log {}: lines dropped until it can be written: {}", path(),
              w < 0 ? ErrnoToStatus(err, "write").ToString() : std::string("short write"));
  failing_ = true;
}

void InfoLogFile::Logv(const char* format, va_list ap) {
  // RocksDB's own line layout: local time to the microsecond, the thread, the message.
  char head[64];
  timeval now{};
  ::gettimeofday(&now, nullptr);
  tm t{};
  ::localtime_r(&now.tv_sec, &t);
  const int head_n =
      std::snprintf(head, sizeof head, "%04d/%02d/%02d-%02d:%02d:%02d.%06ld %lx ", t.tm_year + 1900,
                    t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
                    static_cast<long>(now.tv_usec), static_cast<unsigned long>(::pthread_self()));
  va_list again;
  va_copy(again, ap);
  const int body_n = std::vsnprintf(nullptr, 0, format, again);
  va_end(again);
  if (head_n < 0 || body_n < 0) return;
  std::vector<char> line(static_cast<size_t>(head_n) + static_cast<size_t>(body_n) + 2);
  std::memcpy(line.data(), head, static_cast<size_t>(head_n));
  std::vsnprintf(line.data() + head_n, static_cast<size_t>(body_n) + 1, format, ap);
  size_t n = static_cast<size_t>(head_n) + static_cast<size_t>(body_n);
  if (n == 0 || line[n - 1] != '\n') line[n++] = '\n';
  std::lock_guard<std::mutex> lock(mu_);
  WriteLocked(line.data(), n);
}

size_t InfoLogFile::GetLogFileSize() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace tandem::ps
