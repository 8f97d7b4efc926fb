#include "server/ps/open_files.h"

#include <sys/resource.h>

#include <algorithm>

namespace tandem::ps {

uint64_t RaiseOpenFileLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 0;
  const rlim_t want = std::min<rlim_t>(r.rlim_max, kOpenFileLimitWanted);
  if (r.rlim_cur >= want) return r.rlim_cur;  // RLIM_INFINITY included
  rlimit raised = r;
  raised.rlim_cur = want;
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) return r.rlim_cur;
  return want;
}

int MaxOpenTablesFor(uint64_t soft_limit) {
  return static_cast<int>(std::clamp<uint64_t>(soft_limit / 4, kMinOpenTables, kMaxOpenTables));
}

int MaxOpenTables() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return kMinOpenTables;
  return MaxOpenTablesFor(r.rlim_cur);  // RLIM_INFINITY clamps to kMaxOpenTables
}

}  // namespace tandem::ps
