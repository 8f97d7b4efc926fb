// Roll-forward recovery (PROTOCOLS §8): a step whose all-reduce failed is trained again with the
// same pushes and ends in the same state; a completed step is undone and redone from its
// retained bucket; the resync's verdicts; the dense state travels whole; and, with three
// replicas on threads, scenario 19 (the all-reduce completed on one survivor, failed on the
// other, the third rank replaced): every replica ends with the fault-free run's state.
// Linked into trainer_tests. The multi-process path is tested by the drill tests.
#include "worker/roll_forward/replica_resync.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/embedding/table_spec.h"
#include "common/sync.h"
#include "common/testing/local_embedding_table.h"
#include "worker/data/pipeline.h"
#include "worker/data/record_source.h"
#include "worker/device/backend_factory.h"
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

// M ranks on threads of one process: every call waits for all M, then sums in rank order (or
// copies the root's data). A rank can be told that its next all-reduce fails after it took
// part (the op completed on the others: scenario 19).
class ThreadGroup {
 public:
  explicit ThreadGroup(int m) : m_(m), bufs_(static_cast<size_t>(m)) {}
  void Run(int rank, float* data, size_t count, int root) {
    MutexLock lock(&mu_);
    bufs_[static_cast<size_t>(rank)] = data;
    const uint64_t round = round_;
    if (++arrived_ < m_) {
      while (round_ == round) cv_.Wait();
      return;
    }
    std::vector<float> out(count);
    for (size_t i = 0; i < count; ++i) {
      if (root >= 0) {
        out[i] = bufs_[static_cast<size_t>(root)][i];
        continue;
      }
      float s = bufs_[0][i];
      for (int r = 1; r < m_; ++r) s += bufs_[static_cast<size_t>(r)][i];
      out[i] = s;
    }
    for (float* b : bufs_) std::copy(out.begin(), out.end(), b);
    arrived_ = 0;
    ++round_;
    cv_.SignalAll();
  }

 private:
  const int m_;
  Mutex mu_;
  CondVar cv_{&mu_};
  int arrived_ GUARDED_BY(mu_) = 0;
  uint64_t round_ GUARDED_BY(mu_) = 0;
  std::vector<float*> bufs_ GUARDED_BY(mu_);
};

