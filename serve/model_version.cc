#include "serve/model_version.h"

#include <algorithm>

#include "common/embedding/initializer.h"
#include "common/embedding/table_spec.h"
#include "worker/device/backend_factory.h"
#include "worker/trainer.h"

namespace tandem::serve {

namespace {

// `tandem predict` scores in the evaluator's batches of 2048: a request scored in the same
// batches goes through the same kernels.
constexpr int kScoreBatch = 2048;

// The version's rows behind the trainer's interface, as FrozenEmbeddings puts a frozen model's.
class RowClient : public EmbeddingClient {
 public:
  RowClient(const RowSource* rows, std::vector<embedding::TableSpec> specs, uint64_t seed,
            worker::UnknownIds unknown)
      : rows_(rows), specs_(std::move(specs)), seed_(seed), unknown_(unknown) {}

  Status Pull(int64_t, std::span<const TableIds> want,
              std::vector<std::vector<float>>* out) override {
    out->resize(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const uint32_t table = want[i].table;
      if (table >= specs_.size())
        return Status::InvalidArgument("unknown table " + std::to_string(table));
      const size_t dim = specs_[table].dim;
      const size_t n = want[i].ids.size();
      auto& rows = (*out)[i];
      rows.resize(n * dim);
      found_.assign(n, 0);
      TANDEM_RETURN_IF_ERROR(rows_->Read(table, want[i].ids, rows.data(), found_.data()));
      for (size_t j = 0; j < n; ++j) {
        if (found_[j]) continue;
        ++unknown_lookups_;
        float* dst = &rows[j * dim];
        if (unknown_ == worker::UnknownIds::kInitial) {
          embedding::InitialEmbedding(seed_, specs_[table], want[i].ids[j], dst);
        } else {
          std::fill_n(dst, dim, 0.0f);
        }
      }
    }
    return Status::Ok();
  }
  Status Push(int64_t, std::span<const TableGrads>) override {
    return Status::FailedPrecondition("a served model is not trained");
  }
  int64_t TakeUnknownLookups() { return std::exchange(unknown_lookups_, 0); }

 private:
  const RowSource* rows_;
  std::vector<embedding::TableSpec> specs_;
  uint64_t seed_;
  worker::UnknownIds unknown_;
  std::vector<uint8_t> found_;
  int64_t unknown_lookups_ = 0;
};

}  // namespace

struct ModelVersion::Scorer {
  std::unique_ptr<device::Backend> backend;
  std::unique_ptr<RowClient> client;
  std::unique_ptr<worker::Trainer> trainer;
  data::Batch batch;
  std::vector<float> probs;
};

StatusOr<std::shared_ptr<ModelVersion>> ModelVersion::Create(config::JobConfig job, int64_t step,
                                                             worker::DenseState dense,
                                                             std::shared_ptr<const RowSource> rows,
                                                             const VersionOptions& options) {
  std::shared_ptr<ModelVersion> v(new ModelVersion());
  job.train.device = options.device;
  // Requests are scored side by side: one BLAS thread per scorer, not a pool fighting them.
  job.train.threads = 1;
  v->job_ = std::move(job);
  v->step_ = step;
  v->schema_ = data::SchemaFromConfig(v->job_);
  for (const auto& [name, feature] : v->job_.features) v->sparse_names_.push_back(name);
  v->dense_ = std::move(dense);
  v->rows_ = std::move(rows);
  v->options_ = options;
  v->options_.scorers = std::max(1, options.scorers);
  // One scorer now: a dense state that does not fit the model fails here, not in a request.
  TANDEM_ASSIGN_OR_RETURN(auto first, v->NewScorer());
  MutexLock lock(&v->mu_);
  v->idle_.push_back(std::move(first));
  v->created_ = 1;
  return v;
}

ModelVersion::~ModelVersion() = default;

StatusOr<std::unique_ptr<ModelVersion::Scorer>> ModelVersion::NewScorer() const {
  auto s = std::make_unique<Scorer>();
  TANDEM_ASSIGN_OR_RETURN(s->backend, device::CreateBackend(job_.train));
  s->client = std::make_unique<RowClient>(rows_.get(), embedding::TableSpecsFromConfig(job_),
                                          job_.train.seed, options_.unknown);
  worker::TrainerOptions to;
  to.job = &job_;
  to.embeddings = s->client.get();
  to.backend = s->backend.get();
  TANDEM_ASSIGN_OR_RETURN(s->trainer, worker::Trainer::Create(to));
  TANDEM_RETURN_IF_ERROR(worker::RestoreDenseParams(dense_, &s->trainer->model()));
  return s;
}

std::unique_ptr<ModelVersion::Scorer> ModelVersion::Acquire() const {
  MutexLock lock(&mu_);
  while (idle_.empty() && created_ >= options_.scorers) freed_.Wait();
  if (!idle_.empty()) {
    auto s = std::move(idle_.back());
    idle_.pop_back();
    return s;
  }
  ++created_;  // built by the caller, outside the lock
  return nullptr;
}

void ModelVersion::Release(std::unique_ptr<Scorer> scorer) const {
  MutexLock lock(&mu_);
  if (scorer != nullptr) {
    idle_.push_back(std::move(scorer));
  } else {
    --created_;  // a scorer that could not be built
  }
  freed_.Signal();
}

Status ModelVersion::Score(std::span<const data::Sample> samples, std::vector<float>* probs,
                           int64_t* unknown_ids) const {
  std::unique_ptr<Scorer> s = Acquire();
  if (s == nullptr) {
    auto made = NewScorer();
    if (!made.ok()) {
      Release(nullptr);
      return made.status();
    }
    s = std::move(made).value();
  }
  const auto tasks = static_cast<size_t>(schema_.num_labels);
  probs->resize(samples.size() * tasks);
  Status status = Status::Ok();
  for (size_t off = 0; off < samples.size() && status.ok(); off += kScoreBatch) {
    const int b = static_cast<int>(std::min<size_t>(kScoreBatch, samples.size() - off));
    s->batch.Reset(schema_, b);
    for (int i = 0; i < b; ++i) s->batch.Set(i, samples[off + static_cast<size_t>(i)]);
    s->batch.Dedup();
    s->batch.step = step_ + 1;
    status = s->trainer->Predict(step_ + 1, s->batch, &s->probs);
    if (status.ok()) {
      std::copy_n(s->probs.begin(), static_cast<size_t>(b) * tasks,
                  probs->begin() + static_cast<ptrdiff_t>(off * tasks));
    }
  }
  const int64_t unknown = s->client->TakeUnknownLookups();
  if (unknown_ids != nullptr) *unknown_ids = unknown;
  Release(std::move(s));
  return status;
}

}  // namespace tandem::serve
