// ps.wire_precision (issue 21): pulled rows and pushed gradients may cross the wire as bf16 or
// fp16 (half the bytes); the parameter server keeps fp32 state. The rounding is round to
// nearest, ties to even, on both sides the same function, so at k = 0 a job is bit-exact within
// one setting (the setting is part of the config's computation hash).
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"

namespace tandem {

// Values as they travel in a bulk frame. The numbers are the wire's (TableSlice.precision).
enum class WirePrecision : uint8_t { kFp32 = 0, kBf16 = 1, kFp16 = 2 };

inline uint16_t ToBf16Bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;  // NaN stays a (quiet) NaN
  // A select, not a branch, so that EncodeHalf's loop vectorizes.
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}
inline float FromBf16Bits(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }
// IEEE binary16, round to nearest even: subnormals kept, |x| >= 65520 becomes infinity, NaN a
// quiet NaN. In integer and fp32 arithmetic rather than _Float16, which clang 14 (the fuzz
// build) lacks on x86; the same bits as the compiler's conversion (tested against it).
inline uint16_t ToFp16Bits(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7FFFFFFFu;
  uint32_t h;
  if (u >= 0x47800000u) {  // >= 65536 (2^16), inf or NaN
    h = u > 0x7F800000u ? 0x7E00u : 0x7C00u;
  } else if (u < 0x38800000u) {  // below 2^-14: a subnormal half or zero
    // Adding 0.5 aligns the 10 mantissa bits at the bottom of the float; the fp32 addition
    // rounds to nearest even, which is the rounding wanted.
    const float aligned = std::bit_cast<float>(u) + 0.5f;
    h = std::bit_cast<uint32_t>(aligned) - 0x3F000000u;
  } else {
    const uint32_t odd = (u >> 13) & 1u;
    u += 0xC8000FFFu + odd;  // rebias the exponent (-112 << 23), round half to even
    h = u >> 13;             // a carry out of the mantissa rounds up to the next power (or inf)
  }
  return static_cast<uint16_t>(h | sign);
}
inline float FromFp16Bits(uint16_t b) {
  uint32_t u = uint32_t{b & 0x7FFFu} << 13;
  const uint32_t exponent = u & 0x0F800000u;
  u += 0x38000000u;               // rebias the exponent (+112 << 23)
  if (exponent == 0x0F800000u) {  // inf or NaN
    u += 0x38000000u;
  } else if (exponent == 0) {  // zero or subnormal: renormalise
    u += 0x00800000u;
    u = std::bit_cast<uint32_t>(std::bit_cast<float>(u) - 0x1p-14f);
  }
  return std::bit_cast<float>(u | uint32_t{b & 0x8000u} << 16);
}

// Bytes per value on the wire.
inline size_t WireBytes(WirePrecision p) { return p == WirePrecision::kFp32 ? 4 : 2; }

// REQUIRES: out.size() == in.size(); p is kBf16 or kFp16.
inline void EncodeHalf(WirePrecision p, std::span<const float> in, std::span<uint16_t> out) {
  if (p == WirePrecision::kBf16) {
    for (size_t i = 0; i < in.size(); ++i) out[i] = ToBf16Bits(in[i]);
  } else {
    for (size_t i = 0; i < in.size(); ++i) out[i] = ToFp16Bits(in[i]);
  }
}
inline void DecodeHalf(WirePrecision p, std::span<const uint16_t> in, std::span<float> out) {
  if (p == WirePrecision::kBf16) {
    for (size_t i = 0; i < in.size(); ++i) out[i] = FromBf16Bits(in[i]);
  } else {
    for (size_t i = 0; i < in.size(); ++i) out[i] = FromFp16Bits(in[i]);
  }
}

// "fp32" | "bf16" | "fp16"; kInvalidArgument otherwise.
inline StatusOr<WirePrecision> ParseWirePrecision(std::string_view name) {
  if (name == "fp32") return WirePrecision::kFp32;
  if (name == "bf16") return WirePrecision::kBf16;
  if (name == "fp16") return WirePrecision::kFp16;
  return Status::InvalidArgument("ps.wire_precision: unknown precision '" + std::string(name) +
                                 "' (fp32 | bf16 | fp16)");
}

}  // namespace tandem
