// MetricsWriter: `output.dir/metrics.jsonl` (DESIGN §12), written by worker rank 0. One JSON
// object per line: logged steps, periodic evals, and exactly one last line with "final": true.
// Each line reaches the kernel whole before the call returns, so scripts may read the file
// while the job runs, and a crash loses at most the line being written.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics/append_file.h"
#include "common/metrics/holding_append_file.h"
#include "common/status.h"
#include "common/sync.h"

namespace tandem::metrics {

// Where one step's wall time went, in seconds (keys data_s ... wait_s).
struct StepTimes {
  double data_s = 0;       // reading and batching records
  double pull_s = 0;       // embedding pulls not hidden behind compute
  double compute_s = 0;    // forward and backward
  double allreduce_s = 0;  // dense all-reduce not hidden behind pushes
  double push_s = 0;       // embedding pushes
  double wait_s = 0;       // barriers, parked pulls, stragglers
};

struct StepMetrics {
  int64_t step = 0;
  uint64_t timeline = 0;
  double loss = 0;             // mean over the global batch; a non-finite value is written null
  double samples_per_sec = 0;  // global batch over the step's wall time
  StepTimes times;
  bool replay = false;  // written as "replay": true, and only then
  // fp16 (written when loss_scale > 0): the loss scale of the step, and how many steps since
  // the last logged one were skipped on overflow (PROTOCOLS §2.7).
  double loss_scale = 0;
  int64_t skipped_steps = 0;
  // Malformed data lines rank 0 has trained on so far in this run (written when >= 0).
  int64_t bad_lines = -1;
};

// One label's figures (data.labels). With several labels, eval and final lines carry them all
// under "tasks": {"<label>": {"auc", "logloss"[, "teacher_auc"]}, ...} in data.labels order,
// beside the first label's top-level auc/logloss/teacher_auc that scripts read; with one label
// "tasks" is left out, so single-task files stay as they were.
struct TaskMetrics {
  std::string label;
  double auc = NAN;
  double logloss = NAN;
  double teacher_auc = NAN;  // written when finite
};

struct EvalMetrics {
  int64_t step = 0;
  uint64_t timeline = 0;
  double auc = 0;
  double logloss = 0;
  int64_t bad_lines = -1;               // as in StepMetrics
  std::vector<TaskMetrics> tasks = {};  // written when there are two or more
};

struct FinalMetrics {
  double auc = 0;  // the final held-out eval
  double logloss = 0;
  std::string model_checksum;  // ModelChecksum::Hex()
  double teacher_auc = NAN;    // synthetic data: the best achievable AUC (written when finite)
  int64_t step = -1;           // the last trained step (written when >= 0)
  int64_t bad_lines = -1;      // as in StepMetrics
  std::vector<TaskMetrics> tasks = {};  // as in EvalMetrics
};

// Safe for concurrent use (the trainer and an eval thread may both write).
class MetricsWriter {
 public:
  // Opens `path`, appending when it exists (a resumed job). A torn last line left by a crash is
  // cut off first. Step lines of steps up to the highest step already in the file are written
  // with "replay": true (a run resumed from a checkpoint trains them again). Errors:
  // kFailedPrecondition if the file already ends with the final line (the job finished: appending
  // would break "exactly one last line"); I/O errors from errno.
  static StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path);

  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Each appends one line. A line the disk has no room for waits in memory and goes out, in
  // order, with the next line that fits (HoldingAppendFile): training does not stop for a full
  // output disk. Errors: kFailedPrecondition after WriteFinal; other I/O errors.
  Status WriteStep(const StepMetrics& m);
  Status WriteEval(const EvalMetrics& m);
  // Appends the held lines and the "final": true line and fsyncs it: it is the job's result.
  // Only once. kResourceExhausted while the disk has no room: nothing is final yet, and the
  // caller may call it again.
  Status WriteFinal(const FinalMetrics& m);
  // Writes the lines that wait for space: Ok once none is left.
  Status WriteHeld();
  // What waits for space and why ("" when nothing does), e.g. "lines of metrics.jsonl wait in
  // memory for space: RESOURCE_EXHAUSTED: write ...: File too large (EFBIG)".
  std::string Held() const;
  // Lines dropped because the memory for held lines was full.
  uint64_t dropped_lines() const;

  const std::string& path() const { return path_; }

 private:
  explicit MetricsWriter(internal::AppendFile file) : path_(file.path()), file_(std::move(file)) {}
  Status WriteLine(const std::string& json) EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;     // a copy of file_.path(), readable without the lock
  int64_t replay_until_ = -1;  // the highest step logged before this Open
  mutable Mutex mu_;
  internal::HoldingAppendFile file_ GUARDED_BY(mu_);
  bool finished_ GUARDED_BY(mu_) = false;
};

}  // namespace tandem::metrics
