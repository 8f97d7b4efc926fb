// Tests of NcclCollective on one GPU: at most one rank of a communicator can run (NCCL refuses
// two ranks on one device), so multi-rank behaviour is tested through the missing peer. Tests
// that need a device skip without one; the option and rendezvous checks run everywhere.
#include "worker/collective/nccl_collective.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/test_util.h"

namespace tandem::collective {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Empty when a device is usable, else why not.
std::string NoDeviceReason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return "";
}

#define SKIP_WITHOUT_DEVICE()                    \
  do {                                           \
    const std::string reason = NoDeviceReason(); \
    if (!reason.empty()) GTEST_SKIP() << reason; \
  } while (0)

// Deterministic values with full mantissas, so that any change of bits would show.
std::vector<float> TestData(size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    uint64_t x = i ^ 0x9e3779b97f4a7c15ULL;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    const float unit = static_cast<float>(x >> 40) / static_cast<float>(1 << 24);
    v[i] = (unit - 0.5f) * static_cast<float>(1 + (x & 1023));
  }
  return v;
}

// A device copy of a host vector.
class DeviceVector {
 public:
  explicit DeviceVector(const std::vector<float>& host) : count_(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, count_ * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), count_ * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceVector() { cudaFree(ptr_); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  float* get() { return ptr_; }
  std::vector<float> ToHost() const {
    std::vector<float> host(count_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, count_ * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  size_t count_;
  float* ptr_ = nullptr;
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class NcclCollectiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(dir_.File("store"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(store).value();
  }

  NcclOptions Options(int rank, int size) {
    NcclOptions o;
    o.rank = rank;
    o.size = size;
    o.store = store_.get();
    o.timeout_ms = 10000;
    o.abort_grace_ms = 10000;
    // A wedged abort must fail the test, not exit the test process.
    o.on_wedged = [this] { ++wedged_calls_; };
    return o;
  }

  // AllReduceSum over one rank returns the input, bit for bit.
  void ExpectIdentityAllReduce(NcclCollective* c) {
    const std::vector<float> input = TestData((size_t{1} << 20) + 3);
    DeviceVector data(input);
    Status s = c->AllReduceSum(data.get(), input.size());
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(SameBits(data.ToHost(), input));
  }

  tandem::testing::TempDir dir_;
  std::unique_ptr<FileStore> store_;
  std::atomic<int> wedged_calls_{0};
};

TEST(NcclOptionsTest, ValidateRejectsBadOptions) {
  tandem::testing::TempDir dir;
  StatusOr<std::unique_ptr<FileStore>> store = FileStore::Open(dir.File("store"));
  ASSERT_TRUE(store.ok()) << store.status();
  NcclOptions good;
  good.rank = 1;
  good.size = 2;
  good.store = store->get();
  ASSERT_TRUE(good.Validate().ok()) << good.Validate();

  auto bad = [&](auto mutate) {
    NcclOptions o = good;
    mutate(o);
    return o;
  };
  std::vector<NcclOptions> cases = {
      bad([](NcclOptions& o) { o.rank = -1; }),
      bad([](NcclOptions& o) { o.rank = 2; }),
      bad([](NcclOptions& o) {
        o.size = 0;
        o.rank = 0;
      }),
      bad([](NcclOptions& o) { o.store = nullptr; }),
      bad([](NcclOptions& o) { o.prefix = ""; }),
      bad([](NcclOptions& o) { o.device = -1; }),
      bad([](NcclOptions& o) { o.timeout_ms = 0; }),
      bad([](NcclOptions& o) { o.abort_grace_ms = -5; }),
      bad([](NcclOptions& o) { o.abort_delay_for_test_ms = -1; }),
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(cases[i].Validate().IsInvalidArgument()) << "case " << i;
    // Create validates before any CUDA or NCCL call, so this holds without a device too.
    StatusOr<std::unique_ptr<NcclCollective>> c = NcclCollective::Create(cases[i]);
    EXPECT_TRUE(c.status().IsInvalidArgument()) << "case " << i << ": " << c.status();
  }
}

// The rank that waits for rank 0's id needs no device, so this runs everywhere.
TEST_F(NcclCollectiveTest, CreateTimesOutWhenRankZeroNeverPublishesTheId) {
  NcclOptions o = Options(1, 2);
  o.timeout_ms = 300;
  const auto start = Clock::now();
  StatusOr<std::unique_ptr<NcclCollective>> c = NcclCollective::Create(o);
  EXPECT_TRUE(c.status().IsDeadlineExceeded()) << c.status();
  EXPECT_NE(c.status().message().find("gen-0/nccl-id"), std::string::npos) << c.status();
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
}

TEST_F(NcclCollectiveTest, SizeOneCommunicatorReducesBroadcastsAndBarriers) {
  SKIP_WITHOUT_DEVICE();
  StatusOr<std::unique_ptr<NcclCollective>> c = NcclCollective::Create(Options(0, 1));
  ASSERT_TRUE(c.ok()) << c.status();
  NcclCollective& nccl = **c;
  EXPECT_TRUE(nccl.device_memory());
  EXPECT_EQ(nccl.rank(), 0);
  EXPECT_EQ(nccl.size(), 1);
  // The first Create pins the algorithm for reproducible sums unless the user chose one.
  EXPECT_NE(std::getenv("NCCL_ALGO"), nullptr);
  EXPECT_NE(std::getenv("NCCL_PROTO"), nullptr);

  ExpectIdentityAllReduce(&nccl);

  const std::vector<float> input = TestData(1000);
  DeviceVector data(input);
  Status s = nccl.Broadcast(data.get(), input.size(), 0);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(SameBits(data.ToHost(), input));
  s = nccl.Barrier();
  ASSERT_TRUE(s.ok()) << s;

  // Bad arguments are refused before any launch and leave the communicator usable.
  EXPECT_TRUE(nccl.Broadcast(data.get(), input.size(), 1).IsInvalidArgument());
  std::vector<float> host(16, 1.0f);
  EXPECT_TRUE(nccl.AllReduceSum(host.data(), host.size()).IsInvalidArgument());
  EXPECT_TRUE(nccl.AllReduceSum(nullptr, 4).IsInvalidArgument());
  s = nccl.Barrier();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(nccl.Wedged());
  EXPECT_EQ(wedged_calls_, 0);
}

// The "collectives never hang" test: rank 1 of 2 never comes, so NCCL's init would wait forever.
TEST_F(NcclCollectiveTest, CreateTimesOutWhenAPeerNeverJoins) {
  SKIP_WITHOUT_DEVICE();
  NcclOptions o = Options(0, 2);
  o.timeout_ms = 1500;
  o.abort_grace_ms = 5000;
  const auto start = Clock::now();
  StatusOr<std::unique_ptr<NcclCollective>> c = NcclCollective::Create(o);
  const auto elapsed = Clock::now() - start;
  EXPECT_TRUE(c.status().IsDeadlineExceeded()) << c.status();
  EXPECT_NE(c.status().message().find("waiting for all ranks"), std::string::npos) << c.status();
  EXPECT_GE(elapsed, milliseconds(1400));
  EXPECT_LT(elapsed, milliseconds(10000));
  // Rank 0 did publish the id, and aborting the half-built communicator returned in time.
  EXPECT_TRUE(store_->Get("gen-0/nccl-id").ok());
  EXPECT_EQ(wedged_calls_, 0);
}

TEST_F(NcclCollectiveTest, AbortFailsTheNextOpUntilRebuild) {
  SKIP_WITHOUT_DEVICE();
  StatusOr<std::unique_ptr<NcclCollective>> c = NcclCollective::Create(Options(0, 1));
  ASSERT_TRUE(c.ok()) << c.status();
  NcclCollective& nccl = **c;
  std::thread([&nccl] { nccl.Abort(); }).join();

  const std::vector<float> input = TestData(4096);
  DeviceVector data(input);
  Status s = nccl.AllReduceSum(data.get(), input.size());
  EXPECT_TRUE(s.IsAborted()) << s;
  s = nccl.AllReduceSum(data.get(), input.size());
  EXPECT_TRUE(s.IsFailedPrecondition()) << s;
  EXPECT_TRUE(nccl.Broadcast(data.get(), input.size(), 0).IsFailedPrecondition());
  EXPECT_TRUE(nccl.Barrier().IsFailedPrecondition());
  // The aborted op was refused before its launch: the buffer is unchanged.
  EXPECT_TRUE(SameBits(data.ToHost(), input));

  s = nccl.Rebuild("gen-1");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(store_->Get("gen-1/nccl-id").ok());
  ExpectIdentityAllReduce(&nccl);
  s = nccl.Barrier();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(nccl.Wedged());
  EXPECT_EQ(wedged_calls_, 0);
}

TEST_F(NcclCollectiveTest, AbortOverrunningTheGraceCallsTheWedgedHandler) {
  SKIP_WITHOUT_DEVICE();
  NcclOptions o = Options(0, 1);
  o.abort_grace_ms = 200;
  o.abort_delay_for_test_ms = 1500;
  StatusOr<std::unique_ptr<NcclCollective>> c = NcclCollective::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  NcclCollective& nccl = **c;
  EXPECT_FALSE(nccl.Wedged());
  nccl.Abort();

  const auto start = Clock::now();
  Status s = nccl.Barrier();
  const auto elapsed = Clock::now() - start;
  EXPECT_TRUE(s.IsAborted()) << s;
  // The op waited out the grace, not the whole abort.
  EXPECT_GE(elapsed, milliseconds(190));
  EXPECT_LT(elapsed, milliseconds(1400));
  EXPECT_EQ(wedged_calls_, 1);
  EXPECT_TRUE(nccl.Wedged());
  EXPECT_TRUE(nccl.Barrier().IsFailedPrecondition());
  // Destroying the collective waits for the slow abort; Wedged() stays true meanwhile.
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_TRUE(nccl.Wedged());
}

}  // namespace
}  // namespace tandem::collective
