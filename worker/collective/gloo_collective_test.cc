// Two-process tests of GlooCollective on 127.0.0.1. The test process is rank 0; rank 1 is this
// same binary re-executed with the scenario in
// $TANDEM_COLLECTIVE_PEER (exec, not fork: the parent already runs Gloo threads). Every peer is
// a Subprocess, SIGKILLed by PID when the test ends.
#include "worker/collective/gloo_collective.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "common/testing/test_util.h"

namespace tandem::collective {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kPeerEnv[] = "TANDEM_COLLECTIVE_PEER";
// 1, odd (not a multiple of the ranks), small, and just over Gloo's 1 MiB segment.
const std::vector<size_t> kSizes = {1, 7, 1000, 262147};

// Deterministic test data with full mantissas, so that the order of additions would show.
float Value(int rank, size_t i) {
  uint64_t x = (static_cast<uint64_t>(rank) << 32) ^ i ^ 0x9e3779b97f4a7c15ULL;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  const float unit = static_cast<float>(x >> 40) / static_cast<float>(1 << 24);
  return (unit - 0.5f) * static_cast<float>(1 + (x & 1023));
}

std::vector<float> RankData(int rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = Value(rank, i);
  return v;
}

std::string Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

struct PeerSpec {
  std::string scenario;  // sum | bcast | once | idle | loop
  std::string dir;       // FileStore directory
  std::string prefix;    // generation
  int64_t timeout_ms = 5000;
  int rank = 1;
  int size = 2;
};

std::string ResultKey(const std::string& prefix, const std::string& what) {
  return "result/" + prefix + "/" + what;
}

StatusOr<std::unique_ptr<GlooCollective>> Join(RendezvousStore* store, const std::string& prefix,
                                               int rank, int64_t timeout_ms,
                                               int64_t grace_ms = 5000, int size = 2) {
  GlooOptions o;
  o.rank = rank;
  o.size = size;
  o.store = store;
  o.prefix = prefix;
  o.hostname = "127.0.0.1";
  o.timeout_ms = timeout_ms;
  o.abort_grace_ms = grace_ms;
  return GlooCollective::Create(o);
}

// ---- the peer (rank 1) ----

void PeerAllReduce(RendezvousStore* store, const PeerSpec& spec, Collective* c, size_t count) {
  std::vector<float> data = RankData(spec.rank, count);
  ASSERT_TRUE(c->AllReduceSum(data.data(), count).ok());
  const std::string what = std::to_string(spec.rank) + "/" + std::to_string(count);
  ASSERT_TRUE(store->Set(ResultKey(spec.prefix, what), Bytes(data)).ok());
}

void PeerBroadcast(RendezvousStore* store, const PeerSpec& spec, Collective* c) {
  std::vector<float> from1 = RankData(1, 1000);
  ASSERT_TRUE(c->Broadcast(from1.data(), from1.size(), 1).ok());
  std::vector<float> from0 = RankData(1, 7);
  ASSERT_TRUE(c->Broadcast(from0.data(), from0.size(), 0).ok());
  ASSERT_TRUE(store->Set(ResultKey(spec.prefix, "from0"), Bytes(from0)).ok());
  ASSERT_TRUE(c->Barrier().ok());
}

void RunPeer(RendezvousStore* store, const PeerSpec& spec, Collective* c) {
  const auto end = Clock::now() + std::chrono::seconds(20);  // bounded even if orphaned
  if (spec.scenario == "sum") {
    for (size_t n : kSizes) PeerAllReduce(store, spec, c, n);
  } else if (spec.scenario == "once") {
    PeerAllReduce(store, spec, c, 7);
  } else if (spec.scenario == "bcast") {
    PeerBroadcast(store, spec, c);
  } else if (spec.scenario == "loop") {
    std::vector<float> data(1024, 1.0f);
    while (Clock::now() < end && c->AllReduceSum(data.data(), data.size()).ok()) {
    }
  }
  if (spec.scenario == "idle" || spec.scenario == "loop") std::this_thread::sleep_until(end);
}

// The peer process's whole life: join the group, run the scenario. Returns the exit status.
int PeerMain(const char* env) {
  PeerSpec spec;
  std::istringstream in(env);
  in >> spec.scenario >> spec.dir >> spec.prefix >> spec.timeout_ms >> spec.rank >> spec.size;
  auto store = FileStore::Open(spec.dir);
  if (!store.ok()) {
    std::fprintf(stderr, "peer: %s\n", store.status().ToString().c_str());
    return 1;
  }
  auto c = Join(store->get(), spec.prefix, spec.rank, spec.timeout_ms, 5000, spec.size);
  if (!c.ok()) {
    std::fprintf(stderr, "peer: %s\n", c.status().ToString().c_str());
    return 1;
  }
  RunPeer(store->get(), spec, c->get());
  return 0;
}

// ---- the test process (rank 0) ----

class GlooCollectiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = FileStore::Open(tmp_.File("store"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(store).value();
  }

  // Starts rank 1 running `scenario` under `prefix`.
  Subprocess* SpawnPeer(const std::string& scenario, const std::string& prefix, int64_t timeout_ms,
                        int rank = 1, int size = 2) {
    SpawnOptions o;
    o.argv = {SelfExecutable()};
    o.set_env = {std::string(kPeerEnv) + "=" + scenario + " " + tmp_.File("store") + " " + prefix +
                 " " + std::to_string(timeout_ms) + " " + std::to_string(rank) + " " +
                 std::to_string(size)};
    o.output_path = tmp_.File("peer-" + prefix + "-" + std::to_string(rank) + ".log");
    auto p = Subprocess::Spawn(o);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    peers_.push_back(std::make_unique<Subprocess>(std::move(p).value()));
    return peers_.back().get();
  }

  std::string PeerLog(const std::string& prefix) {
    return testing::ReadFile(tmp_.File("peer-" + prefix + "-1.log"));
  }

  std::vector<float> PeerResult(const std::string& prefix, const std::string& what) {
    EXPECT_TRUE(store_->Wait({ResultKey(prefix, what)}, milliseconds(5000)).ok());
    auto bytes = store_->Get(ResultKey(prefix, what));
    if (!bytes.ok()) return {};
    std::vector<float> v(bytes->size() / sizeof(float));
    std::memcpy(v.data(), bytes->data(), v.size() * sizeof(float));
    return v;
  }

  // Waits for the peer's clean exit (its own assertions passed).
  void ExpectPeerSucceeds(Subprocess* peer, const std::string& prefix) {
    auto exit = peer->Wait(milliseconds(5000));
    ASSERT_TRUE(exit.has_value()) << "peer still running";
    EXPECT_EQ(exit->exit_code, 0) << exit->ToString() << "\n" << PeerLog(prefix);
  }

  // One all-reduce per size; returns rank 0's results, checked against the sum and rank 1.
  std::vector<std::vector<float>> RunSums(const std::string& prefix);

  testing::TempDir tmp_;
  std::unique_ptr<FileStore> store_;
  std::vector<std::unique_ptr<Subprocess>> peers_;  // destructor SIGKILLs and reaps by PID
};

std::vector<std::vector<float>> GlooCollectiveTest::RunSums(const std::string& prefix) {
  std::vector<std::vector<float>> results;
  Subprocess* peer = SpawnPeer("sum", prefix, 5000);
  if (peer == nullptr) return results;
  auto c = Join(store_.get(), prefix, 0, 5000);
  EXPECT_TRUE(c.ok()) << c.status() << "\n" << PeerLog(prefix);
  if (!c.ok()) return results;
  for (size_t n : kSizes) {
    std::vector<float> data = RankData(0, n);
    std::vector<float> want = RankData(1, n);
    for (size_t i = 0; i < n; ++i) want[i] += data[i];
    Status s = (*c)->AllReduceSum(data.data(), n);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(Bytes(data), Bytes(want)) << "size " << n;
    EXPECT_EQ(Bytes(PeerResult(prefix, "1/" + std::to_string(n))), Bytes(data)) << "size " << n;
    results.push_back(data);
  }
  ExpectPeerSucceeds(peer, prefix);
  return results;
}

TEST_F(GlooCollectiveTest, AllReduceIsTheSumAndBitIdenticalAcrossRuns) {
  auto first = RunSums("run-1");
  auto second = RunSums("run-2");
  ASSERT_EQ(first.size(), kSizes.size());
  ASSERT_EQ(second.size(), kSizes.size());
  for (size_t k = 0; k < kSizes.size(); ++k) {
    EXPECT_EQ(Bytes(first[k]), Bytes(second[k])) << "size " << kSizes[k];
  }
}

// With three ranks the order of additions differs between ranks unless the algorithm fixes it
// (gloo::AllreduceRing would give rank-dependent bits); RING reduce-scatter must not.
TEST_F(GlooCollectiveTest, ThreeRanksGetIdenticalBitsAcrossRanksAndRuns) {
  std::vector<std::string> runs;
  for (const std::string prefix : {"three-1", "three-2"}) {
    ASSERT_NE(SpawnPeer("sum", prefix, 5000, 1, 3), nullptr);
    ASSERT_NE(SpawnPeer("sum", prefix, 5000, 2, 3), nullptr);
    auto c = Join(store_.get(), prefix, 0, 5000, 5000, 3);
    ASSERT_TRUE(c.ok()) << c.status() << "\n" << PeerLog(prefix);
    std::string all;
    for (size_t n : kSizes) {
      std::vector<float> data = RankData(0, n);
      ASSERT_TRUE((*c)->AllReduceSum(data.data(), n).ok());
      for (int r = 1; r < 3; ++r) {
        const std::string what = std::to_string(r) + "/" + std::to_string(n);
        EXPECT_EQ(Bytes(PeerResult(prefix, what)), Bytes(data)) << "rank " << r << " size " << n;
      }
      all += Bytes(data);
    }
    runs.push_back(all);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST_F(GlooCollectiveTest, BroadcastCopiesTheRootAndBarrierReturns) {
  Subprocess* peer = SpawnPeer("bcast", "gen-0", 5000);
  ASSERT_NE(peer, nullptr);
  auto c = Join(store_.get(), "gen-0", 0, 5000);
  ASSERT_TRUE(c.ok()) << c.status() << "\n" << PeerLog("gen-0");
  std::vector<float> from1 = RankData(0, 1000);
  ASSERT_TRUE((*c)->Broadcast(from1.data(), from1.size(), 1).ok());
  EXPECT_EQ(Bytes(from1), Bytes(RankData(1, 1000)));
  std::vector<float> from0 = RankData(0, 7);
  ASSERT_TRUE((*c)->Broadcast(from0.data(), from0.size(), 0).ok());
  EXPECT_EQ(Bytes(from0), Bytes(RankData(0, 7)));
  EXPECT_EQ(Bytes(PeerResult("gen-0", "from0")), Bytes(RankData(0, 7)));
  Status s = (*c)->Barrier();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE((*c)->Broadcast(from0.data(), 7, 2).IsInvalidArgument());
  ExpectPeerSucceeds(peer, "gen-0");
}

TEST_F(GlooCollectiveTest, CreateTimesOutWhenThePeerNeverArrives) {
  const auto start = Clock::now();
  auto c = Join(store_.get(), "gen-0", 0, 500);
  const auto took = Clock::now() - start;
  EXPECT_TRUE(c.status().IsDeadlineExceeded()) << c.status();
  EXPECT_LT(took, milliseconds(2500));
}

TEST_F(GlooCollectiveTest, KilledPeerMakesAllReduceFailFast) {
  Subprocess* peer = SpawnPeer("idle", "gen-0", 8000);
  ASSERT_NE(peer, nullptr);
  auto c = Join(store_.get(), "gen-0", 0, 8000);
  ASSERT_TRUE(c.ok()) << c.status() << "\n" << PeerLog("gen-0");
  std::thread killer([peer] {
    std::this_thread::sleep_for(milliseconds(300));
    peer->Signal(SIGKILL);
  });
  std::vector<float> data = RankData(0, 1000);
  const std::vector<float> before = data;
  const auto start = Clock::now();
  Status s = (*c)->AllReduceSum(data.data(), data.size());
  const auto took = Clock::now() - start;
  killer.join();
  EXPECT_TRUE(s.IsUnavailable()) << s;
  EXPECT_LT(took, milliseconds(3000));  // the deadline is 8 s
  EXPECT_EQ(Bytes(data), Bytes(before));
  EXPECT_TRUE((*c)->AllReduceSum(data.data(), data.size()).IsFailedPrecondition());
  EXPECT_FALSE((*c)->Wedged());
}

TEST_F(GlooCollectiveTest, StoppedPeerMakesAllReduceFailWithinTheDeadline) {
  Subprocess* peer = SpawnPeer("loop", "gen-0", 1500);
  ASSERT_NE(peer, nullptr);
  auto c = Join(store_.get(), "gen-0", 0, 1500, /*grace_ms=*/1000);
  ASSERT_TRUE(c.ok()) << c.status() << "\n" << PeerLog("gen-0");
  std::vector<float> data(1024, 1.0f);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*c)->AllReduceSum(data.data(), data.size()).ok());
  peer->Signal(SIGSTOP);
  auto start = Clock::now();
  Status s = (*c)->AllReduceSum(data.data(), data.size());
  if (s.ok()) {
    // The peer, looping, had sent its whole part of this op before it stopped (seen on a loaded
    // machine); it cannot have sent any of the next one, which needs ours first.
    start = Clock::now();
    s = (*c)->AllReduceSum(data.data(), data.size());
  }
  const auto took = Clock::now() - start;
  EXPECT_TRUE(s.IsDeadlineExceeded()) << s;
  EXPECT_GE(took, milliseconds(1400));
  EXPECT_LT(took, milliseconds(2500));
  peer->Signal(SIGCONT);
  peer->Signal(SIGKILL);
  // Gloo's own timeout (the same 1.5 s) ends the abandoned op well within the grace.
  std::this_thread::sleep_for(milliseconds(1200));
  EXPECT_FALSE((*c)->Wedged());
  // A replacement peer under a new generation gives a working context.
  ASSERT_NE(SpawnPeer("once", "gen-1", 1500), nullptr);
  Status r = (*c)->Rebuild("gen-1");
  ASSERT_TRUE(r.ok()) << r << "\n" << PeerLog("gen-1");
  std::vector<float> seven = RankData(0, 7);
  ASSERT_TRUE((*c)->AllReduceSum(seven.data(), 7).ok());
  EXPECT_EQ(Bytes(PeerResult("gen-1", "1/7")), Bytes(seven));
}

TEST_F(GlooCollectiveTest, AbortAbandonsTheOpAndRebuildGivesAWorkingContext) {
  Subprocess* idle = SpawnPeer("idle", "gen-0", 5000);
  ASSERT_NE(idle, nullptr);
  auto c = Join(store_.get(), "gen-0", 0, 5000, /*grace_ms=*/300);
  ASSERT_TRUE(c.ok()) << c.status() << "\n" << PeerLog("gen-0");
  GlooCollective* coll = c->get();
  std::thread aborter([coll] {
    std::this_thread::sleep_for(milliseconds(200));
    coll->Abort();
  });
  std::vector<float> data = RankData(0, 7);
  const auto start = Clock::now();
  Status s = coll->AllReduceSum(data.data(), data.size());
  const auto took = Clock::now() - start;
  aborter.join();
  EXPECT_TRUE(s.IsAborted()) << s;
  EXPECT_LT(took, milliseconds(1500));
  EXPECT_TRUE(coll->AllReduceSum(data.data(), data.size()).IsAborted());
  // The idle peer never answers, so the abandoned op outlives the 300 ms grace.
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_TRUE(coll->Wedged());

  ASSERT_NE(SpawnPeer("once", "gen-1", 5000), nullptr);
  Status r = coll->Rebuild("gen-1");
  ASSERT_TRUE(r.ok()) << r << "\n" << PeerLog("gen-1");
  std::vector<float> seven = RankData(0, 7);
  std::vector<float> want = RankData(1, 7);
  for (size_t i = 0; i < 7; ++i) want[i] += seven[i];
  ASSERT_TRUE(coll->AllReduceSum(seven.data(), 7).ok());
  EXPECT_EQ(Bytes(seven), Bytes(want));

  // Killing the old peer ends the abandoned op, which un-wedges the collective.
  idle->Signal(SIGKILL);
  const auto until = Clock::now() + milliseconds(3000);
  while (coll->Wedged() && Clock::now() < until) std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(coll->Wedged());
}

TEST(GlooCollectiveOptionsTest, ValidateRejectsBadOptions) {
  GlooOptions o;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());  // no store
  testing::TempDir tmp;
  auto store = FileStore::Open(tmp.File("s"));
  ASSERT_TRUE(store.ok());
  o.store = store->get();
  EXPECT_TRUE(o.Validate().ok());
  o.rank = 1;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
  o.rank = 0;
  o.timeout_ms = 0;
  EXPECT_TRUE(o.Validate().IsInvalidArgument());
}

}  // namespace
}  // namespace tandem::collective

// The binary is also the peer: with the scenario in the environment it runs that instead of
// the tests (exec, not fork: the parent already runs Gloo threads).
int main(int argc, char** argv) {
  if (const char* env = std::getenv(tandem::collective::kPeerEnv))
    return tandem::collective::PeerMain(env);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
