#pragma once

#include <cstdint>
#include <vector>

namespace tandem::ps {

// RocksDB's compactions run on the process-wide low-priority pool of Env::Default() (threads
// named "rocksdb:low"), shared by every store of the process.

// Lowers every compaction thread of this process to nice 19 at once, running compactions
// included (RocksDB's own LowerThreadPoolCPUPriority reaches a thread only when it starts its
// next job, seconds later for a large compaction), and keeps threads RocksDB starts later there.
// Compactions then run on the CPU time nothing else wants, and still run: a write that waits for
// one is delayed, never stopped. Returns how many threads were lowered.
int LowerCompactionPriority();

// The ids of this process's compaction threads (for tests and logs).
std::vector<int> CompactionThreads();

}  // namespace tandem::ps
