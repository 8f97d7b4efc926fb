// ReplicaGroup against a real chief in this process (test scaffolding, as in
// worker/collective/chief_store_test.cc) and a recording stand-in for the all-reduce group: a new
// generation interrupts and aborts, Recover regroups when nobody is lost and rebuilds under the
// chief's new generation, a stop ends the recovery.
#include "worker/roll_forward/replica_group.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "common/testing/test_util.h"
#include "server/chief/in_process_chief.h"

namespace tandem::worker {
namespace {

using std::chrono::milliseconds;

const JobId kJob{0x1234, 0x5678};

// Ops succeed at once; what the group asked of it is counted.
class RecordingCollective : public collective::Collective {
 public:
  struct Calls {
    std::atomic<int> aborts{0};
    std::vector<std::string> rebuilds;  // read after the recovery returned
  };
  explicit RecordingCollective(Calls* calls) : calls_(calls) {}
  Status AllReduceSum(float*, size_t) override { return Status::Ok(); }
  Status Broadcast(float*, size_t, int) override { return Status::Ok(); }
  Status Barrier() override { return Status::Ok(); }
  void Abort() override { calls_->aborts.fetch_add(1); }
  Status Rebuild(const std::string& prefix) override {
    calls_->rebuilds.push_back(prefix);
    return Status::Ok();
  }
  int rank() const override { return 0; }
  int size() const override { return 2; }

 private:
  Calls* calls_;
};

class ReplicaGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_.cluster.chief = {"127.0.0.1:0"};
    job_.cluster.ps = {"127.0.0.1:0"};
    job_.cluster.workers = {"127.0.0.1:0", "127.0.0.1:0"};
    job_.checkpoint.dir = dir_.path();
    job_.chief.heartbeat_interval_ms = 100;
    job_.chief.heartbeat_timeout_ms = 5000;
    job_.recovery.max_wait_s = 20;
    ASSERT_TRUE(chief_.Start(job_, kJob).ok());
    Join(wire::Role::PS, 0);
    Join(wire::Role::WORKER, 0);
    Join(wire::Role::WORKER, 1);
    for (auto& c : clients_) ASSERT_TRUE(c->HeartbeatNow(milliseconds(2000)).ok());
    group_ = std::make_unique<ReplicaGroup>(&job_, worker(0));
    group_->Adopt(std::make_unique<RecordingCollective>(&calls_), worker(0)->generation());
  }
  void TearDown() override {
    group_.reset();
    clients_.clear();
    chief_.Stop();
  }

  void Join(wire::Role role, uint32_t index) {
    ChiefClientOptions c =
        chief_.Client(role, index, "tcp://127.0.0.1:" + std::to_string(100 + clients_.size()));
    c.heartbeat_interval = milliseconds(100);
    clients_.push_back(std::make_unique<ChiefClient>(chief_.context(), c));
    ASSERT_TRUE(clients_.back()->Register(-1, milliseconds(5000)).ok());
    Progress p;
    p.state = MemberState::kTraining;
    clients_.back()->SetProgress(p);
    clients_.back()->StartHeartbeats();
  }
  ChiefClient* worker(int rank) { return clients_.at(1 + rank).get(); }

  testing::TempDir dir_;
  config::JobConfig job_;
  chief::InProcessChief chief_;
  std::vector<std::unique_ptr<ChiefClient>> clients_;
  RecordingCollective::Calls calls_;
  std::unique_ptr<ReplicaGroup> group_;
};

TEST_F(ReplicaGroupTest, ANewGenerationInterruptsWaitsAndAbortsTheOpInFlight) {
  const uint64_t before = worker(0)->generation();
  EXPECT_FALSE(group_->Interrupted());
  group_->Watch();
  EXPECT_EQ(calls_.aborts.load(), 0) << "nothing changed: nothing to abort";
  // Worker 1's group broke while nobody was lost: it asks the chief to regroup.
  auto answer = worker(1)->Regroup(before, "test: the peers lost each other", milliseconds(2000));
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_TRUE(answer->raised) << answer->why_not;
  ASSERT_TRUE(worker(0)->HeartbeatNow(milliseconds(2000)).ok());
  EXPECT_GT(worker(0)->generation(), before);
  EXPECT_TRUE(group_->Interrupted()) << "pulls and pushes waiting on the shards give way";
  group_->Watch();
  EXPECT_EQ(calls_.aborts.load(), 1);
  group_->Watch();
  EXPECT_EQ(calls_.aborts.load(), 1) << "one abort per generation";
}

TEST_F(ReplicaGroupTest, RecoverAsksToRegroupWhenNobodyIsLostAndRebuildsUnderTheNewGeneration) {
  const uint64_t before = worker(0)->generation();
  std::vector<MemberState> states;
  const Status recovered = group_->Recover([&](MemberState s) { states.push_back(s); });
  ASSERT_TRUE(recovered.ok()) << recovered;
  ASSERT_TRUE(worker(0)->HeartbeatNow(milliseconds(2000)).ok());  // the client learns it here
  const uint64_t after = worker(0)->generation();
  EXPECT_EQ(after, before + 1);
  ASSERT_EQ(calls_.rebuilds.size(), 1u);
  EXPECT_EQ(calls_.rebuilds[0], "gen-" + std::to_string(after));
  EXPECT_EQ(states, (std::vector<MemberState>{MemberState::kRecovering, MemberState::kTraining}));
  EXPECT_FALSE(group_->Interrupted()) << "the group is of the chief's generation again";
}

TEST_F(ReplicaGroupTest, AStopEndsTheRecoveryAndAbortsAnOpThatOutlastsTheGrace) {
  ASSERT_TRUE(worker(1)->StopJob("test").ok());
  ASSERT_TRUE(worker(0)->HeartbeatNow(milliseconds(2000)).ok());
  ASSERT_TRUE(worker(0)->stop_requested());
  const Status recovered = group_->Recover([](MemberState) {});
  EXPECT_TRUE(recovered.IsCancelled()) << recovered;
  EXPECT_TRUE(calls_.rebuilds.empty());
  group_->NoteStop(/*at_once=*/true);
  group_->Watch();
  EXPECT_TRUE(group_->StopOverdue());
  EXPECT_TRUE(group_->Interrupted());
}

// A stop gives the step in flight kStopGrace to end, so that the job stops at a final checkpoint;
// a failed job has none to take (it goes back to its last committed one) and its step may wait
// on the member that failed it: that stop is overdue at once.
TEST_F(ReplicaGroupTest, AStopForTheJobsFailureIsOverdueAtOnce) {
  ASSERT_TRUE(worker(1)->StopJob("test").ok());
  ASSERT_TRUE(worker(0)->HeartbeatNow(milliseconds(2000)).ok());
  ASSERT_TRUE(worker(0)->stop_requested());
  group_->Watch();
  EXPECT_FALSE(group_->StopOverdue()) << "a stop first waits for the step in flight";
  Progress failed;
  failed.state = MemberState::kFailed;
  failed.detail = "test: worker 1 failed";
  worker(1)->SetProgress(failed);
  ASSERT_TRUE(worker(1)->HeartbeatNow(milliseconds(2000)).ok());
  ASSERT_TRUE(worker(0)->HeartbeatNow(milliseconds(2000)).ok());
  ASSERT_EQ(Name(worker(0)->job_state()), "failed");
  group_->Watch();
  EXPECT_TRUE(group_->StopOverdue());
  EXPECT_TRUE(group_->Interrupted()) << "pulls and pushes waiting on the shards give way";
}

}  // namespace
}  // namespace tandem::worker
