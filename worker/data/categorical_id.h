// The hash behind CategoricalId, inline for the Criteo parser's per-field loop (a call per
// categorical field was a third of the parse time). Include only from .cc files: it pulls in
// all of xxhash. record.h's CategoricalId is the public name and returns the same bits.
#pragma once

#include <cstdint>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

namespace tandem::data::internal {

// Little-endian bytes of the value, seeded with the field: same value in two fields differs.
inline uint64_t CategoricalIdInline(int field, uint64_t value) {
  return XXH3_64bits_withSeed(&value, sizeof(value), static_cast<uint64_t>(field));
}

}  // namespace tandem::data::internal
