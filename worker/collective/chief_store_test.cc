// ChiefStore against a real chief in this process, and a 2-rank GlooCollective that meets
// through it. The chief side is test scaffolding only: worker code never includes server/.
#include "worker/collective/chief_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/testing/test_util.h"
#include "server/chief/in_process_chief.h"
#include "worker/collective/gloo_collective.h"

namespace tandem::collective {
namespace {

using std::chrono::milliseconds;

const JobId kJob{0xabc, 0xdef};

class ChiefStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_.cluster.chief = {"127.0.0.1:0"};
    job_.cluster.ps = {"127.0.0.1:0"};
    job_.cluster.workers = {"127.0.0.1:0", "127.0.0.1:0"};
    job_.checkpoint.dir = dir_.path();
    job_.chief.heartbeat_timeout_ms = 60000;  // the members here do not heartbeat
    ASSERT_TRUE(chief_.Start(job_, kJob).ok());
    for (uint32_t rank = 0; rank < 2; ++rank) {
      clients_.push_back(std::make_unique<ChiefClient>(
          chief_.context(),
          chief_.Client(wire::Role::WORKER, rank, "tcp://127.0.0.1:" + std::to_string(1 + rank))));
      ASSERT_TRUE(clients_.back()->Register(0, milliseconds(5000)).ok());
      stores_.push_back(std::make_unique<ChiefStore>(clients_.back().get()));
    }
  }
  void TearDown() override {
    stores_.clear();
    clients_.clear();
    chief_.Stop();
  }

  testing::TempDir dir_;
  config::JobConfig job_;
  chief::InProcessChief chief_;
  std::vector<std::unique_ptr<ChiefClient>> clients_;
  std::vector<std::unique_ptr<ChiefStore>> stores_;
};

TEST_F(ChiefStoreTest, SetGetAndNotFound) {
  ASSERT_TRUE(stores_[0]->Set("gen1/addr/0", std::string("\x01\x00\x02", 3)).ok());
  auto v = stores_[1]->Get("gen1/addr/0");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("\x01\x00\x02", 3));
  auto missing = stores_[1]->Get("gen1/addr/1");
  EXPECT_TRUE(missing.status().IsNotFound()) << missing.status();
}

TEST_F(ChiefStoreTest, WaitReturnsOnceEveryKeyIsSet) {
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    EXPECT_TRUE(stores_[1]->Set("b", "2").ok());
    EXPECT_TRUE(stores_[1]->Set("a", "1").ok());
  });
  Status s = stores_[0]->Wait({"a", "b"}, milliseconds(10000));
  setter.join();
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(ChiefStoreTest, WaitTimesOutNamingAMissingKey) {
  ASSERT_TRUE(stores_[0]->Set("present", "x").ok());
  Status s = stores_[0]->Wait({"present", "absent"}, milliseconds(200));
  EXPECT_TRUE(s.IsDeadlineExceeded()) << s;
  EXPECT_NE(s.message().find("absent"), std::string::npos) << s;
}

TEST_F(ChiefStoreTest, TwoGlooRanksMeetThroughTheChief) {
  std::vector<std::vector<float>> data = {{1.5f, -2.0f, 3.25f}, {0.5f, 4.0f, -1.25f}};
  std::vector<Status> status(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      GlooOptions o;
      o.rank = rank;
      o.size = 2;
      o.store = stores_[rank].get();
      o.prefix = "gen-1";
      o.hostname = "127.0.0.1";
      o.timeout_ms = 10000;
      auto gloo = GlooCollective::Create(o);
      if (!gloo.ok()) {
        status[rank] = gloo.status();
        return;
      }
      status[rank] = (*gloo)->AllReduceSum(data[rank].data(), data[rank].size());
      if (status[rank].ok()) status[rank] = (*gloo)->Barrier();
    });
  }
  for (auto& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    EXPECT_EQ(data[rank], (std::vector<float>{2.0f, 2.0f, 2.0f})) << "rank " << rank;
  }
}

}  // namespace
}  // namespace tandem::collective
