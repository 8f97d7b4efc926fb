// Host-side rounding of fp32 values to the formats of train.precision (round to nearest, ties
// to even, as the GPU's conversions do), and the names the config uses for them. The CPU
// backend emulates mixed-precision GEMMs with these; the GPU tests use them as the reference.
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "worker/device/backend.h"

namespace tandem::device {

// fp32 -> bf16 -> fp32. NaN stays NaN; overflow rounds to infinity as in hardware.
inline float RoundToBf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) return x;  // NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xFFFF0000u);
}

// fp32 -> fp16 -> fp32 (IEEE binary16: subnormals kept, |x| >= 65520 becomes infinity).
inline float RoundToFp16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

inline float RoundTo(Precision p, float x) {
  switch (p) {
    case Precision::kBf16:
      return RoundToBf16(x);
    case Precision::kFp16:
      return RoundToFp16(x);
    case Precision::kFp32:
      break;
  }
  return x;
}

// "fp32" | "bf16" | "fp16" (train.precision); InvalidArgument otherwise.
inline StatusOr<Precision> ParsePrecision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  return Status::InvalidArgument("train.precision: unknown precision '" + std::string(name) +
                                 "' (fp32 | bf16 | fp16)");
}

}  // namespace tandem::device
