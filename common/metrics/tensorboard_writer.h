// TensorBoardWriter: scalar summaries in a TensorBoard event file, so `tensorboard --logdir
// OUTPUT` shows loss, auc, logloss and samples_per_sec. The file is TensorFlow's record format
// holding hand-encoded tensorflow.Event protos (see tensorboard_writer.cc); no protobuf library.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/metrics/append_file.h"
#include "common/metrics/holding_append_file.h"
#include "common/status.h"
#include "common/sync.h"

namespace tandem::metrics {

// The tags the trainer writes (issue 5); other tags are allowed.
inline constexpr std::string_view kTagLoss = "loss";
inline constexpr std::string_view kTagAuc = "auc";
inline constexpr std::string_view kTagLogloss = "logloss";
inline constexpr std::string_view kTagSamplesPerSec = "samples_per_sec";

// With several labels, each label's eval figures go under "<metric>/<label>" (e.g. "auc/click"),
// beside the plain tags that stay the first label's: TensorBoard groups tags by their prefix
// before '/', so one chart section holds every label's AUC.
inline std::string TaskTag(std::string_view metric, std::string_view label) {
  std::string tag(metric);
  tag += '/';
  tag += label;
  return tag;
}

struct TensorBoardOptions {
  // Host name in the file name, as TensorFlow writes it. Default (empty): gethostname().
  std::string hostname;
  // Seconds since the Unix epoch for Event.wall_time and the file name. Default: system clock.
  // Tests inject a fixed clock.
  std::function<double()> wall_clock;
};

struct Scalar {
  std::string_view tag;
  float value = 0;
};

// Safe for concurrent use.
class TensorBoardWriter {
 public:
  // Creates `dir` if needed and a new file `events.out.tfevents.<10-digit seconds>.<host>` in it
  // (".1", ".2", ... appended if that name exists: a restarted job never overwrites the old
  // events; TensorBoard reads every file whose name holds "tfevents"). Writes the file_version
  // record first. Errors: from mkdir/open/write.
  static StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& dir,
                                                           TensorBoardOptions options = {});

  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Writes one Event at `step` holding every scalar. Tags must be valid UTF-8 (TensorBoard's
  // requirement, not checked here).
  Status WriteScalars(int64_t step, std::span<const Scalar> scalars);
  Status WriteScalar(int64_t step, std::string_view tag, float value);
  // An event the disk has no room for waits in memory and goes out, in order, with the next
  // that fits (HoldingAppendFile). WriteHeld writes those: Ok once none is left. Held says what
  // waits and why ("" when nothing does).
  Status WriteHeld();
  std::string Held() const;

  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(internal::AppendFile file, std::function<double()> wall_clock)
      : wall_clock_(std::move(wall_clock)), path_(file.path()), file_(std::move(file)) {}
  Status WriteEvent(const std::string& event) EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::function<double()> wall_clock_;
  const std::string path_;  // a copy of file_.path(), readable without the lock
  mutable Mutex mu_;
  internal::HoldingAppendFile file_ GUARDED_BY(mu_);
};

}  // namespace tandem::metrics
