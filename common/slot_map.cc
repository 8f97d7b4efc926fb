#include "common/slot_map.h"

// Header-only xxHash: no link flag, and the hash is compiled with our own flags.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tandem {

uint32_t SlotOf(uint32_t table, uint64_t id) {
  // The key's bytes are spelled out little-endian so the slot of a key is the same on any host
  // byte order; checkpoints record this mapping and must stay valid everywhere.
  unsigned char key[12];
  for (int i = 0; i < 4; ++i) key[i] = static_cast<unsigned char>(table >> (8 * i));
  for (int i = 0; i < 8; ++i) key[4 + i] = static_cast<unsigned char>(id >> (8 * i));
  const XXH64_hash_t hash = XXH3_64bits(key, sizeof(key));
  return static_cast<uint32_t>(hash % kNumSlots);
}

}  // namespace tandem
