// Held-out evaluation during and at the end of training (DESIGN §9, PROTOCOLS §4): every rank
// predicts its slice of the eval set at the version a pull for `step` sees (so at k = 0 it reads
// exactly the model after step - 1), and the ranks sum their AUC histograms and logloss through
// the collective, so every rank ends with the same figures whatever M is. On synthetic data the
// teacher's probabilities give the best achievable AUC beside the model's.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/data/auc.h"
#include "worker/data/record_source.h"
#include "worker/data/synthetic.h"
#include "worker/trainer.h"

namespace tandem::worker {

// The figures of the first label (data.labels[0]), and of every label in `tasks`.
struct TaskEval {
  double auc = NAN;
  double logloss = NAN;
  double teacher_auc = NAN;  // synthetic data only
};
struct EvalResult {
  double auc = NAN;
  double logloss = NAN;
  double teacher_auc = NAN;     // synthetic data only
  int64_t samples = 0;          // over all ranks
  std::vector<TaskEval> tasks;  // one per label
};

// One evaluated batch, in record order: what `tandem predict` writes out per record.
struct ScoredBatch {
  int64_t first_record = 0;  // index of probs[0] in the eval source (file order)
  int num_labels = 1;
  std::span<const float> probs;    // the model's probabilities, sample-major x num_labels
  std::span<const float> labels;   // 0 or 1, sample-major x num_labels
  std::span<const float> weights;  // 0 for a malformed record (left out of AUC and logloss)
};

// Requires external synchronization (the training thread).
class Evaluator {
 public:
  // Called by Run once per batch after scoring it; an error ends Run with it.
  using ScoreSink = std::function<Status(const ScoredBatch&)>;

  // No held-out data (data.eval empty for files): enabled() is false and Run returns NaNs.
  static StatusOr<std::unique_ptr<Evaluator>> Create(const config::JobConfig& job, int rank,
                                                     int world);
  bool enabled() const { return source_ != nullptr; }

  // Collective when collective != null: every rank must call it at the same step.
  StatusOr<EvalResult> Run(Trainer* trainer, collective::Collective* collective, int64_t step);

  // Receives every scored batch of later Runs (offline scoring; training sets none).
  void set_score_sink(ScoreSink sink) { sink_ = std::move(sink); }
  // The eval source's malformed records (count and first reports); null when disabled.
  const data::BadLineLog* bad_log() const { return source_ ? &source_->bad_log() : nullptr; }
  // Records this rank evaluates.
  int64_t num_records() const { return end_ - begin_; }
  // Whether the last Run pulled every row it needed and got to its all-reduce (a failure after
  // that point is the group's, not a pull's).
  bool reached_all_reduce() const { return reached_all_reduce_; }

 private:
  Evaluator() = default;

  data::Schema schema_;
  int batch_ = 2048;
  int64_t begin_ = 0, end_ = 0;  // this rank's records
  std::unique_ptr<data::RecordSource> source_;
  std::unique_ptr<data::SyntheticGenerator> teacher_;          // synthetic data only
  std::vector<data::AucHistogram> model_hist_, teacher_hist_;  // per label
  std::vector<float> bucket_;
  bool reached_all_reduce_ = false;
  ScoreSink sink_;
};

}  // namespace tandem::worker
