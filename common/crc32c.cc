#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tandem {
namespace {

constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;

// Byte-at-a-time table for the reflected polynomial, built at compile time (no mutable state).
constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kCastagnoliReflected : 0u);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

// The raw register update, without the pre/post inversion.
uint32_t UpdateTable(uint32_t state, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) state = (state >> 8) ^ kTable[(state ^ p[i]) & 0xFFu];
  return state;
}

#if defined(__x86_64__)
// Compiled for SSE4.2 on its own so the rest of the binary stays baseline x86-64; only called
// after a run-time CPU check.
__attribute__((target("sse4.2"))) uint32_t UpdateHardware(uint32_t state, const unsigned char* p,
                                                          size_t n) {
  // Byte steps up to 8-byte alignment, then 8 bytes per instruction, then the tail.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    state = _mm_crc32_u8(state, *p++);
    --n;
  }
  uint64_t state64 = state;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof(word));  // aligned here; memcpy keeps it free of aliasing UB
    state64 = _mm_crc32_u64(state64, word);
  }
  state = static_cast<uint32_t>(state64);
  for (; n > 0; --n) state = _mm_crc32_u8(state, *p++);
  return state;
}

bool CpuHasSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

namespace internal {

uint32_t Crc32cExtendTable(uint32_t crc, const void* data, size_t n) {
  return ~UpdateTable(~crc, static_cast<const unsigned char*>(data), n);
}

bool Crc32cHasHardware() {
#if defined(__x86_64__)
  static const bool has = CpuHasSse42();  // immutable after first use
  return has;
#else
  return false;
#endif
}

}  // namespace internal

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (internal::Crc32cHasHardware()) {
    return ~UpdateHardware(~crc, static_cast<const unsigned char*>(data), n);
  }
#endif
  return internal::Crc32cExtendTable(crc, data, n);
}

}  // namespace tandem
