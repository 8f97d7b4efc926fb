#include "worker/frozen_model.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <utility>

#include "common/embedding/initializer.h"
#include "worker/device/backend_factory.h"
#include "worker/trainer.h"

namespace tandem::worker {

Status FrozenTable::Finish() {
  if (dim == 0 || values.size() != ids.size() * dim)
    return Status::InvalidArgument(
        "table " + std::to_string(table) + ": " + std::to_string(values.size()) + " values for " +
        std::to_string(ids.size()) + " rows of dim " + std::to_string(dim));
  if (std::is_sorted(ids.begin(), ids.end())) {
    if (std::adjacent_find(ids.begin(), ids.end()) != ids.end())
      return Status::InvalidArgument("table " + std::to_string(table) + ": an id appears twice");
    return Status::Ok();
  }
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  std::vector<uint64_t> sorted_ids(ids.size());
  std::vector<float> sorted_values(values.size());
  for (size_t i = 0; i < order.size(); ++i) {
    sorted_ids[i] = ids[order[i]];
    std::copy_n(values.begin() + static_cast<ptrdiff_t>(order[i] * dim), dim,
                sorted_values.begin() + static_cast<ptrdiff_t>(i * dim));
  }
  ids = std::move(sorted_ids);
  values = std::move(sorted_values);
  return Finish();
}

int64_t FrozenTable::Find(uint64_t id) const {
  const auto it = std::lower_bound(ids.begin(), ids.end(), id);
  return it != ids.end() && *it == id ? it - ids.begin() : -1;
}

FrozenEmbeddings::FrozenEmbeddings(const std::vector<FrozenTable>* tables,
                                   std::vector<embedding::TableSpec> specs, uint64_t seed,
                                   UnknownIds unknown)
    : tables_(tables), specs_(std::move(specs)), seed_(seed), unknown_(unknown) {}

Status FrozenEmbeddings::Pull(int64_t, std::span<const TableIds> want,
                              std::vector<std::vector<float>>* rows) {
  rows->resize(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const uint32_t table = want[i].table;
    if (table >= tables_->size() || table >= specs_.size())
      return Status::InvalidArgument("unknown table " + std::to_string(table));
    const FrozenTable& t = (*tables_)[table];
    const size_t dim = t.dim;
    auto& out = (*rows)[i];
    out.resize(want[i].ids.size() * dim);
    for (size_t j = 0; j < want[i].ids.size(); ++j) {
      const uint64_t id = want[i].ids[j];
      float* dst = &out[j * dim];
      const int64_t k = t.Find(id);
      if (k >= 0) {
        std::copy_n(&t.values[static_cast<size_t>(k) * dim], dim, dst);
        continue;
      }
      ++unknown_lookups_;
      if (unknown_ == UnknownIds::kInitial) {
        embedding::InitialEmbedding(seed_, specs_[table], id, dst);
      } else {
        std::fill_n(dst, dim, 0.0f);
      }
    }
  }
  return Status::Ok();
}

Status FrozenEmbeddings::Push(int64_t, std::span<const TableGrads>) {
  return Status::FailedPrecondition("a frozen model cannot be trained");
}

Status ValidateFrozenModel(const FrozenModel& model) {
  const auto specs = embedding::TableSpecsFromConfig(model.job);
  if (model.tables.size() != specs.size())
    return Status::InvalidArgument("the model has " + std::to_string(model.tables.size()) +
                                   " embedding tables, its config " + std::to_string(specs.size()));
  for (size_t i = 0; i < specs.size(); ++i) {
    const FrozenTable& t = model.tables[i];
    if (t.table != i || t.dim != specs[i].dim || t.values.size() != t.ids.size() * t.dim)
      return Status::InvalidArgument("embedding table " + specs[i].name + " has dim " +
                                     std::to_string(t.dim) + " and " +
                                     std::to_string(t.ids.size()) + " rows; the config says dim " +
                                     std::to_string(specs[i].dim));
  }
  return Status::Ok();
}

namespace {

Status TooManyBad(const data::BadLineLog& bad, int64_t records, double max_fraction) {
  char msg[160];
  std::snprintf(msg, sizeof(msg),
                "%lld malformed records in %lld exceed data.max_bad_fraction = %g",
                static_cast<long long>(bad.count()), static_cast<long long>(records), max_fraction);
  std::string text = msg;
  for (const auto& r : bad.reports()) text += "; " + r;
  return Status::InvalidArgument(text);
}

}  // namespace

StatusOr<ScoreResult> ScoreFrozenModel(const FrozenModel& model, const ScoreOptions& options) {
  TANDEM_RETURN_IF_ERROR(ValidateFrozenModel(model));
  const config::JobConfig& job = model.job;
  TANDEM_ASSIGN_OR_RETURN(auto backend, device::CreateBackend(job.train));
  FrozenEmbeddings embeddings(&model.tables, embedding::TableSpecsFromConfig(job), job.train.seed,
                              options.unknown);
  TrainerOptions to;
  to.job = &job;
  to.embeddings = &embeddings;
  to.backend = backend.get();
  TANDEM_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(to));
  TANDEM_RETURN_IF_ERROR(RestoreDenseParams(model.dense, &trainer->model()));
  TANDEM_ASSIGN_OR_RETURN(auto evaluator, Evaluator::Create(job, /*rank=*/0, /*world=*/1));
  if (!evaluator->enabled())
    return Status::InvalidArgument("no data to score (data.eval is empty)");
  ScoreResult result;
  const data::BadLineLog& bad = *evaluator->bad_log();
  const int64_t n = evaluator->num_records();
  // The bound is over the whole file, as the training reader's is over an epoch: the count only
  // grows, so failing as soon as it is crossed is failing at the end, sooner.
  evaluator->set_score_sink([&](const ScoredBatch& b) -> Status {
    result.records += static_cast<int64_t>(b.weights.size());
    if (static_cast<double>(bad.count()) > options.max_bad_fraction * static_cast<double>(n))
      return TooManyBad(bad, n, options.max_bad_fraction);
    return options.sink ? options.sink(b) : Status::Ok();
  });
  // Any step: the frozen rows have one version.
  TANDEM_ASSIGN_OR_RETURN(result.eval, evaluator->Run(trainer.get(), nullptr, model.step + 1));
  result.bad_records = bad.count();
  result.bad_reports = bad.reports();
  result.unknown_lookups = embeddings.unknown_lookups();
  return result;
}

}  // namespace tandem::worker
