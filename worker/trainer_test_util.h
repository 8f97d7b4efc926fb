// A single-process trainer over the in-process embedding table and the job's synthetic stream,
// for the trainer's tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "common/embedding/table_spec.h"
#include "common/testing/local_embedding_table.h"
#include "worker/collective/collective.h"
#include "worker/data/pipeline.h"
#include "worker/data/record_source.h"
#include "worker/device/backend_factory.h"
#include "worker/trainer.h"

namespace tandem::worker::testing {

struct TrainerRun {
  config::JobConfig job;
  std::unique_ptr<device::Backend> backend;
  std::unique_ptr<LocalEmbeddingTable> table;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<data::RecordSource> source;
  std::unique_ptr<data::BatchReader> reader;
  data::Batch batch;

  // Reads global step `step`'s batch into `batch` and trains it.
  StatusOr<StepStats> Step(int64_t step) {
    TANDEM_RETURN_IF_ERROR(reader->ReadStep(step, &batch));
    return trainer->Step(batch);
  }
  // Trains steps [0, to) and returns the mean loss of steps [from, to) (NaN after a failed step,
  // which is also a test failure).
  double MeanLoss(int64_t from, int64_t to) {
    double sum = 0;
    for (int64_t s = 0; s < to; ++s) {
      auto st = Step(s);
      EXPECT_TRUE(st.ok()) << st.status();
      if (!st.ok()) return std::nan("");
      if (s >= from) sum += st->loss;
    }
    return sum / static_cast<double>(to - from);
  }
  // The whole model's checksum: dense state and embedding rows.
  ModelChecksum Checksum() const {
    ModelChecksum sum = trainer->DenseChecksum();
    table->AddToChecksum(&sum);
    return sum;
  }
};

// Backend, table, trainer and batch reader for `job` (the job is copied into the run), with
// `collective` (not owned; null: a single process).
inline std::unique_ptr<TrainerRun> MakeTrainerRun(const config::JobConfig& job,
                                                  collective::Collective* collective = nullptr) {
  auto r = std::make_unique<TrainerRun>();
  r->job = job;
  auto backend = device::CreateBackend(r->job.train);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return nullptr;
  r->backend = std::move(backend).value();
  r->table = std::make_unique<LocalEmbeddingTable>(embedding::TableSpecsFromConfig(r->job),
                                                   r->job.train.seed);
  TrainerOptions o;
  o.job = &r->job;
  o.embeddings = r->table.get();
  o.backend = r->backend.get();
  o.collective = collective;
  auto trainer = Trainer::Create(o);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return nullptr;
  r->trainer = std::move(trainer).value();
  r->source = std::move(data::OpenSource(r->job, r->job.train.seed, false)).value();
  data::PipelineOptions po;
  po.batch = static_cast<int>(r->job.train.batch_size);
  r->reader = std::make_unique<data::BatchReader>(r->source.get(), r->job.train.seed, po);
  return r;
}

}  // namespace tandem::worker::testing
