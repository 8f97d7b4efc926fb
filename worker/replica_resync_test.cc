// Roll-forward recovery on one replica (PROTOCOLS §8): a step whose all-reduce failed is
// trained again with the same pushes and ends in the same state; a completed step is undone and
// redone from its retained bucket; the resync's verdicts; the dense state travels whole.
// Linked into trainer_tests. The multi-process path is tested by the drill tests.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "common/embedding/table_spec.h"
#include "common/local_embedding_table.h"
#include "worker/data/pipeline.h"
#include "worker/data/record_source.h"
#include "worker/device/backend_factory.h"
#include "worker/replica_resync.h"
#include "worker/trainer.h"

namespace tandem::worker {
namespace {

// One rank; the all-reduce fails when told to (a peer lost), as Gloo does.
class OneRank : public collective::Collective {
 public:
  Status AllReduceSum(float*, size_t) override {
    ++calls;
    if (fail_next) {
      fail_next = false;
      return Status::Unavailable("peer failed (test)");
    }
    return Status::Ok();
  }
  Status Broadcast(float*, size_t, int root) override {
    return root == 0 ? Status::Ok() : Status::InvalidArgument("root");
  }
  Status Barrier() override { return Status::Ok(); }
  void Abort() override {}
  Status Rebuild(const std::string&) override { return Status::Ok(); }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool fail_next = false;
  int calls = 0;
};

// Pulls read a table nobody pushes to (every step sees the same rows, as a k = 0 pull of the
// version before the step does); pushes are recorded, byte for byte, per step.
class RecordingEmbeddings : public EmbeddingClient {
 public:
  explicit RecordingEmbeddings(const config::JobConfig& job)
      : table_(embedding::TableSpecsFromConfig(job), job.train.seed) {}
  Status Pull(int64_t step, std::span<const TableIds> tables,
              std::vector<std::vector<float>>* rows) override {
    return table_.Pull(step, tables, rows);
  }
  Status Push(int64_t step, std::span<const TableGrads> tables) override {
    std::string bytes;
    for (const auto& t : tables) {
      bytes.append(reinterpret_cast<const char*>(t.ids.data()), t.ids.size_bytes());
      bytes.append(reinterpret_cast<const char*>(t.grads.data()), t.grads.size_bytes());
    }
    pushes[step].push_back(std::move(bytes));
    return Status::Ok();
  }
  std::map<int64_t, std::vector<std::string>> pushes;

