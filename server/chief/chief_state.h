// ChiefState: the numbers the chief issues and must never issue twice (PROTOCOLS §1, §10), kept
// in `checkpoint.dir/chief/state` and made durable (tmp + fsync + rename + fsync(dir)) before any
// of them is used.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/states.h"
#include "common/status.h"

namespace tandem::chief {

struct ChiefStateData {
  uint64_t term = 0;                 // raised at every chief start
  uint64_t highest_incarnation = 0;  // one counter for every role, so higher is always newer
  uint64_t generation = 1;           // a fresh job starts at generation 1
  uint64_t timeline = 0;
  int64_t latest_step = -1;  // the committed LATEST checkpoint; -1 = none

  // The current run of the job: from the start of a chief that began it until that chief, or a
  // successor after a restart, leaves on purpose. A chief that finds a run open was killed while
  // it ran and rejoins it (PROTOCOLS §10) instead of starting the job: see ChiefService::Create.
  // Files written before these fields existed read as "no run open".
  bool run_open = false;
  int64_t run_resume_step = -1;           // the checkpoint the run resumed from; -1: from scratch
  int64_t run_training_ms = 0;            // Unix ms when the run became "training"; 0: not yet
  int64_t run_ended_ms = 0;               // Unix ms when the job reached run_end_state
  std::string run_stop_reason;            // a stop was requested (SIGTERM, StopJob)
  std::optional<JobState> run_end_state;  // the terminal job state, once reached
  std::string run_result;                 // JSON: worker 0's final report once the job is done
  // Runs in a row that failed having resumed from the checkpoint of run_resume_step, i.e.
  // without committing a newer one: the restarts a supervisor's rollback (systemd, tandem
  // local) got nothing from. Bounded by recovery.max_rollbacks.
  int64_t futile_runs = 0;

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
