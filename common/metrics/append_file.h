// AppendFile: the file handle behind metrics.jsonl and the TensorBoard event files. Each record
// goes to the kernel in one write() with no user-space buffer, so a crash of this process loses
// at most the record being written. Internal to common/metrics/.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>

#include "common/errno_status.h"
#include "common/status.h"

namespace tandem::metrics::internal {

// A move-only, append-only file descriptor. Requires external synchronization.
class AppendFile {
 public:
  enum class Mode {
    kCreateOrAppend,  // open an existing file at its end, or create it
    kCreateNew,       // fail with kAlreadyExists if the file exists
  };

  // Opens `path` for reading and appending. Errors: kNotFound (missing directory),
  // kAlreadyExists (kCreateNew), kPermissionDenied, others from errno.
  static StatusOr<AppendFile> Open(const std::string& path, Mode mode);

  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile();

  // Appends `bytes` whole. When the write fails part-way, the partial record is cut off again
  // (best effort), so the next record does not land glued to a torn one.
  Status Append(std::string_view bytes);
  Status Sync();  // fsync: survives a power loss, not only a process crash

  StatusOr<off_t> Size() const;
  // Reads [offset, offset + n); kDataLoss if the file is shorter.
  StatusOr<std::string> ReadAt(off_t offset, size_t n) const;
  Status Truncate(off_t size);

  const std::string& path() const { return path_; }

 private:
  AppendFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status WriteAll(std::string_view bytes);

  int fd_ = -1;
  std::string path_;
};

}  // namespace tandem::metrics::internal
