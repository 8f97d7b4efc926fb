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
    : source_(std::move(source)),
      seed_(seed),
      options_(options),
      next_commit_(options.start_step) {}

Pipeline::~Pipeline() { Stop(); }

void Pipeline::Start() {
  const int n = std::max(1, options_.threads);
  producers_.resize(n);
  for (int k = 0; k < n; ++k) {
    Producer& p = producers_[k];
    RecordSource* source = source_.get();
    if (k > 0) {
      auto clone = source_->Clone();
      if (!clone.ok()) {
        MutexLock lock(&mu_);
        error_ = clone.status();  // no batch precedes it: Next returns it at once
        producers_.resize(k);
        break;
      }
      p.clone = std::move(*clone);
      source = p.clone.get();
    }
    p.reader = std::make_unique<BatchReader>(source, seed_, options_);
  }
  {
    MutexLock lock(&mu_);
    if (!error_.ok()) return;
  }
  for (int k = 0; k < n; ++k) producers_[k].thread = std::thread([this, k] { Run(k); });
}

void Pipeline::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  for (Producer& p : producers_) {
    if (p.thread.joinable()) p.thread.join();
  }
}

// Fails once the malformed lines read exceed the bound. The denominator is at least one epoch
// (N), so early in the first epoch it fires only when the file's own bad fraction must already
// exceed it: a rank sees each bad line at most once per epoch.
Status Pipeline::CheckBadFraction(int64_t read, int64_t bad,
                                  const std::vector<std::string>& reports) const {
  const double denom = static_cast<double>(std::max(read, source_->num_records()));
  if (static_cast<double>(bad) <= options_.max_bad_fraction * denom) return Status::Ok();
  char msg[160];
  std::snprintf(
      msg, sizeof(msg), "data: %lld malformed lines in %lld read exceed data.max_bad_fraction = %g",
      static_cast<long long>(bad), static_cast<long long>(read), options_.max_bad_fraction);
  std::string text = msg;
  for (const auto& r : reports) text += "; " + r;
  return Status::InvalidArgument(text);
}

void Pipeline::Run(int k) {
  Producer& producer = producers_[k];
  const int64_t n = static_cast<int64_t>(producers_.size());
  // Each source's log keeps its own first few reports; a thread reads its steps in step order,
  // so those include every report among the first few of all steps, which CommitLocked keeps.
  const BadLineLog& log = (producer.clone ? producer.clone.get() : source_.get())->bad_log();
  for (int64_t step = options_.start_step + k;; step += n) {
    std::unique_ptr<Batch> batch;
    {
      MutexLock lock(&mu_);
      // Bounded read-ahead: at most queue_depth steps past the last one the consumer took.
      while (!stop_ && error_.ok() &&
             step >= options_.start_step + consumed_ + options_.queue_depth)
        cv_.Wait();
      if (stop_ || !error_.ok()) return;
      if (!free_.empty()) {
        batch = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!batch) batch = std::make_unique<Batch>();
    StepResult result;
    const int64_t bad_before = log.count();
    const size_t reports_before = log.reports().size();
    result.status = producer.reader->ReadStep(step, batch.get());
    result.batch = std::move(batch);
    result.bad = log.count() - bad_before;
    result.reports.assign(log.reports().begin() + reports_before, log.reports().end());
    const bool failed = !result.status.ok();
    MutexLock lock(&mu_);
    pending_.emplace(step, std::move(result));
    CommitLocked();
    if (failed) return;  // later steps are never delivered: the error commits before them
  }
}

void Pipeline::CommitLocked() {
  for (auto it = pending_.find(next_commit_); error_.ok() && it != pending_.end();
       it = pending_.find(next_commit_)) {
    StepResult r = std::move(it->second);
    pending_.erase(it);
    bad_count_ += r.bad;
    for (auto& report : r.reports) {
      if (bad_reports_.size() < BadLineLog::kMaxReports) bad_reports_.push_back(std::move(report));
    }
    const int64_t read = (next_commit_ - options_.start_step + 1) * options_.batch;
    Status s = r.status;
    if (s.ok()) s = CheckBadFraction(read, bad_count_, bad_reports_);
    if (!s.ok()) {
      error_ = s;
      break;
    }
    ready_.push_back(std::move(r.batch));
    ++next_commit_;
  }
  cv_.SignalAll();
}

StatusOr<std::unique_ptr<Batch>> Pipeline::Next() {
  MutexLock lock(&mu_);
  // Without producers nothing would ever arrive: a usage error, not a wait.
  if (producers_.empty()) return Status::FailedPrecondition("data pipeline: Next before Start");
  while (ready_.empty() && error_.ok() && !stop_) cv_.Wait();
  if (stop_) return Status::Cancelled("data pipeline stopped");
  if (!ready_.empty()) {
    auto batch = std::move(ready_.front());
    ready_.pop_front();
    ++consumed_;
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
