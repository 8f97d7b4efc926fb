#include "worker/data/pipeline.h"

#include <algorithm>
#include <cstdio>

namespace tandem::data {

BatchReader::BatchReader(RecordSource* source, uint64_t seed, const PipelineOptions& options)
    : source_(source),
      options_(options),
      order_(source->MakeOrder(seed)),
      sample_(source->schema()) {}

Status BatchReader::ReadStep(int64_t step, Batch* out) {
  const int b = options_.batch;
  out->Reset(source_->schema(), b);
  out->step = step;
  out->first_position =
      SlicePosition(options_.base_position, step, options_.world, options_.rank, b);
  for (int i = 0; i < b; ++i) {
    const int64_t record = order_.RecordAt(out->first_position + i);
    TANDEM_RETURN_IF_ERROR(source_->Read(record, &sample_));
    out->Set(i, sample_);
  }
  out->Dedup();
  return Status::Ok();
}

Pipeline::Pipeline(std::unique_ptr<RecordSource> source, uint64_t seed,
                   const PipelineOptions& options)
    : source_(std::move(source)), options_(options), reader_(source_.get(), seed, options) {}

Pipeline::~Pipeline() { Stop(); }

void Pipeline::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Pipeline::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

// Fails once the malformed lines read exceed the bound. The denominator is at least one epoch
// (N), so early in the first epoch it fires only when the file's own bad fraction must already
// exceed it: a rank sees each bad line at most once per epoch.
Status Pipeline::CheckBadFraction(int64_t read, int64_t bad) const {
  const double denom = static_cast<double>(std::max(read, source_->num_records()));
  if (static_cast<double>(bad) <= options_.max_bad_fraction * denom) return Status::Ok();
  char msg[160];
  std::snprintf(
      msg, sizeof(msg), "data: %lld malformed lines in %lld read exceed data.max_bad_fraction = %g",
      static_cast<long long>(bad), static_cast<long long>(read), options_.max_bad_fraction);
  std::string text = msg;
  for (const auto& r : source_->bad_log().reports()) text += "; " + r;
  return Status::InvalidArgument(text);
}

void Pipeline::Run() {
  for (int64_t step = options_.start_step;; ++step) {
    std::unique_ptr<Batch> batch;
    {
      MutexLock lock(&mu_);
      while (!stop_ && static_cast<int>(ready_.size()) >= options_.queue_depth) cv_.Wait();
      if (stop_) return;
      if (!free_.empty()) {
        batch = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!batch) batch = std::make_unique<Batch>();
    Status s = reader_.ReadStep(step, batch.get());
    const int64_t read = (step - options_.start_step + 1) * options_.batch;
    const BadLineLog& log = source_->bad_log();
    if (s.ok()) s = CheckBadFraction(read, log.count());
    MutexLock lock(&mu_);
    bad_count_ = log.count();
    bad_reports_ = log.reports();
    if (!s.ok()) {
      error_ = s;
      cv_.SignalAll();
      return;
    }
    ready_.push_back(std::move(batch));
    cv_.SignalAll();
  }
}

StatusOr<std::unique_ptr<Batch>> Pipeline::Next() {
  MutexLock lock(&mu_);
  while (ready_.empty() && error_.ok() && !stop_) cv_.Wait();
  if (stop_) return Status::Cancelled("data pipeline stopped");
  if (!ready_.empty()) {
    auto batch = std::move(ready_.front());
    ready_.pop_front();
    cv_.SignalAll();
    return batch;
  }
  return error_;
}

void Pipeline::Recycle(std::unique_ptr<Batch> batch) {
  MutexLock lock(&mu_);
  free_.push_back(std::move(batch));
}

int64_t Pipeline::bad_count() const {
  MutexLock lock(&mu_);
  return bad_count_;
}

std::vector<std::string> Pipeline::bad_reports() const {
  MutexLock lock(&mu_);
  return bad_reports_;
}

}  // namespace tandem::data
