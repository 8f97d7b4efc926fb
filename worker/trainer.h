// The worker's training step (DESIGN §4, PROTOCOLS §2.5): batch -> de-duplicated ids -> pull ->
// forward/backward -> per-row gradients (summed in sample order) -> one push per shard sent
// while the dense gradients are all-reduced -> dense update once the all-reduce completed.
// Between the forward pass and its push a worker waits on no other worker. The embeddings come
// through an EmbeddingClient (parameter servers, or the in-process table for single-process
// training); the all-reduce through a Collective (none for a single process).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/config/job_config.h"
#include "common/embedding_client.h"
#include "common/model_checksum.h"
#include "common/status.h"
#include "worker/data/record.h"
#include "worker/device/backend.h"
#include "worker/model/dense_optimizer.h"
#include "worker/model/loss_scaler.h"
#include "worker/model/model.h"

namespace tandem::collective {
class Collective;
}

namespace tandem::worker {

struct TrainerOptions {
  const config::JobConfig* job = nullptr;
  int rank = 0;
  int world = 1;                                 // M
  EmbeddingClient* embeddings = nullptr;         // not owned
  collective::Collective* collective = nullptr;  // not owned; null = single process
  device::Backend* backend = nullptr;            // not owned
  // Keep what undoing the last completed step needs (its dense state before the update and
  // its local, unreduced gradient bucket), for roll-forward recovery (PROTOCOLS §8). Costs a
  // copy of the dense state per step; off for a single process.
  bool retain_last_step = false;
};

// Seconds spent per phase of one step, and the loss.
struct StepStats {
  double loss = 0;  // mean BCE over the global batch (all ranks, when a collective is given)
  // push_s is the push's time beyond the all-reduce it overlaps with.
  double pull_s = 0, compute_s = 0, push_s = 0, allreduce_s = 0, update_s = 0;
  bool stop_agreed = false;        // some rank voted to stop after this step (see StepWithRows)
  bool checkpoint_agreed = false;  // some rank voted for a checkpoint at the next step
  bool skipped = false;            // fp16: the gradients overflowed on some rank; nothing applied
  float loss_scale = 1.0f;         // fp16: the scale this step trained with
};

// The embedding rows of one batch, as pulled: per table, unique_ids[t].size() x dim floats.
using BatchRows = std::vector<std::vector<float>>;

// Pulls the unique rows of `batch` at the version a pull for `step` sees.
Status PullBatchRows(EmbeddingClient* client, int64_t step, const data::Batch& batch,
                     BatchRows* rows);

// The dense-state tensor holding the fp16 loss scaler's state ([scale, good_steps]).
inline constexpr char kLossScaleTensor[] = "loss_scale";

// Requires external synchronization (one training thread).
class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Create(const TrainerOptions& options);

  // Trains global step batch.step on this worker's slice, pulling its rows first.
  StatusOr<StepStats> Step(const data::Batch& batch);
  // Trains on rows pulled beforehand (k >= 1 prefetch). `stop_vote` > 0 asks every rank to stop
  // after this step: the votes ride in the dense all-reduce bucket, so all ranks agree on the
  // step without another round trip (StepStats::stop_agreed). `checkpoint_vote` likewise asks
  // for a checkpoint at the next step (checkpoint.every_seconds: one rank's clock decides, and
  // every rank learns the step before it pushes it; StepStats::checkpoint_agreed).
  StatusOr<StepStats> StepWithRows(const data::Batch& batch, const BatchRows& rows,
                                   bool stop_vote = false, bool checkpoint_vote = false);
  // Whether the last Step/StepWithRows/RedoLastStep failed in its all-reduce (after its pushes
  // were acknowledged): the state is that of the step before, and the step may be trained again
  // once the collective is rebuilt (PROTOCOLS §8, §11).
  bool collective_failed() const { return collective_failed_; }
  // The step RollBackLastStep can undo (retain_last_step), or -1.
  int64_t retained_step() const { return retained_step_; }
  // Puts back the dense state from before the update of `step`, the last completed step; its
  // all-reduce is then redone by RedoLastStep. kFailedPrecondition when `step` is not retained.
  Status RollBackLastStep(int64_t step);
  // Redoes the all-reduce of the rolled-back step from its retained local bucket and applies
  // the update again (its pushes were acknowledged before: none are sent). A failed redo leaves
  // the step undone: redo_pending() stays true.
  StatusOr<StepStats> RedoLastStep();
  bool redo_pending() const { return redo_step_ >= 0; }