class GroupRank : public collective::Collective {
 public:
  GroupRank(ThreadGroup* g, int rank, int size) : g_(g), rank_(rank), size_(size) {}
  Status AllReduceSum(float* data, size_t count) override {
    if (!fail_after_next) {
      g_->Run(rank_, data, count, -1);
      return Status::Ok();
    }
    fail_after_next = false;
    std::vector<float> scratch(data, data + count);  // the op ran; this rank saw it fail
    g_->Run(rank_, scratch.data(), count, -1);
    return Status::Unavailable("peer failed (test)");
  }
  Status Broadcast(float* data, size_t count, int root) override {
    g_->Run(rank_, data, count, root);
    return Status::Ok();
  }
  Status Barrier() override { return Status::Ok(); }
  void Abort() override {}
  Status Rebuild(const std::string&) override { return Status::Ok(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool fail_after_next = false;

 private:
  ThreadGroup* g_;
  const int rank_, size_;
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
  collective::Collective* collective = &group;
  RecordingEmbeddings embeddings{job};
  std::unique_ptr<device::Backend> backend;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<data::RecordSource> source;
  std::unique_ptr<data::BatchReader> reader;
  data::Batch batch;
  BatchRows rows;

  explicit Replica(bool retain = true, collective::Collective* in_group = nullptr) {
    if (in_group != nullptr) collective = in_group;
    backend = std::move(device::CreateBackend(job.train)).value();
    TrainerOptions o;
    o.job = &job;
    o.rank = collective->rank();
    o.world = collective->size();
    o.embeddings = &embeddings;
    o.backend = backend.get();
    o.collective = collective;
    o.retain_last_step = retain;
    trainer = std::move(Trainer::Create(o)).value();
    source = std::move(data::OpenSource(job, job.train.seed, false)).value();
    data::PipelineOptions po;
    po.world = o.world;
    po.rank = o.rank;
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
  // A loss during the redo: the step stays undone, to be redone after the next resync.
  faulty.group.fail_next = true;
  EXPECT_FALSE(faulty.trainer->RedoLastStep().ok());
  EXPECT_TRUE(faulty.trainer->collective_failed());
  EXPECT_TRUE(faulty.trainer->redo_pending());
  const int calls = faulty.group.calls;
  auto redo = faulty.trainer->RedoLastStep();
  ASSERT_TRUE(redo.ok()) << redo.status();
  EXPECT_EQ(faulty.group.calls, calls + 1);
  EXPECT_FALSE(faulty.trainer->redo_pending());
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

// Runs fn(rank) on one thread per rank and waits for all.
void OnEveryRank(int m, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < m; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

TEST(ReplicaResyncTest, Scenario19ReplicasAgreeAfterAnAllReduceThatCompletedOnSomeRanksOnly) {
  constexpr int kM = 3;
  ThreadGroup clean_group(kM), group(kM);
  std::vector<std::unique_ptr<GroupRank>> clean_ranks, ranks;
  std::vector<std::unique_ptr<Replica>> clean, run;
  for (int r = 0; r < kM; ++r) {
    clean_ranks.push_back(std::make_unique<GroupRank>(&clean_group, r, kM));
    ranks.push_back(std::make_unique<GroupRank>(&group, r, kM));
    clean.push_back(std::make_unique<Replica>(true, clean_ranks.back().get()));
    run.push_back(std::make_unique<Replica>(true, ranks.back().get()));
  }
  OnEveryRank(kM, [&](int r) { EXPECT_TRUE(clean[r]->TrainSteps(0, 9).ok()); });

  // Step 5: its all-reduce completes on rank 0 and fails on rank 1; rank 2 dies after it.
  OnEveryRank(kM, [&](int r) {
    ASSERT_TRUE(run[r]->TrainSteps(0, 5).ok());
    ASSERT_TRUE(run[r]->Read(5).ok());
    if (r == 1) ranks[1]->fail_after_next = true;
    auto st = run[r]->Train();
    EXPECT_EQ(st.ok(), r != 1) << st.status();
  });
  const std::string lost_push = run[2]->embeddings.pushes[5].front();
  run[2] = std::make_unique<Replica>(true, ranks[2].get());  // the replacement: a new process

  // Rank 0 is stuck in the pull of step 6 (its pushes of 6 not acknowledged), rank 1 in the
  // all-reduce of step 5; both survivors and the replacement resync, then train step 5 again.
  std::vector<ResyncResult> results(kM);
  OnEveryRank(kM, [&](int r) {
    ResyncInput in;
    in.replacement = r == 2;
    in.completed = r == 0 ? 5 : 4;
    in.pushes_acknowledged = r == 1;
    auto rs = ResyncReplicas(ranks[r].get(), run[r]->trainer.get(), in);
    ASSERT_TRUE(rs.ok()) << rs.status();
    results[r] = *rs;
    if (rs->rolled_back) {
      EXPECT_TRUE(run[r]->trainer->RedoLastStep().ok());
    } else {
      if (r == 2) {
        ASSERT_TRUE(run[r]->Read(5).ok());
      }
      EXPECT_TRUE(run[r]->Train().ok());
    }
    EXPECT_TRUE(run[r]->TrainSteps(6, 9).ok());
  });
  for (int r = 0; r < kM; ++r) {
    EXPECT_EQ(results[r].next_step, 5) << r;
    EXPECT_EQ(results[r].survivors, 2) << r;
    EXPECT_EQ(results[r].root, 0) << r;
    EXPECT_EQ(results[r].rolled_back, r == 0) << r;
    EXPECT_EQ(run[r]->trainer->DenseChecksum().Hex(), clean[r]->trainer->DenseChecksum().Hex())
        << "replica " << r << " differs from the fault-free run";
  }
  // The replacement recomputed the lost rank's push of step 5 byte for byte.
  EXPECT_EQ(run[2]->embeddings.pushes[5].front(), lost_push);
  EXPECT_EQ(run[1]->embeddings.pushes[5].size(), 2u);  // trained twice, the same bytes
  EXPECT_EQ(run[1]->embeddings.pushes[5][0], run[1]->embeddings.pushes[5][1]);
}

}  // namespace
}  // namespace tandem::worker
