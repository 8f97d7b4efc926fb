// Single-process training with the in-process embedding table (issue: worker).
#include "worker/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/embedding/table_spec.h"
#include "common/testing/local_embedding_table.h"
#include "common/testing/test_util.h"
#include "worker/data/auc.h"
#include "worker/data/pipeline.h"
#include "worker/data/record_source.h"
#include "worker/data/synthetic.h"
#include "worker/device/backend_factory.h"
#include "worker/device/device_info.h"

namespace tandem::worker {
namespace {

config::JobConfig SmallJob() {
  auto job = config::ParseJobConfig(
      "data:\n  format: synthetic\n  num_categorical: 26\n  synthetic:\n    vocab: 200\n"
      "    zipf: 1.1\n    eval_rows: 8000\n"
      "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 1]\n"
      "tables:\n  default:\n    optimizer: adagrad\n    lr: 0.3\n    init: {dist: uniform, scale: "
      "0.01}\n"
      "train:\n  batch_size: 256\n  seed: 7\n  dense_optimizer: adam\n  dense_lr: 0.01\n",
      "small.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

struct TrainRun {
  std::unique_ptr<device::Backend> backend;
  std::unique_ptr<LocalEmbeddingTable> table;
  std::unique_ptr<Trainer> trainer;
};

TrainRun MakeRun(const config::JobConfig& job) {
  TrainRun r;
  r.backend = std::move(device::CreateBackend(job.train)).value();
  r.table =
      std::make_unique<LocalEmbeddingTable>(embedding::TableSpecsFromConfig(job), job.train.seed);
  TrainerOptions o;
  o.job = &job;
  o.embeddings = r.table.get();
  o.backend = r.backend.get();
  r.trainer = std::move(Trainer::Create(o)).value();
  return r;
}

void Train(const config::JobConfig& job, TrainRun* run, int64_t steps) {
  auto source = std::move(data::OpenSource(job, job.train.seed, /*eval=*/false)).value();
  data::PipelineOptions po;
  po.batch = static_cast<int>(job.train.batch_size);
  data::BatchReader reader(source.get(), job.train.seed, po);
  data::Batch batch;
  for (int64_t s = 0; s < steps; ++s) {
    ASSERT_TRUE(reader.ReadStep(s, &batch).ok());
    auto st = run->trainer->Step(batch);
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_TRUE(std::isfinite(st->loss));
  }
}

// Held-out AUC of the model and of the teacher (the best achievable) on the eval stream.
std::pair<double, double> EvalAuc(const config::JobConfig& job, TrainRun* run, int64_t step) {
  data::SyntheticSpec spec;
  spec.seed = job.train.seed;
  spec.vocab = job.data.synthetic_vocab;
  spec.zipf = job.data.synthetic_zipf;
  spec.schema = {static_cast<int>(job.data.num_dense), static_cast<int>(job.data.num_categorical)};
  spec.stream = 1;
  data::SyntheticGenerator gen(spec);
  std::vector<float> labels, scores;
  std::vector<double> teacher;
  data::Batch batch;
  data::Sample sample(spec.schema);
  const int b = 1000;
  for (int64_t off = 0; off < job.data.synthetic_eval_rows; off += b) {
    batch.Reset(spec.schema, b);
    for (int i = 0; i < b; ++i) {
      double p = 0;
      gen.Generate(off + i, &sample, &p);
      batch.Set(i, sample);
      labels.push_back(sample.label());
      teacher.push_back(p);
    }
    batch.Dedup();
    std::vector<float> probs;
    EXPECT_TRUE(run->trainer->Predict(step, batch, &probs).ok());
    scores.insert(scores.end(), probs.begin(), probs.end());
  }
  return {data::Auc(std::span<const float>(scores), labels),
          data::Auc(std::span<const double>(teacher), labels)};
}

TEST(TrainerTest, ReachesTheTeachersAucOnHeldOutData) {
  const auto job = SmallJob();
  TrainRun run = MakeRun(job);
  auto [before, teacher] = EvalAuc(job, &run, 0);
  Train(job, &run, 5000);
  auto [after, teacher2] = EvalAuc(job, &run, 5000);
  EXPECT_EQ(teacher, teacher2);
  EXPECT_GT(after, before + 0.05) << "before " << before << " after " << after;
  EXPECT_GT(after, teacher - 0.02) << "model " << after << " teacher " << teacher;
}

TEST(TrainerTest, SameConfigAndSeedGiveBitIdenticalParameters) {
  const auto job = SmallJob();
  TrainRun a = MakeRun(job), b = MakeRun(job);
  Train(job, &a, 20);
  Train(job, &b, 20);
  auto pa = a.trainer->model().params(), pb = b.trainer->model().params();
  ASSERT_EQ(pa.size(), pb.size());
  EXPECT_EQ(0, std::memcmp(pa.data(), pb.data(), pa.size() * sizeof(float)));
  std::vector<std::vector<uint8_t>> ra, rb;
  size_t differ = 0;
  a.table->ForEachRow([&](uint32_t t, uint64_t id, const uint8_t* row) {
    std::vector<std::vector<float>> other;
    std::vector<uint64_t> one = {id};
    TableIds ti{t, one};
    ASSERT_TRUE(b.table->Pull(20, {&ti, 1}, &other).ok());
    differ +=
        std::memcmp(other[0].data(), row + sizeof(embedding::RowMeta), 8 * sizeof(float)) != 0;
  });
  EXPECT_EQ(differ, 0u);

  auto other_seed = job;
  other_seed.train.seed = 8;
  TrainRun c = MakeRun(other_seed);
  Train(other_seed, &c, 20);
  EXPECT_NE(0,
            std::memcmp(pa.data(), c.trainer->model().params().data(), pa.size() * sizeof(float)));
}

// Trains `steps` steps through the data pipeline with `threads` reader threads and returns
// model_checksum of the dense model (with optimizer state) and every embedding row.
std::string TrainAndChecksum(int threads, int64_t steps) {
  const auto job = SmallJob();
  TrainRun run = MakeRun(job);
  auto source = std::move(data::OpenSource(job, job.train.seed, /*eval=*/false)).value();
  data::PipelineOptions po;
  po.batch = static_cast<int>(job.train.batch_size);
  po.threads = threads;
  data::Pipeline pipeline(std::move(source), job.train.seed, po);
  pipeline.Start();
  for (int64_t s = 0; s < steps; ++s) {
    auto batch = pipeline.Next();
    if (!batch.ok() || !run.trainer->Step(**batch).ok())
      return "failed at step " + std::to_string(s);
    pipeline.Recycle(std::move(batch).value());
  }
  ModelChecksum sum = run.trainer->DenseChecksum();
  run.table->AddToChecksum(&sum);
  return sum.Hex();
}

// PROTOCOLS §5: the same config and seed give a bit-identical model in another process and
// with another number of data-pipeline threads.
TEST(TrainerTest, TwoProcessesAndThreadCountsGiveTheSameModel) {
  ::tandem::testing::TempDir dir;
  const std::string out = dir.File("child.checksum");
  auto child = ::tandem::testing::RunCommand(
      {::tandem::SelfExecutable()}, {"TANDEM_TRAINER_CHILD_OUT=" + out, "OPENBLAS_NUM_THREADS=1"},
      {}, std::chrono::seconds(60));
  ASSERT_EQ(child.exit.exit_code, 0) << child.output;
  const std::string theirs = ::tandem::testing::ReadFile(out);
  const std::string mine = TrainAndChecksum(/*threads=*/1, 40);
  ASSERT_EQ(mine.size(), 32u) << mine;
  EXPECT_EQ(mine, theirs);
  EXPECT_NE(mine, TrainAndChecksum(1, 39));  // and it does see a difference
}

TEST(TrainerTest, DenseScheduleComesFromTheConfig) {
  auto job = config::ParseJobConfig(
      "train:\n  dense_optimizer: adamw\n  dense_lr: 0.01\n  dense_weight_decay: 0.1\n"
      "  lr_warmup_steps: 10\n  lr_decay: cosine\n  lr_decay_steps: 100\n",
      "schedule.yaml", {});
  ASSERT_TRUE(job.ok()) << job.status();
  auto o = model::DenseOptimizerOptionsFromConfig(job->train);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->kind, model::DenseOptimizerKind::kAdamW);
  EXPECT_FLOAT_EQ(o->weight_decay, 0.1f);
  EXPECT_DOUBLE_EQ(model::ScheduledLearningRate(*o, 0), 0.001);  // warmup: 1/10 of the peak
  EXPECT_DOUBLE_EQ(model::ScheduledLearningRate(*o, 9), 0.01);   // peak at the end of warmup
  EXPECT_LT(model::ScheduledLearningRate(*o, 60), 0.01);         // cosine decay after it
  auto bad = config::ParseJobConfig("train:\n  lr_decay: linear\n", "bad.yaml", {});
  EXPECT_NE(bad.status().message().find("train.lr_decay"), std::string::npos) << bad.status();
}

TEST(TrainerTest, BackendComesFromTrainDevice) {
  auto job = SmallJob();
  job.train.threads = 2;
  EXPECT_TRUE(device::CreateBackend(job.train).ok());
  job.train.device = "cuda";
  // Either a device is there and the CUDA backend comes up, or the reason is given: the build
  // has no CUDA part, or the host no device.
  const auto cuda = device::CreateBackend(job.train);
  if (device::ProbeDevices().device_count > 0) {
    EXPECT_TRUE(cuda.ok()) << cuda.status();
  } else {
    EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable) << cuda.status();
    EXPECT_NE(cuda.status().message().find("cuda"), std::string::npos) << cuda.status();
  }
  job.train.device = "tpu";
  EXPECT_TRUE(device::CreateBackend(job.train).status().IsInvalidArgument());
}

// A Criteo file with one bad line in 1000 trains, and the pipeline reports the line by number.
TEST(TrainerTest, CriteoFileWithOneBadLineTrainsAndReportsIt) {
  ::tandem::testing::TempDir dir;
  const std::string path = dir.File("train.tsv");
  data::SyntheticSpec spec;
  spec.seed = 3;
  spec.vocab = 200;
  ASSERT_TRUE(data::WriteSyntheticCriteo(path, spec, 1000).ok());
  std::string text = ::tandem::testing::ReadFile(path);
  size_t at = 0;
  for (int line = 1; line < 500; ++line) at = text.find('\n', at) + 1;
  text.replace(at, text.find('\n', at) - at, "1\t2\tnot-a-number");
  ::tandem::testing::WriteFile(path, text);

  auto job = SmallJob();
  job.data.format = "criteo";
  job.data.train = path;
  job.data.max_bad_fraction = 0.01;
  job.train.batch_size = 100;
  TrainRun run = MakeRun(job);
  auto source = data::OpenSource(job, job.train.seed, /*eval=*/false);
  ASSERT_TRUE(source.ok()) << source.status();
  data::PipelineOptions po;
  po.batch = 100;
  po.max_bad_fraction = job.data.max_bad_fraction;
  data::Pipeline pipeline(std::move(source).value(), job.train.seed, po);
  EXPECT_TRUE(pipeline.Next().status().IsFailedPrecondition());  // not started: no hang
  pipeline.Start();
  int64_t weight_zero = 0;
  for (int64_t s = 0; s < 10; ++s) {  // one epoch: every line once
    auto batch = pipeline.Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (float w : (*batch)->weight) weight_zero += w == 0;
    auto st = run.trainer->Step(**batch);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_TRUE(std::isfinite(st->loss));
    pipeline.Recycle(std::move(batch).value());
  }
  EXPECT_EQ(weight_zero, 1);
  EXPECT_EQ(pipeline.bad_count(), 1);
  ASSERT_EQ(pipeline.bad_reports().size(), 1u);
  EXPECT_NE(pipeline.bad_reports()[0].find("train.tsv:500"), std::string::npos)
      << pipeline.bad_reports()[0];
}

}  // namespace

// The child process of TwoProcessesAndThreadCountsGiveTheSameModel: trains with 3 pipeline
// threads and writes its checksum to the file named by TANDEM_TRAINER_CHILD_OUT.
int TrainerChildMain(const char* out) {
  const std::string sum = TrainAndChecksum(/*threads=*/3, 40);
  ::tandem::testing::WriteFile(out, sum);
  return sum.size() == 32 ? 0 : 1;
}

}  // namespace tandem::worker

int main(int argc, char** argv) {
  if (const char* out = std::getenv("TANDEM_TRAINER_CHILD_OUT"))
    return tandem::worker::TrainerChildMain(out);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
