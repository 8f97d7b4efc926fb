// Copies of one row's floats, with a constant size for the common widths: inlined as a few
// vector moves instead of a libc call per row (a pull copies every row it serves, and a k = 0
// apply every row's pre-image).
#pragma once

#include <cstdint>
#include <cstring>

namespace tandem::embedding {

inline void CopyRowFloats(float* to, const void* from, uint32_t n) {
  switch (n) {
    case 8:
      std::memcpy(to, from, 8 * sizeof(float));
      return;
    case 16:
      std::memcpy(to, from, 16 * sizeof(float));
      return;
    case 32:
      std::memcpy(to, from, 32 * sizeof(float));
      return;
    case 64:
      std::memcpy(to, from, 64 * sizeof(float));
      return;
    default:
      std::memcpy(to, from, n * sizeof(float));
  }
}

}  // namespace tandem::embedding
