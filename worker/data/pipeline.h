// Batches for one worker, read ahead on one or more threads with a bounded queue (DESIGN §2,
// §4 step 1).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/sync.h"
#include "worker/data/order.h"
#include "worker/data/record.h"
#include "worker/data/record_source.h"

namespace tandem::data {

struct PipelineOptions {
  int world = 1;                // M
  int rank = 0;                 // r in [0, M)
  int batch = 256;              // b, per worker
  int64_t start_step = 0;       // s0: the first batch is global step s0
  int64_t base_position = 0;    // global position of step 0 (what a checkpoint stores)
  int queue_depth = 4;          // batches read ahead
  double max_bad_fraction = 1;  // data.max_bad_fraction
  // Producer threads: thread k reads steps s0+k, s0+k+threads, ... each from its own
  // RecordSource::Clone(), and the batches are still delivered strictly in step order. The
  // queue bound counts every step read ahead, whichever thread read it.
  int threads = 1;
};

// Reads rank r's slice of any global step synchronously. The pipeline thread uses one; tests
// use another to check the pipeline. Thread-compatible.
class BatchReader {
 public:
  BatchReader(RecordSource* source, uint64_t seed, const PipelineOptions& options);
  // Fills `out` with the slice of global step `step`, de-duplicated per table.
  Status ReadStep(int64_t step, Batch* out);

 private:
  RecordSource* source_;
  PipelineOptions options_;
  Order order_;
  Sample sample_;
};

// Thread-safe: one consumer calls Next/Recycle while the producer threads read ahead. What Next
// returns (batches, then possibly an error) does not depend on options.threads.
class Pipeline {
 public:
  Pipeline(std::unique_ptr<RecordSource> source, uint64_t seed, const PipelineOptions& options);
  ~Pipeline();  // Stop()s
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  void Start();
  // The next batch in step order (s0, s0+1, ...), blocking until it is ready. After a failure
  // (I/O error, too many malformed lines) returns that error, now and on every later call.
  StatusOr<std::unique_ptr<Batch>> Next();
  // Hands a consumed batch back so its buffers are reused.
  void Recycle(std::unique_ptr<Batch> batch);
  // Stops and joins the threads; Next then returns kCancelled. Idempotent.
  void Stop();

  int64_t bad_count() const;                     // malformed samples read so far
  std::vector<std::string> bad_reports() const;  // the first few, "file:line: reason"

 private:
  // One producer thread and what only it touches.
  struct Producer {
    std::unique_ptr<RecordSource> clone;  // null for thread 0, which reads source_
    std::unique_ptr<BatchReader> reader;
    std::thread thread;
  };
  // A step read by some producer, waiting until every earlier step has been committed.
  struct StepResult {
    Status status;
    std::unique_ptr<Batch> batch;
    int64_t bad = 0;                   // malformed samples read in this step
    std::vector<std::string> reports;  // the source's reports that this step added
  };

  void Run(int k);
  // Moves pending_ steps that are next in step order to ready_ (or to error_), so bad-line
  // accounting and failures happen in step order whatever order the threads finish in.
  void CommitLocked() EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status CheckBadFraction(int64_t read, int64_t bad, const std::vector<std::string>& reports) const;

  std::unique_ptr<RecordSource> source_;
  const uint64_t seed_;
  const PipelineOptions options_;
  std::vector<Producer> producers_;  // built by Start

  mutable Mutex mu_;
  CondVar cv_{&mu_};
  bool stop_ GUARDED_BY(mu_) = false;
  Status error_ GUARDED_BY(mu_);  // sticky, delivered after the batches before it
  std::map<int64_t, StepResult> pending_ GUARDED_BY(mu_);  // read, not yet committed
  int64_t next_commit_ GUARDED_BY(mu_);                    // the step to commit next
  int64_t consumed_ GUARDED_BY(mu_) = 0;                   // batches returned by Next
  std::deque<std::unique_ptr<Batch>> ready_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Batch>> free_ GUARDED_BY(mu_);
  int64_t bad_count_ GUARDED_BY(mu_) = 0;
  std::vector<std::string> bad_reports_ GUARDED_BY(mu_);
};

}  // namespace tandem::data
