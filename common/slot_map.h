// Key placement (DESIGN §3): a key (table, id) maps to one of 4096 virtual slots by a fixed
// 64-bit hash (XXH3-64 of the 12 little-endian bytes table|id, seed 0); slot s lives on shard
// s mod N. The mapping is written into every checkpoint so a job can restore onto another N.
#pragma once

#include <cstdint>

namespace tandem {

inline constexpr uint32_t kNumSlots = 4096;

uint32_t SlotOf(uint32_t table, uint64_t id);
inline uint32_t ShardOfSlot(uint32_t slot, uint32_t num_shards) { return slot % num_shards; }
inline uint32_t ShardOf(uint32_t table, uint64_t id, uint32_t num_shards) {
  return ShardOfSlot(SlotOf(table, id), num_shards);
}

}  // namespace tandem
