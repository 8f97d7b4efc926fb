// OutputSpace: what rank 0 does when the disk under output.dir is full (issue 21's failure
// paths). Training goes on while metrics.jsonl lines and TensorBoard events wait in memory
// (metrics::internal::HoldingAppendFile) and the chief is told what waits; the job's last
// outputs (model/dense.ckpt, the final metrics line, held events) wait for space instead of
// failing the job, whose rollback would meet the same disk. A stop ends that wait.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/metrics/metrics_writer.h"
#include "common/metrics/tensorboard_writer.h"
#include "common/status.h"

namespace tandem::worker {

struct OutputSpaceOptions {
  metrics::MetricsWriter* metrics = nullptr;  // may be null
  metrics::TensorBoardWriter* tensorboard = nullptr;
  // What holds this member's outputs now, "" once nothing does (ChiefClient::SetWaitingOn).
  std::function<void(const std::string&)> waiting_on;
  std::function<bool()> stopped;  // true ends a wait for space
  std::chrono::milliseconds retry_every{1000};
};

// One thread (the training loop's).
class OutputSpace {
 public:
  explicit OutputSpace(OutputSpaceOptions options) : o_(std::move(options)) {}

  // After writes that the disk may have refused: says what waits, once per change (the log and
  // waiting_on, with "(training goes on)"), and when nothing does any more.
  void Report();
  // Calls `write` again every retry_every while it fails for lack of space (kResourceExhausted),
  // saying so meanwhile. Returns its first other result; kCancelled when stopped() ends the wait.
  Status WhenThereIsSpace(const std::string& what, const std::function<Status()>& write);
  // The held metrics lines and TensorBoard events, written once there is space.
  Status WriteHeld();

 private:
  std::string Held() const;
  void Say(const std::string& why);

  const OutputSpaceOptions o_;
  std::string shown_;  // what waiting_on was last told
};

}  // namespace tandem::worker
