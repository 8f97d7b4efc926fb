#pragma once

#include <cstdint>

namespace tandem::ps {

// The open-file budget of a parameter server: every SST RocksDB keeps open holds a file
// descriptor (and a mapping: allow_mmap_reads), so the number of tables a shard can keep open
// follows RLIMIT_NOFILE.

// Raises this process's soft RLIMIT_NOFILE to its hard limit, capped at kOpenFileLimitWanted
// (what the shipped units set): an interactive shell's soft limit is often 1024 where the hard
// one is far higher, and a shard of a table 100x its cache holds hundreds of SSTs. Returns the
// soft limit in force afterwards (unchanged where setrlimit refuses).
uint64_t RaiseOpenFileLimit();
inline constexpr uint64_t kOpenFileLimitWanted = 65536;

// How many SSTs one store may keep open: a quarter of the soft limit (sockets, logs, the push
// log and the checkpoint copies' files use the rest, and a process may hold a few stores), at
// least kMinOpenTables and at most kMaxOpenTables.
int MaxOpenTables();
int MaxOpenTablesFor(uint64_t soft_limit);
inline constexpr int kMinOpenTables = 256;
inline constexpr int kMaxOpenTables = 16384;

}  // namespace tandem::ps
