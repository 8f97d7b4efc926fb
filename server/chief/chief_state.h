// ChiefState: the numbers the chief issues and must never issue twice (PROTOCOLS §1, §10), kept
// in `checkpoint.dir/chief/state` and made durable (tmp + fsync + rename + fsync(dir)) before any
// of them is used.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace tandem::chief {

struct ChiefStateData {
  uint64_t term = 0;                 // raised at every chief start
  uint64_t highest_incarnation = 0;  // one counter for every role, so higher is always newer
  uint64_t generation = 1;           // a fresh job starts at generation 1
  uint64_t timeline = 0;
  int64_t latest_step = -1;  // the committed LATEST checkpoint; -1 = none

  friend bool operator==(const ChiefStateData&, const ChiefStateData&) = default;
};

// Requires external synchronization.
class ChiefState {
 public:
  // Reads `<checkpoint_dir>/chief/state` (a fresh job when absent), raises the term by one and
  // persists that before returning, so two chief starts never share a term.
  // kDataLoss naming the file when it exists but cannot be parsed; kUnavailable for I/O errors.
  static StatusOr<std::unique_ptr<ChiefState>> Open(const std::string& checkpoint_dir);

  const ChiefStateData& data() const { return data_; }
  // Persists `data` durably and then adopts it. On error nothing is adopted.
  Status Save(const ChiefStateData& data);
  const std::string& path() const { return path_; }

 private:
  explicit ChiefState(std::string path) : path_(std::move(path)) {}

  const std::string path_;
  ChiefStateData data_;
};

// The file format, for tests: JSON with the fields of ChiefStateData.
std::string EncodeChiefState(const ChiefStateData& data);
// kDataLoss naming `name` when `text` is not a valid state.
StatusOr<ChiefStateData> DecodeChiefState(const std::string& text, const std::string& name);

}  // namespace tandem::chief
