// One served version of a model: the config and dense parameters of one training step and the
// embedding rows of that same step. A request is scored by exactly one version from start to
// end (it holds a shared_ptr), so rows of step S never meet dense weights of step S'. Scoring
// runs the trainer's own model code through a small pool of scorers (one Trainer and backend
// each), so a served score equals `tandem predict`'s for the same record and model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "common/sync.h"
#include "serve/row_source.h"
#include "worker/data/record.h"
#include "worker/dense_state.h"
#include "worker/frozen_model.h"

namespace tandem::serve {

struct VersionOptions {
  worker::UnknownIds unknown = worker::UnknownIds::kInitial;  // as predict --unknown
  int scorers = 4;             // requests scored at once; more wait for a free scorer
  std::string device = "cpu";  // cpu | cuda, as predict --device
};

// Immutable after Create; Score is thread-safe.
class ModelVersion {
 public:
  // `job` is the config the model was trained under; `dense` holds its parameters of `step`.
  // kInvalidArgument for a dense state that does not fit the config's model.
  static StatusOr<std::shared_ptr<ModelVersion>> Create(config::JobConfig job, int64_t step,
                                                        worker::DenseState dense,
                                                        std::shared_ptr<const RowSource> rows,
                                                        const VersionOptions& options);
  ~ModelVersion();

  int64_t step() const { return step_; }
  const config::JobConfig& job() const { return job_; }
  const data::Schema& schema() const { return schema_; }
  int tasks() const { return schema_.num_labels; }
  // The sparse features' names when the job has a `features` section, else empty (C1..Cm).
  const std::vector<std::string>& sparse_names() const { return sparse_names_; }
  const worker::DenseState& dense() const { return dense_; }
  const std::shared_ptr<const RowSource>& rows() const { return rows_; }

  // Probabilities of `samples` (tasks() per sample, sample-major), scored in batches of the size
  // `tandem predict` uses. `unknown_ids` (may be null) gets the lookups of ids without a row.
  Status Score(std::span<const data::Sample> samples, std::vector<float>* probs,
               int64_t* unknown_ids) const;

 private:
  struct Scorer;
  ModelVersion() = default;
  StatusOr<std::unique_ptr<Scorer>> NewScorer() const;
  std::unique_ptr<Scorer> Acquire() const;
  void Release(std::unique_ptr<Scorer> scorer) const;

  config::JobConfig job_;
  std::vector<std::string> sparse_names_;
  int64_t step_ = -1;
  data::Schema schema_;
  worker::DenseState dense_;
  std::shared_ptr<const RowSource> rows_;
  VersionOptions options_;

  mutable Mutex mu_;
  mutable CondVar freed_{&mu_};
  mutable std::vector<std::unique_ptr<Scorer>> idle_ GUARDED_BY(mu_);
  mutable int created_ GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::serve
