// The worker's training loop (DESIGN §4, §9): batches from the data pipeline, the step (with the
// rows of the next k batches prefetched on their own thread when embedding_staleness k >= 1),
// metrics of the global batch on rank 0, periodic and final held-out eval, and the final
// model_checksum. Everything that talks to the chief stays outside, behind the callbacks, so
// that the same loop runs in a daemon and in an in-process test.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/embedding_client.h"
#include "common/metrics/metrics_writer.h"
#include "common/metrics/tensorboard_writer.h"
#include "common/model_checksum.h"
#include "common/status.h"
#include "worker/device/backend.h"

namespace tandem::collective {
class Collective;
}

namespace tandem::worker {

class Trainer;

// What the loop reports as it goes (for heartbeats and the progress line).
struct LoopProgress {
  int64_t step = -1;  // the last completed step
  double samples_per_sec = 0;
  double loss = NAN;
  double auc = NAN, logloss = NAN, teacher_auc = NAN;
  bool evaluating = false;
  int64_t bad_lines = 0;  // malformed data lines this worker trained on so far (skipped samples)
};

struct TrainingLoopOptions {
  const config::JobConfig* job = nullptr;
  int rank = 0;
  int world = 1;
  uint64_t timeline = 0;
  EmbeddingClient* embeddings = nullptr;  // the training thread's: pulls (k = 0), pushes, eval
  // k >= 1: the prefetch thread's own client (clients are single-threaded).
  EmbeddingClient* prefetch_embeddings = nullptr;
  collective::Collective* collective = nullptr;  // null for a single process
  device::Backend* backend = nullptr;
  int64_t start_step = 0;
  // Rank 0 writes these when given (may be null).
  metrics::MetricsWriter* metrics = nullptr;
  metrics::TensorBoardWriter* tensorboard = nullptr;
  // Rank 0: the sparse part of model_checksum once every step up to `last_step` is applied.
  std::function<StatusOr<ModelChecksum>(int64_t last_step)> sparse_checksum;
  std::function<void(const LoopProgress&)> on_progress;  // after every step and eval
  // Polled once per step; true votes to stop the whole job after the current step.
  std::function<bool()> stop_requested;
  // Rank 0: what holds its outputs (a full disk under output.dir), "" once nothing does
  // (OutputSpace; ChiefClient::SetWaitingOn).
  std::function<void(const std::string&)> waiting_on;
  int data_threads = 1;  // pipeline reader threads
  // Rank 0, when non-empty: the dense state (dense_state.h) is written here once the loop ends,
  // completed or stopped, with step = steps_done - 1.
  std::string dense_state_path;
  // When non-empty: this worker's malformed-line count and first reports are kept in this file
  // (bad_line_report.h) while it trains; one left by an earlier run is removed at the start.
  std::string bad_lines_path;
  // Rank 0: takes checkpoint `step` (called right after the step, before the next one starts, at
  // every checkpoint.every_steps, at steps announced for checkpoint.every_seconds, at the step a
  // stop was agreed on and at the last step). The shards cut their restore points in the apply
  // path at announced steps, and cannot apply anything after the others (no push follows), so
  // the callback may finish the checkpoint in the background: it should only snapshot the dense
  // state before returning.
  // `final`: the job stops after this step (its last step, or a stop was agreed).
  std::function<Status(int64_t step, const Trainer& trainer, bool final)> checkpoint;
  // Called once the trainer exists, before the first step (a resume restores the dense state).
  std::function<Status(Trainer* trainer)> restore;

  // Roll-forward recovery of a lost worker (PROTOCOLS §8), when set (M > 1): a step whose
  // all-reduce failed, or whose pull or push was cancelled because the chief announced a new
  // generation, calls `recover`, which waits until the cluster is complete again and rebuilds
  // `collective` under the new generation (an error ends the loop with it). Then the replicas
  // resync (replica_resync.h) and the step is trained again.
  std::function<Status()> recover;
  // This process replaces a worker lost while the job trained: it starts with the resync and
  // trains from the step the survivors go on from, with their dense state (start_step and
  // restore are not used).
  bool rejoin = false;
};

struct TrainingResult {
  bool completed = false;  // reached train.steps (false: stopped by a vote)
  int64_t steps_done = 0;  // the next step to train
  double auc = NAN, logloss = NAN, teacher_auc = NAN;
  double last_loss = NAN;
  double samples_per_sec = 0;       // global, over the whole run
  std::string model_checksum;       // rank 0, when completed
  ModelChecksum dense_checksum;     // every rank
  std::vector<float> dense_params;  // every rank: the dense model at the end (tests, export)
  int recoveries = 0;               // roll-forward recoveries this process took part in
  int64_t bad_lines = 0;            // malformed data lines this worker trained on
};

// Runs until train.steps or an agreed stop. Errors name the step. Every callback in `options`
// runs on the calling thread (the loop's own threads, the data readers and the k >= 1
// prefetcher, call none); the TrainingLoop in training_loop.cc holds the state of one run.
StatusOr<TrainingResult> RunTrainingLoop(const TrainingLoopOptions& options);

}  // namespace tandem::worker