 private:
  LocalEmbeddingTable table_;
};

config::JobConfig Job() {
  auto job = config::ParseJobConfig(
      "data:\n  format: synthetic\n  num_categorical: 6\n  synthetic:\n    vocab: 200\n"
      "model:\n  embedding_dim: 8\n  bottom_mlp: [16, 8]\n  top_mlp: [16, 1]\n"
      "train:\n  batch_size: 32\n  seed: 9\n  dense_optimizer: adam\n  dense_lr: 0.01\n",
      "resync.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

struct Replica {
  config::JobConfig job = Job();
  OneRank group;
  RecordingEmbeddings embeddings{job};
  std::unique_ptr<device::Backend> backend;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<data::RecordSource> source;
  std::unique_ptr<data::BatchReader> reader;
  data::Batch batch;
  BatchRows rows;

  explicit Replica(bool retain = true) {
    backend = std::move(device::CreateBackend(job.train)).value();
    TrainerOptions o;
    o.job = &job;
    o.embeddings = &embeddings;
    o.backend = backend.get();
    o.collective = &group;
    o.retain_last_step = retain;
    trainer = std::move(Trainer::Create(o)).value();
    source = std::move(data::OpenSource(job.data, job.train.seed, false)).value();
    data::PipelineOptions po;
    po.batch = static_cast<int>(job.train.batch_size);
    reader = std::make_unique<data::BatchReader>(source.get(), job.train.seed, po);
  }
  Status Read(int64_t step) {
    TANDEM_RETURN_IF_ERROR(reader->ReadStep(step, &batch));
    return PullBatchRows(&embeddings, step, batch, &rows);
  }
  StatusOr<StepStats> Train() { return trainer->StepWithRows(batch, rows); }
  Status TrainSteps(int64_t from, int64_t to) {
    for (int64_t s = from; s < to; ++s) {
      TANDEM_RETURN_IF_ERROR(Read(s));
      TANDEM_RETURN_IF_ERROR(Train().status());
    }
    return Status::Ok();
  }
};

TEST(ReplicaResyncTest, AStepWhoseAllReduceFailedIsTrainedAgainWithTheSamePushes) {
  Replica clean, faulty;
  ASSERT_TRUE(clean.TrainSteps(0, 8).ok());
  ASSERT_TRUE(faulty.TrainSteps(0, 4).ok());
  ASSERT_TRUE(faulty.Read(4).ok());
  faulty.group.fail_next = true;
  auto failed = faulty.Train();
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(faulty.trainer->collective_failed()) << failed.status();
  ResyncInput in;
  in.completed = 3;
  in.pushes_acknowledged = true;  // failed in the all-reduce of step 4
  auto rs = ResyncReplicas(&faulty.group, faulty.trainer.get(), in);
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_EQ(rs->next_step, 4);
  EXPECT_FALSE(rs->rolled_back);
  ASSERT_TRUE(faulty.Train().ok());
  ASSERT_TRUE(faulty.TrainSteps(5, 8).ok());
  ASSERT_EQ(faulty.embeddings.pushes[4].size(), 2u);
  EXPECT_EQ(faulty.embeddings.pushes[4][0], faulty.embeddings.pushes[4][1])
      << "the step trained again pushed another payload";
  for (int64_t s = 0; s < 8; ++s)
    EXPECT_EQ(faulty.embeddings.pushes[s].front(), clean.embeddings.pushes[s].front()) << s;
  EXPECT_EQ(faulty.trainer->DenseChecksum().Hex(), clean.trainer->DenseChecksum().Hex());
}

TEST(ReplicaResyncTest, ACompletedStepIsUndoneAndRedoneFromItsRetainedBucket) {
  Replica clean, faulty;
  ASSERT_TRUE(clean.TrainSteps(0, 8).ok());
  ASSERT_TRUE(faulty.TrainSteps(0, 5).ok());
  // Failed in the pull of step 5: the lost rank's pushes of step 4 may be missing, so step 4
  // is undone and its all-reduce taken again.
  ResyncInput in;
  in.completed = 4;
  in.pushes_acknowledged = false;
  auto rs = ResyncReplicas(&faulty.group, faulty.trainer.get(), in);
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_EQ(rs->next_step, 4);
  EXPECT_TRUE(rs->rolled_back);
  const int calls = faulty.group.calls;
  auto redo = faulty.trainer->RedoLastStep();
  ASSERT_TRUE(redo.ok()) << redo.status();
  EXPECT_EQ(faulty.group.calls, calls + 1);
  EXPECT_EQ(faulty.embeddings.pushes[4].size(), 1u) << "a redone step pushes nothing";
  ASSERT_TRUE(faulty.TrainSteps(5, 8).ok());
  EXPECT_EQ(faulty.trainer->DenseChecksum().Hex(), clean.trainer->DenseChecksum().Hex());
}

TEST(ReplicaResyncTest, VerdictsAreFailedPreconditionAndGroupFailuresUnavailable) {
  Replica r;
  ASSERT_TRUE(r.TrainSteps(0, 3).ok());
  ResyncInput replacement;
  replacement.replacement = true;
  auto none = ResyncReplicas(&r.group, r.trainer.get(), replacement);
  EXPECT_TRUE(none.status().IsFailedPrecondition()) << none.status();
  EXPECT_NE(none.status().message().find("no replica survived"), std::string::npos);

  ResyncInput two_back;  // would have to undo steps 2 and 1
  two_back.completed = 2;
  two_back.pushes_acknowledged = false;
  Replica no_retain(/*retain=*/false);
  ASSERT_TRUE(no_retain.TrainSteps(0, 3).ok());
  auto cannot = ResyncReplicas(&no_retain.group, no_retain.trainer.get(), two_back);
  EXPECT_TRUE(cannot.status().IsFailedPrecondition()) << cannot.status();
  EXPECT_NE(cannot.status().message().find("cannot undo"), std::string::npos) << cannot.status();

  r.group.fail_next = true;
  auto lost = ResyncReplicas(&r.group, r.trainer.get(), ResyncInput{false, 2, true});
  EXPECT_TRUE(lost.status().IsUnavailable()) << lost.status();
}

TEST(ReplicaResyncTest, DenseStateTravelsWholeAndAWrongSizeIsRefused) {
  Replica a, b;
  ASSERT_TRUE(a.TrainSteps(0, 6).ok());
  ASSERT_NE(a.trainer->DenseChecksum().Hex(), b.trainer->DenseChecksum().Hex());
  std::vector<float> state = a.trainer->ExportDenseState();
  ASSERT_TRUE(b.trainer->ImportDenseState(state).ok());
  EXPECT_EQ(a.trainer->DenseChecksum().Hex(), b.trainer->DenseChecksum().Hex());
  state.pop_back();
  const std::string before = b.trainer->DenseChecksum().Hex();
  EXPECT_TRUE(b.trainer->ImportDenseState(state).IsInvalidArgument());
  EXPECT_EQ(b.trainer->DenseChecksum().Hex(), before);
}

}  // namespace
}  // namespace tandem::worker
