// The chief's side of checkpoints (PROTOCOLS §7): at start, the partial checkpoints are cleaned
// up and the one to resume from is chosen (checkpoint.resume, refusing a computation-defining
// config change); during the job, the parts worker rank 0 gathers are committed as a manifest,
// LATEST moves, and the newest checkpoint.keep are retained.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "server/chief/checkpoint_manifest.h"

namespace tandem::chief {

// What every checkpoint shares: identities and the cluster shape when it was taken.
struct CommitContext {
  std::string job_id;
  uint64_t timeline = 0, term = 0, generation = 0;
};

// Requires external synchronization (the chief's mutex).
class CheckpointCoordinator {
 public:
  // Loads LATEST, cleans the partial checkpoints older than it (with warnings for damaged files).
  // kNotFound is not an error (a fresh job); checkpoint.resume: required without a checkpoint, or a
  // checkpoint whose computation-defining config differs (the keys named), is kInvalidArgument.
  static StatusOr<CheckpointCoordinator> Open(const config::JobConfig& job);
  // A chief restarted into a running job (PROTOCOLS §10): loads LATEST and cleans the partial
  // checkpoints older than it, like Open, but LATEST is only the newest commit, not a resume
  // point: the run resumed from `run_resume_step` (persisted when it began), and a job whose
  // final checkpoint is committed is not refused (its members still have to hear it ended).
  static StatusOr<CheckpointCoordinator> Rejoin(const config::JobConfig& job,
                                                int64_t run_resume_step);

  // The step the job resumes from (the workers start at resume_step() + 1), or -1.
  int64_t resume_step() const { return resume_step_; }
  int64_t latest_step() const { return latest_step_; }
  // The committed checkpoints kept after the last Commit (ascending).
  const std::vector<int64_t>& retained() const { return retained_; }

  // Writes the manifest of `step` from the parts (JSON {"name", "files": [{path, size, crc32c}],
  // "detail"}), moves LATEST and LATEST_DURABLE, deletes partial checkpoints below `step` and
  // retains checkpoint.keep. The latest step again is OK and changes nothing (a re-sent commit).
  // kInvalidArgument for malformed parts or a step not after the latest; I/O errors from the
  // manifest writer.
  Status Commit(int64_t step, const std::vector<std::string>& parts,
                const std::string& determinism_class, const CommitContext& context);

 private:
  explicit CheckpointCoordinator(const config::JobConfig& job) : job_(job) {}

  config::JobConfig job_;
  int64_t resume_step_ = -1;
  int64_t latest_step_ = -1;
  std::vector<int64_t> retained_;
};

// Parses one part as CommitCheckpointRequest carries it.
StatusOr<ManifestPart> ParsePart(const std::string& json);

}  // namespace tandem::chief
