#include "server/ps/compaction_priority.h"

#include <rocksdb/env.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace tandem::ps {
namespace {

// The weakest share of the CPU that CFS gives a normal thread (1.5 % of a nice-0 one's).
constexpr int kLowestNice = 19;

}  // namespace

std::vector<int> CompactionThreads() {
  std::vector<int> tids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm(e.path() / "comm");
    std::string name;
    if (!std::getline(comm, name) || name.rfind("rocksdb:low", 0) != 0) continue;
    try {
      tids.push_back(std::stoi(e.path().filename().string()));
    } catch (const std::exception&) {  // not a thread id: not ours to lower
    }
  }
  return tids;
}

int LowerCompactionPriority() {
  rocksdb::Env::Default()->LowerThreadPoolCPUPriority(rocksdb::Env::Priority::LOW,
                                                      rocksdb::CpuPriority::kLow);
  int lowered = 0;
  for (int tid : CompactionThreads()) {
    // A thread that ended meanwhile fails with ESRCH: nothing left to lower.
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), kLowestNice) == 0) ++lowered;
  }
  return lowered;
}

}  // namespace tandem::ps
