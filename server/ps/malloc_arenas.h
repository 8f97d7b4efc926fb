#pragma once

#include <string>

namespace tandem::ps {

// glibc gives threads their own malloc arenas, up to 8 a core, and an arena keeps what its
// threads free for their next allocations. A parameter server's threads (request handlers, the
// apply pool, ZeroMQ's and RocksDB's) allocate and free a step's worth of buffers each, so the
// arenas together held ~100 MB free beside 328 MB in use in a PS with a 256 MiB cache (glibc's
// malloc_stats, issue 21): memory beyond ps.cache_bytes that grows with the cores, not with any
// setting. At most kMallocArenas arenas hold it to the few the hot threads share.

// The arena limit for a MALLOC_ARENA_MAX environment value (nullptr: unset): the variable wins
// where it holds a positive number, else kMallocArenas.
int MallocArenaLimit(const char* env_value);
inline constexpr int kMallocArenas = 4;

// Applies MallocArenaLimit(getenv("MALLOC_ARENA_MAX")) to this process (before its threads start:
// arenas made earlier stay), and says what it did, for the daemon's log.
std::string LimitMallocArenas();

}  // namespace tandem::ps
