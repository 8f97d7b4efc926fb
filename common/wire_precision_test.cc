#include "common/wire_precision.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace tandem {
namespace {

TEST(WirePrecisionTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(ToBf16Bits(1.0f), 0x3F80);
  EXPECT_EQ(FromBf16Bits(0x3F80), 1.0f);
  // 1 + 2^-8 lies halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(ToBf16Bits(1.0f + 0x1p-8f), 0x3F80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(FromBf16Bits(ToBf16Bits(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_EQ(FromBf16Bits(ToBf16Bits(1.0f + 0x1p-8f + 0x1p-12f)), 1.0f + 0x1p-7f);  // above half
  EXPECT_TRUE(std::isnan(FromBf16Bits(ToBf16Bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(FromBf16Bits(ToBf16Bits(-0.0f)), 0.0f);
  EXPECT_TRUE(std::signbit(FromBf16Bits(ToBf16Bits(-0.0f))));
  EXPECT_TRUE(std::isinf(FromBf16Bits(ToBf16Bits(std::numeric_limits<float>::max()))));
}

TEST(WirePrecisionTest, Fp16KeepsSubnormalsAndOverflowsToInfinity) {
  EXPECT_EQ(ToFp16Bits(1.0f), 0x3C00);
  EXPECT_EQ(FromFp16Bits(ToFp16Bits(0x1p-24f)), 0x1p-24f);  // the smallest subnormal
  EXPECT_EQ(FromFp16Bits(ToFp16Bits(0x1p-26f)), 0.0f);      // below half of it
  EXPECT_EQ(FromFp16Bits(ToFp16Bits(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(FromFp16Bits(ToFp16Bits(65520.0f))));
  EXPECT_EQ(FromFp16Bits(ToFp16Bits(1.0f + 0x1p-11f)), 1.0f);  // a tie, to even
}

#if defined(__FLT16_MAX__)
// The integer conversions give the compiler's _Float16 conversion bits: every half decoded, and
// floats of every exponent (normal, subnormal, overflowing, ties) encoded.
TEST(WirePrecisionTest, Fp16EqualsTheCompilersConversion) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float want = static_cast<float>(std::bit_cast<_Float16>(static_cast<uint16_t>(b)));
    const float got = FromFp16Bits(static_cast<uint16_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << b;
    }
  }
  uint64_t state = 88172645463325252ull;
  for (int i = 0; i < 2'000'000; ++i) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    // Exponents around half's range, so subnormals, ties and overflow all come up.
    uint32_t u = static_cast<uint32_t>(state);
    u = (u & 0x807FFFFFu) | ((96 + static_cast<uint32_t>(state >> 40) % 48) << 23);
    if (i % 7 == 0) u &= ~0x0FFFu;  // exact and tie cases
    const float x = std::bit_cast<float>(u);
    ASSERT_EQ(ToFp16Bits(x), std::bit_cast<uint16_t>(static_cast<_Float16>(x))) << std::hex << u;
  }
}
#endif

// Decoding what was encoded is exact for values the format holds, and the round trip is
// idempotent (what the PS decodes and a resend encodes again are the same bytes).
TEST(WirePrecisionTest, RoundTripIsIdempotent) {
  std::vector<float> v;
  for (int i = -200; i <= 200; ++i) v.push_back(static_cast<float>(i) * 0.0137f);
  for (WirePrecision p : {WirePrecision::kBf16, WirePrecision::kFp16}) {
    std::vector<uint16_t> half(v.size()), again(v.size());
    std::vector<float> back(v.size());
    EncodeHalf(p, v, half);
    DecodeHalf(p, half, back);
    EncodeHalf(p, back, again);
    EXPECT_EQ(half, again);
    for (size_t i = 0; i < v.size(); ++i)
      EXPECT_NEAR(back[i], v[i], std::abs(v[i]) * (p == WirePrecision::kBf16 ? 0x1p-8 : 0x1p-11));
  }
  EXPECT_EQ(WireBytes(WirePrecision::kFp32), 4u);
  EXPECT_EQ(WireBytes(WirePrecision::kBf16), 2u);
  EXPECT_TRUE(ParseWirePrecision("bf16").ok());
  EXPECT_TRUE(ParseWirePrecision("int8").status().IsInvalidArgument());
}

}  // namespace
}  // namespace tandem
