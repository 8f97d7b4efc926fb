#include "common/slot_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tandem {
namespace {

// Checkpoints record this mapping and restores depend on it: these values must never change.
// They were computed with an independent Python model of XXH3-64 (9-16 byte path, default
// secret, seed 0) that reproduces xxHash's own sanity vector for 12 bytes (0xA713DAF0DFBB77E7).
TEST(SlotMapTest, SlotsArePinned) {
  EXPECT_EQ(SlotOf(0, 0), 1264u);
  EXPECT_EQ(SlotOf(0, 1), 1602u);
  EXPECT_EQ(SlotOf(1, 0), 3864u);
  EXPECT_EQ(SlotOf(3, 123456789012345u), 3754u);
  EXPECT_EQ(SlotOf(25, UINT64_MAX), 122u);
  EXPECT_EQ(SlotOf(7, 42), 1466u);
}

TEST(SlotMapTest, SlotsAreRoughlyUniformOverOneMillionKeys) {
  constexpr int kKeys = 1 << 20;
  std::vector<int> counts(kNumSlots, 0);
  for (int k = 0; k < kKeys; ++k) {
    // Sequential ids across a few tables, the common shape of real keys.
    const uint32_t slot = SlotOf(static_cast<uint32_t>(k % 26), static_cast<uint64_t>(k / 26));
    ASSERT_LT(slot, kNumSlots);
    ++counts[slot];
  }
  // Expected 256 per slot, standard deviation 16: every slot within +-6 sigma, and the
  // chi-square statistic near its 4095 degrees of freedom (sd ~ 90.5; allow ~5 sd).
  double chi_square = 0.0;
  for (int c : counts) {
    EXPECT_GT(c, 256 - 96);
    EXPECT_LT(c, 256 + 96);
    chi_square += (c - 256.0) * (c - 256.0) / 256.0;
  }
  EXPECT_NEAR(chi_square, 4095.0, 460.0);
}

TEST(SlotMapTest, ShardOfIsInRangeAndFollowsSlot) {
  for (uint32_t num_shards : {1u, 2u, 3u, 7u, 64u, 4096u, 5000u}) {
    for (uint64_t id = 0; id < 2000; ++id) {
      const uint32_t shard = ShardOf(2, id, num_shards);
      ASSERT_LT(shard, num_shards);
      ASSERT_EQ(shard, SlotOf(2, id) % num_shards);
    }
  }
}

TEST(SlotMapTest, EveryShardGetsKeys) {
  constexpr uint32_t kShards = 5;
  std::vector<int> counts(kShards, 0);
  for (uint64_t id = 0; id < 10000; ++id) ++counts[ShardOf(0, id, kShards)];
  EXPECT_GT(*std::min_element(counts.begin(), counts.end()), 1800);
}

}  // namespace
}  // namespace tandem
