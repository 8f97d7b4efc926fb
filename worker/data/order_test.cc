#include "worker/data/order.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace tandem::data {
namespace {

TEST(Feistel, IsABijectionForManySizes) {
  for (uint64_t n : {1, 2, 3, 5, 16, 17, 100, 1000, 4097, 65536}) {
    const FeistelPermutation perm(n, 42, 0);
    std::vector<int> seen(n, 0);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t y = perm(i);
      ASSERT_LT(y, n);
      ++seen[y];
    }
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "n=" << n << " i=" << i;
  }
}

TEST(Feistel, DiffersAcrossEpochsAndSeedsAndIsStable) {
  const uint64_t n = 1000;
  auto list = [](uint64_t seed, uint64_t epoch) {
    const FeistelPermutation perm(n, seed, epoch);
    std::vector<uint64_t> v(n);
    for (uint64_t i = 0; i < n; ++i) v[i] = perm(i);
    return v;
  };
  EXPECT_EQ(list(1, 0), list(1, 0));
  EXPECT_NE(list(1, 0), list(1, 1));
  EXPECT_NE(list(1, 0), list(2, 0));
  std::vector<uint64_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(list(1, 0), identity);
}

TEST(Order, PermutedCoversEachEpochOnce) {
  Order order = Order::Permuted(37, 9);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int> seen(37, 0);
    for (int64_t i = 0; i < 37; ++i) ++seen[order.RecordAt(epoch * 37 + i)];
    for (int c : seen) EXPECT_EQ(c, 1);
  }
}

TEST(Order, BlockShuffleKeepsLinesInBlocksAndCoversAll) {
  Order order = Order::BlockShuffled({4, 4, 2, 4, 3}, 5);  // two files: 4+4+2 and 4+3
  ASSERT_EQ(order.num_records(), 17);
  std::vector<int> seen(17, 0);
  std::vector<int64_t> got;
  for (int64_t i = 0; i < 17; ++i) {
    got.push_back(order.RecordAt(17 + i));  // epoch 1
    ++seen[got.back()];
  }
  for (int c : seen) EXPECT_EQ(c, 1);
  for (int64_t i = 1; i < 17; ++i) {  // runs of consecutive lines: at most 4 block starts
    if (got[i] != got[i - 1] + 1) {
      EXPECT_TRUE(got[i] == 0 || got[i] == 4 || got[i] == 8 || got[i] == 10 || got[i] == 14)
          << got[i];
    }
  }
  std::vector<int64_t> epoch0, epoch2;
  for (int64_t i = 0; i < 17; ++i) epoch0.push_back(order.RecordAt(i));
  for (int64_t i = 0; i < 17; ++i) epoch2.push_back(order.RecordAt(34 + i));
  EXPECT_TRUE(got != epoch0 || got != epoch2);  // 5 blocks: epochs rarely all agree
}

// The M-invariance of DESIGN §2: rank slices of global batch s, concatenated in rank order,
// are the one-worker batch of size M*b, for M = 1, 2, 3, 4, across an epoch boundary.
TEST(Order, SlicesOfAGlobalBatchDoNotDependOnM) {
  const int global = 12;
  for (int64_t step = 0; step < 8; ++step) {  // N = 50: steps 4 and 8 cross epochs
    Order one = Order::Permuted(50, 3);
    std::vector<int64_t> want;
    for (int i = 0; i < global; ++i)
      want.push_back(one.RecordAt(SlicePosition(0, step, 1, 0, global) + i));
    for (int m : {2, 3, 4}) {
      const int b = global / m;
      std::vector<int64_t> got;
      for (int r = 0; r < m; ++r) {
        Order order = Order::Permuted(50, 3);  // each rank its own reader
        for (int i = 0; i < b; ++i)
          got.push_back(order.RecordAt(SlicePosition(0, step, m, r, b) + i));
      }
      EXPECT_EQ(got, want) << "step " << step << " M " << m;
    }
  }
}

}  // namespace
}  // namespace tandem::data
