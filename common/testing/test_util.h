// Helpers for tests that run real processes: temp dirs, running a command with captured output,
// waiting for a file, reading a process's resident memory.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/subprocess.h"

namespace tandem::testing {

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path);

// Whether the file system holding `dir` takes O_DIRECT (asked with a probe file, removed after).
bool TakesODirect(const std::string& dir);
// Whether server/ps's CreateForCopy writes direct in `dir`: a local ext4, XFS or btrfs that takes
// O_DIRECT.
bool CopiesGoDirect(const std::string& dir);
// Pages of the file at `path` in the page cache (mincore of a mapping); -1 when it cannot tell.
// A file written and read only with O_DIRECT has none.
long PageCachePages(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);

struct CommandResult {
  ExitInfo exit;
  std::string output;  // stdout and stderr interleaved
  bool timed_out = false;
};

// Runs argv with extra environment, kills it after `timeout`.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& set_env = {},
                         const std::vector<std::string>& unset_env = {},
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));

// Waits until `path` exists and is non-empty; false on timeout.
bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout);

// VmRSS of `pid` in KiB, or -1.
long ResidentKiB(pid_t pid);

}  // namespace tandem::testing
