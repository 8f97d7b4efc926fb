#pragma once

#include <rocksdb/env.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace tandem::ps {

// RocksDB's info log (the LOG file of a DB directory), written by tandem instead of RocksDB's
// own EnvLogger. Once the disk is full, EnvLogger's first failed append marks its file writer
// failed, and Debian's librocksdb keeps its assertions: the next line it logs (RocksDB's
// SstFileManager logs as it recovers from that very error) aborts the process in
// `WritableFileWriter::AssertFalseAndGetStatusForPrevError`. A PS on a full disk died that way
// within minutes and again at every restart (issue 21). Here a line the disk refuses is dropped
// and counted, and the next line is tried again.
class InfoLogFile : public rocksdb::Logger {
 public:
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{32} << 20;

  // Appends to dir/LOG; a LOG an earlier open left becomes LOG.old (the one before is replaced),
  // and so does this one once it holds `max_bytes`, so the two stay within twice that. A LOG
  // that cannot be opened (the directory missing or full) is opened again at the next line.
  InfoLogFile(std::string dir, uint64_t max_bytes = kDefaultMaxBytes);
  ~InfoLogFile() override;

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override;
  size_t GetLogFileSize() const override;

  // Lines the file did not take (a write failed or was short).
  uint64_t dropped_lines() const { return dropped_.load(std::memory_order_relaxed); }
  std::string path() const { return dir_ + "/LOG"; }

 private:
  bool OpenLocked(bool rotate);
  void WriteLocked(const char* data, size_t n);

  const std::string dir_;
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  int fd_ = -1;           // guarded by mu_
  uint64_t bytes_ = 0;    // guarded by mu_: in the current LOG
  bool failing_ = false;  // guarded by mu_: the last line was dropped
  std::atomic<uint64_t> dropped_{0};
};

// Drops every line: for opens that must write nothing into the directory (read-only opens of
// live DBs and restore points, a replay).
class NullInfoLog : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

}  // namespace tandem::ps
