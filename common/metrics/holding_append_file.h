// HoldingAppendFile: an AppendFile whose records wait in memory, in order, while the disk has no
// room for them (ENOSPC, EDQUOT, the file-size limit's EFBIG), and reach the file with the next
// record that fits. metrics.jsonl and the TensorBoard events of a job whose output disk fills
// are then complete once there is space again, and training does not stop for them (issue 21's
// failure paths). Internal to common/metrics/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

#include "common/metrics/append_file.h"
#include "common/status.h"

namespace tandem::metrics::internal {

// Requires external synchronization, as AppendFile does.
class HoldingAppendFile {
 public:
  // What records may wait beyond the file: about 200,000 metrics lines.
  static constexpr size_t kDefaultMaxHeldBytes = size_t{64} << 20;

  explicit HoldingAppendFile(AppendFile file, size_t max_held_bytes = kDefaultMaxHeldBytes)
      : file_(std::move(file)), max_held_bytes_(max_held_bytes) {}

  // Appends `record` after every record held before it. A record the disk has no room for is
  // held (Ok); past max_held_bytes it is dropped and counted instead, since memory is bounded.
  // Any other error is returned, and the record is not kept (the records before it stay held).
  Status Append(std::string record);
  // Writes the held records, then `record`, holding nothing new: kResourceExhausted while the
  // disk has no room (what was written stays written). For a record that must reach the file
  // before its caller goes on (the final metrics line).
  Status AppendNow(std::string_view record);
  // Writes the held records: Ok once none is left.
  Status WriteHeld();

  size_t held_records() const { return held_.size(); }
  uint64_t dropped_records() const { return dropped_; }
  // Why records are held (the last refusal), Ok when none is.
  const Status& held_because() const { return held_because_; }
  // "" when nothing is held, else e.g. "lines of metrics.jsonl wait in memory for space:
  // RESOURCE_EXHAUSTED: ...", `units` naming the records. No count, so that the text stays the
  // same while the disk stays full.
  std::string Describe(std::string_view units) const;

  AppendFile& file() { return file_; }
  const AppendFile& file() const { return file_; }
  const std::string& path() const { return file_.path(); }

 private:
  AppendFile file_;
  const size_t max_held_bytes_;
  std::deque<std::string> held_;
  size_t held_bytes_ = 0;
  uint64_t dropped_ = 0;
  Status held_because_;
};

}  // namespace tandem::metrics::internal
