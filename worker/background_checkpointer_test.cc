// Rank 0's checkpointer (background_checkpointer.h) against a scripted chief: every checkpoint
// is offered to a present chief, only the newest waits for an absent one, a refusal is final.
#include "worker/background_checkpointer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/checkpoint_layout.h"
#include "common/sync.h"
#include "common/testing/full_disk.h"
#include "common/testing/test_util.h"

namespace tandem::worker {
namespace {

using std::chrono::milliseconds;

// What the checkpointer's hooks saw and what the scripted chief answers.
struct FakeCluster {
  Mutex mu;
  std::vector<int64_t> parts_asked GUARDED_BY(mu);
  std::vector<int64_t> commits_tried GUARDED_BY(mu);
  std::vector<int64_t> committed GUARDED_BY(mu);
  std::atomic<bool> chief_away{false};
  std::atomic<bool> refuse{false};
  std::atomic<int> write_delay_ms{0};

  void Install(BackgroundCheckpointerOptions* o) {
    o->retry_every = milliseconds(20);
    o->shard_parts = [this](int64_t step, const std::vector<int64_t>&, bool) {
      std::this_thread::sleep_for(milliseconds(write_delay_ms.load()));
      MutexLock lock(&mu);
      parts_asked.push_back(step);
      return StatusOr<std::vector<std::string>>(
          std::vector<std::string>{R"({"files":[{"path":"a.sst","size":1,"crc32c":"00000000"}]})"});
    };
    o->commit = [this](int64_t step, const std::vector<std::string>& parts,
                       std::vector<int64_t>* retained) -> StatusOr<int64_t> {
      MutexLock lock(&mu);
      commits_tried.push_back(step);
      EXPECT_EQ(parts.size(), 2u);  // the dense part and one shard's
      if (refuse.load()) return Status::InvalidArgument("a later checkpoint is committed");
      if (chief_away.load()) return Status::Unavailable("the chief is away");
      committed.push_back(step);
      *retained = committed;
      return step;
    };
  }
};

DenseState State(int64_t step) {
  DenseState s;
  s.step = step;
  s.optimizer = "sgd";
  DenseTensor t;
  t.name = "top_mlp.0.bias";
  t.shape = {3};
  t.values = {1.0f, 2.0f, static_cast<float>(step)};
  s.tensors.push_back(t);
  return s;
}

struct Fixture {
  testing::TempDir dir;
  config::JobConfig job;
  FakeCluster cluster;
  BackgroundCheckpointerOptions options;
  Fixture() {
    job.checkpoint.dir = dir.path() + "/ckpt";
    options.job = &job;
    cluster.Install(&options);
  }
};

TEST(BackgroundCheckpointerTest, APresentChiefCommitsEveryCheckpointOfAQuickSeries) {
  Fixture f;
  f.cluster.write_delay_ms = 30;
  BackgroundCheckpointer c(f.options);
  for (int64_t step : {5, 10, 15}) c.Begin(step, State(step));
  ASSERT_TRUE(c.Finish(milliseconds(10000)).ok());
  EXPECT_EQ(c.last_committed(), 15);
  MutexLock lock(&f.cluster.mu);
  EXPECT_EQ(f.cluster.committed, (std::vector<int64_t>{5, 10, 15}));
  for (int64_t step : {5, 10, 15})
    EXPECT_TRUE(std::filesystem::exists(f.job.checkpoint.dir + "/" + CheckpointDirName(step) + "/" +
                                        kDenseCheckpointFile))
        << step;
}

TEST(BackgroundCheckpointerTest, OnlyTheNewestWaitsForAnAbsentChief) {
  Fixture f;
  f.cluster.chief_away = true;
  BackgroundCheckpointer c(f.options);
  c.Begin(5, State(5));
  // 5 is written and offered once before 10 is written.
  for (int i = 0; i < 500; ++i) {
    {
      MutexLock lock(&f.cluster.mu);
      if (!f.cluster.commits_tried.empty()) break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  c.Begin(10, State(10));
  EXPECT_TRUE(c.Finish(milliseconds(300)).IsDeadlineExceeded());
  f.cluster.chief_away = false;  // the chief is back
  ASSERT_TRUE(c.Finish(milliseconds(10000)).ok());
  EXPECT_EQ(c.last_committed(), 10);
  MutexLock lock(&f.cluster.mu);
  EXPECT_EQ(f.cluster.committed, (std::vector<int64_t>{10}));
  EXPECT_EQ(f.cluster.commits_tried.front(), 5);
}

TEST(BackgroundCheckpointerTest, ARefusalIsFinalAndFinishSaysWhy) {
  Fixture f;
  f.cluster.refuse = true;
  BackgroundCheckpointer c(f.options);
  c.Begin(7, State(7));
  Status s = c.Finish(milliseconds(10000));
  EXPECT_TRUE(s.IsInvalidArgument()) << s;
  EXPECT_NE(s.message().find("step 7"), std::string::npos) << s;
  EXPECT_EQ(c.last_committed(), -1);
}

TEST(BackgroundCheckpointerTest, AShardThatCannotCutLosesTheCheckpointWithItsReason) {
  Fixture f;
  f.options.shard_parts = [](int64_t, const std::vector<int64_t>&, bool) {
    return StatusOr<std::vector<std::string>>(Status::Unavailable("shard 1 is down"));
  };
  BackgroundCheckpointer c(f.options);
  c.Begin(3, State(3));
  Status s = c.Finish(milliseconds(10000));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shard 1 is down"), std::string::npos) << s;
}

using testing::FullDisk;

// A dense file that meets a full disk (the file-size limit here, EFBIG, as ENOSPC would) waits
// for space: the chief is told why meanwhile, the wait does not count against Finish's budget
// (the final checkpoint would fail the job), and the checkpoint is committed once it fits.
TEST(BackgroundCheckpointerTest, ADenseFileOnAFullDiskWaitsForSpaceThenIsCommitted) {
  Fixture f;
  std::vector<std::string> said;
  f.options.waiting_on = [&said](const std::string& why) {
    if (said.empty() || said.back() != why) said.push_back(why);
  };
  FullDisk disk;
  BackgroundCheckpointer c(f.options);
  c.Begin(4, State(4), /*final=*/true);
  std::thread space_is_back([&] {
    std::this_thread::sleep_for(milliseconds(600));
    disk.Lift();
  });
  Status s = c.Finish(milliseconds(100));
  space_is_back.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.last_committed(), 4);
  ASSERT_EQ(said.size(), 2u);
  EXPECT_NE(said[0].find("waiting for space for the checkpoint of step 4"), std::string::npos)
      << said[0];
  EXPECT_NE(said[0].find("EFBIG"), std::string::npos) << said[0];
  EXPECT_EQ(said[1], "");
  EXPECT_TRUE(std::filesystem::exists(f.job.checkpoint.dir + "/" + CheckpointDirName(4) + "/" +
                                      kDenseCheckpointFile));
}

// While a full disk holds a checkpoint, the next one does not wait for it (training would stall
// behind the disk, and the other workers' all-reduce time out): it replaces it, and only the
// newest waits for space.
TEST(BackgroundCheckpointerTest, ANewerCheckpointReplacesOneThatWaitsForSpace) {
  Fixture f;
  FullDisk disk;
  BackgroundCheckpointer c(f.options);
  c.Begin(4, State(4));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_LT(c.Begin(8, State(8), /*final=*/true), 5.0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  std::this_thread::sleep_for(milliseconds(200));
  disk.Lift();
  ASSERT_TRUE(c.Finish(milliseconds(10000)).ok());
  EXPECT_EQ(c.last_committed(), 8);
  MutexLock lock(&f.cluster.mu);
  EXPECT_EQ(f.cluster.committed, (std::vector<int64_t>{8}));
}

// A stop (SIGTERM, the job stopping) ends the wait for space of the final checkpoint: the worker
// must not outlive a stop for a disk that stays full.
TEST(BackgroundCheckpointerTest, AStopEndsTheFinalCheckpointsWaitForSpace) {
  Fixture f;
  FullDisk disk;
  std::atomic<bool> stop{false};
  std::unique_ptr<BackgroundCheckpointer> c = std::make_unique<BackgroundCheckpointer>(f.options);
  c->Begin(4, State(4), /*final=*/true);
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(300));
    stop = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  Status s = c->Finish(milliseconds(60000), [&] { return stop.load(); });
  stopper.join();
  EXPECT_TRUE(s.IsCancelled()) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  c.reset();  // the writer's thread ends too
  MutexLock lock(&f.cluster.mu);
  EXPECT_TRUE(f.cluster.committed.empty());
}

// A commit the chief cannot write (its disk is full: kResourceExhausted) is asked again until it
// fits, however long that takes: Finish's budget is for a chief that does not answer, and the
// final checkpoint would otherwise fail the job. The chief is told why meanwhile.
TEST(BackgroundCheckpointerTest, ACommitTheChiefsFullDiskRefusedWaitsForSpace) {
  Fixture f;
  std::atomic<bool> full{true};
  auto commit = f.options.commit;
  f.options.commit = [&full, commit](int64_t step, const std::vector<std::string>& parts,
                                     std::vector<int64_t>* retained) -> StatusOr<int64_t> {
    if (full.load()) return Status::ResourceExhausted("write LATEST.tmp: No space (ENOSPC)");
    return commit(step, parts, retained);
  };
  std::vector<std::string> said;
  f.options.waiting_on = [&said](const std::string& why) {
    if (said.empty() || said.back() != why) said.push_back(why);
  };
  BackgroundCheckpointer c(f.options);
  c.Begin(4, State(4), /*final=*/true);
  std::thread space_is_back([&] {
    std::this_thread::sleep_for(milliseconds(600));
    full = false;
  });
  Status s = c.Finish(milliseconds(100));
  space_is_back.join();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.last_committed(), 4);
  ASSERT_EQ(said.size(), 2u);
  EXPECT_NE(said[0].find("the chief to take the commit of the checkpoint of step 4"),
            std::string::npos)
      << said[0];
  EXPECT_NE(said[0].find("ENOSPC"), std::string::npos) << said[0];
  EXPECT_EQ(said[1], "");
  MutexLock lock(&f.cluster.mu);
  EXPECT_EQ(f.cluster.committed, (std::vector<int64_t>{4}));
}

// ... and a stop ends that wait, as it ends the wait of the writing.
TEST(BackgroundCheckpointerTest, AStopEndsTheWaitOfACommitTheChiefsFullDiskRefused) {
  Fixture f;
  f.options.commit = [](int64_t, const std::vector<std::string>&,
                        std::vector<int64_t>*) -> StatusOr<int64_t> {
    return Status::ResourceExhausted("No space (ENOSPC)");
  };
  std::atomic<bool> stop{false};
  BackgroundCheckpointer c(f.options);
  c.Begin(4, State(4), /*final=*/true);
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(300));
    stop = true;
  });
  Status s = c.Finish(milliseconds(100), [&] { return stop.load(); });
  stopper.join();
  EXPECT_TRUE(s.IsCancelled()) << s;
  EXPECT_EQ(c.last_committed(), -1);
}

}  // namespace
}  // namespace tandem::worker