  // The dense state (parameters, optimizer state, fp16 loss scaler) as one flat buffer, the
  // same size on every replica of one config: what a replacement takes from a survivor.
  std::vector<float> ExportDenseState() const;
  // kInvalidArgument (changing nothing) for a buffer of the wrong size or a bad scaler state.
  Status ImportDenseState(std::span<const float> state);

  // Probabilities of a batch (batch x labels, sample-major) at the embedding version a pull for
  // `step` sees; changes nothing.
  Status Predict(int64_t step, const data::Batch& batch, std::vector<float>* probs);

  // The dense part of model_checksum (DESIGN §12): every tensor with its optimizer slots, and
  // the optimizer's scalar state as one more record (fp16: and the loss scaler's state as the
  // tensor "loss_scale").
  ModelChecksum DenseChecksum() const;

  // fp16 loss scaling state (train.precision: fp16), else null.
  const model::LossScaler* loss_scaler() const { return fp16_ ? &scaler_ : nullptr; }
  model::LossScaler* mutable_loss_scaler() { return fp16_ ? &scaler_ : nullptr; }

  model::Model& model() { return *model_; }
  const model::Model& model() const { return *model_; }
  const model::DenseOptimizer& optimizer() const { return *optimizer_; }
  // For restoring a saved dense state (dense_state.h); not for use while a step runs.
  model::DenseOptimizer& mutable_optimizer() { return *optimizer_; }

 private:
  explicit Trainer(const TrainerOptions& options) : options_(options) {}
  // Points host_batch_ at `batch` and `rows` (host memory).
  Status Describe(const data::Batch& batch, const BatchRows& rows);
  // The per-row gradients of the last TrainStep as one push per table (fp16: unscaled; an
  // overflowed step pushes no rows: a skip push).
  std::vector<TableGrads> MakePush(const data::Batch& batch, bool skip) const;
  // Row gradients of tables that several features look up: the sum of the features' gradients,
  // in feature order (fixed, so the push is the same on every run).
  void SumSharedTableGrads();
  // The reduced gradients are in the model: the fp16 scaler update and unscaling, then the
  // optimizer step unless `skip` (fp16 overflow anywhere).
  void ApplyUpdate(int64_t step, bool skip, StepStats* st);
  // retain_last_step: the dense state before the update of `step`.
  void RetainBeforeUpdate(int64_t step);

  TrainerOptions options_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<model::DenseOptimizer> optimizer_;
  data::Schema schema_;
  std::vector<size_t> table_dims_;      // per table
  std::vector<int> features_of_table_;  // per table: how many features look it up
  // Per model feature (the data's, then any wide ones): the table it pulls, and the data
  // feature whose bags (offsets, inverse, weights) it uses.
  std::vector<int> feature_table_;
  std::vector<int> feature_source_;
  bool fp16_ = false;
  model::LossScaler scaler_;
  // Scratch reused across steps.
  BatchRows rows_;  // per table: unique rows (Step, Predict)
  model::HostBatch host_batch_;
  std::vector<std::vector<int64_t>> inverse64_;    // per feature: batch.inverse widened
  std::vector<std::vector<float>> row_grads_;      // per table: what is pushed
  std::vector<std::vector<float>> feature_grads_;  // per feature of a shared table
  std::vector<float*> row_grad_ptrs_;              // per feature: where TrainStep writes
  std::vector<float> bucket_;  // dense gradients + loss, votes, overflow: all-reduced together
  bool collective_failed_ = false;
  // retain_last_step: the last completed step's local bucket and the state before its update.
  int64_t retained_step_ = -1;
  int64_t redo_step_ = -1;  // rolled back, awaiting RedoLastStep
  std::vector<float> local_bucket_, retained_bucket_;
  std::vector<float> retained_params_, retained_optimizer_;
  model::LossScaler retained_scaler_;
};

}  // namespace tandem::worker
