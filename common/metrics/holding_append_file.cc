#include "common/metrics/holding_append_file.h"

#include <filesystem>
#include <utility>

namespace tandem::metrics::internal {

Status HoldingAppendFile::WriteHeld() {
  while (!held_.empty()) {
    Status written = file_.Append(held_.front());
    if (!written.ok()) {
      if (written.IsResourceExhausted()) held_because_ = written;
      return written;
    }
    held_bytes_ -= held_.front().size();
    held_.pop_front();
  }
  held_because_ = Status::Ok();
  return Status::Ok();
}

Status HoldingAppendFile::Append(std::string record) {
  Status written = WriteHeld();
  if (written.ok()) written = file_.Append(record);
  if (written.ok() || !written.IsResourceExhausted()) return written;
  held_because_ = written;
  if (held_bytes_ + record.size() > max_held_bytes_) {
    ++dropped_;
    return Status::Ok();
  }
  held_bytes_ += record.size();
  held_.push_back(std::move(record));
  return Status::Ok();
}

Status HoldingAppendFile::AppendNow(std::string_view record) {
  TANDEM_RETURN_IF_ERROR(WriteHeld());
  return file_.Append(record);
}

std::string HoldingAppendFile::Describe(std::string_view units) const {
  if (held_.empty()) return "";
  return std::string(units) + " of " + std::filesystem::path(path()).filename().string() +
         " wait in memory for space: " + held_because_.ToString();
}

}  // namespace tandem::metrics::internal
