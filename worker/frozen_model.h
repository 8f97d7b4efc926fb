// A trained model frozen for scoring (`tandem export`, `predict`, `eval`): the job config, the
// dense parameters and every materialised embedding row, held in memory. Scoring runs the
// trainer's own evaluator and model code on it, so a frozen model scores every record exactly as
// the trainer's eval did on the model it was frozen from (same backend and precision).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/embedding/table_spec.h"
#include "common/embedding_client.h"
#include "common/status.h"
#include "worker/dense_state.h"
#include "worker/evaluator.h"

namespace tandem::worker {

// The rows of one table: ids ascending, each once; values[i * dim ...] is ids[i]'s embedding.
// A value type.
struct FrozenTable {
  uint32_t table = 0;
  uint32_t dim = 0;
  std::vector<uint64_t> ids;
  std::vector<float> values;
  // Sorts by id. kInvalidArgument for a repeated id or values that do not fit ids x dim.
  Status Finish();
  // Index of `id` in ids, or -1.
  int64_t Find(uint64_t id) const;
};

// A value type (large: every row).
struct FrozenModel {
  config::JobConfig job;
  int64_t step = -1;                // the last step trained into it
  DenseState dense;                 // parameters only (WithoutOptimizerState)
  std::vector<FrozenTable> tables;  // indexed by table id, one per data.num_categorical
};

// What a lookup of an id that has no row returns.
enum class UnknownIds {
  kInitial,  // the row's initial value, as a parameter server reads an absent row
  kZero,     // zeros: an id never trained contributes nothing to the pooled bag
};

// The frozen rows behind the trainer's interface. Pulls read rows (any step); pushes fail with
// kFailedPrecondition. Requires external synchronization. `tables` must outlive it.
class FrozenEmbeddings : public EmbeddingClient {
 public:
  FrozenEmbeddings(const std::vector<FrozenTable>* tables, std::vector<embedding::TableSpec> specs,
                   uint64_t seed, UnknownIds unknown);
  Status Pull(int64_t step, std::span<const TableIds> tables,
              std::vector<std::vector<float>>* rows) override;
  Status Push(int64_t step, std::span<const TableGrads> tables) override;
  // Lookups so far of ids without a row (each occurrence in a pull counts).
  int64_t unknown_lookups() const { return unknown_lookups_; }

 private:
  const std::vector<FrozenTable>* tables_;
  std::vector<embedding::TableSpec> specs_;
  uint64_t seed_;
  UnknownIds unknown_;
  int64_t unknown_lookups_ = 0;
};

// Checks that `model` is complete and consistent: one table per categorical field with the
// config's dim, and a dense state that fits the config's model. kInvalidArgument naming what.
Status ValidateFrozenModel(const FrozenModel& model);

struct ScoreOptions {
  UnknownIds unknown = UnknownIds::kInitial;
  Evaluator::ScoreSink sink;  // receives every scored batch (may be empty)
  // Scoring fails (kInvalidArgument, with the first reports) once the malformed records exceed
  // this fraction of the file, as training does with data.max_bad_fraction; 1: never.
  double max_bad_fraction = 1;
};

struct ScoreResult {
  EvalResult eval;                       // over the well-formed records
  int64_t records = 0;                   // scored, malformed ones included
  int64_t bad_records = 0;               // malformed (weight 0)
  std::vector<std::string> bad_reports;  // the first few, "file:line: reason"
  // Lookups of ids without a row; the evaluator pulls each distinct id of a batch once.
  int64_t unknown_lookups = 0;
};

// Scores the eval set `model.job.data` names (data.eval, or the synthetic eval rows) as one
// process (rank 0 of 1), on the backend train.device and train.precision name. Errors: the
// evaluator's, the sink's, and the bad-record bound's.
StatusOr<ScoreResult> ScoreFrozenModel(const FrozenModel& model, const ScoreOptions& options);

}  // namespace tandem::worker
