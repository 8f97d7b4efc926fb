#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace tandem {
namespace {

// Check values from RFC 3720 (iSCSI) appendix B.4 and the CRC catalogue.
TEST(Crc32cTest, CheckValueOf123456789) { EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u); }

TEST(Crc32cTest, ThirtyTwoZeroBytes) {
  const std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
}

TEST(Crc32cTest, ThirtyTwoOnesBytes) {
  const std::vector<uint8_t> ones(32, 0xFF);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Crc32cTest, ThirtyTwoIncreasingBytes) {
  std::vector<uint8_t> bytes(32);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(bytes.data(), bytes.size()), 0x46DD794Eu);
}

TEST(Crc32cTest, EmptyInput) {
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
  EXPECT_EQ(Crc32cExtend(0x12345678u, nullptr, 0), 0x12345678u);
}

TEST(Crc32cTest, TablePathMatchesCheckValue) {
  EXPECT_EQ(internal::Crc32cExtendTable(0, "123456789", 9), 0xE3069283u);
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> bytes(n);
  uint32_t x = seed * 2654435761u + 1;
  for (uint8_t& b : bytes) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x >> 24);
  }
  return bytes;
}

TEST(Crc32cTest, ExtendComposes) {
  const std::vector<uint8_t> data = RandomBytes(1000, 1);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split : {0u, 1u, 7u, 8u, 9u, 500u, 999u, 1000u}) {
    const uint32_t head = Crc32c(data.data(), split);
    EXPECT_EQ(Crc32cExtend(head, data.data() + split, data.size() - split), whole) << split;
    EXPECT_EQ(internal::Crc32cExtendTable(head, data.data() + split, data.size() - split), whole)
        << split;
  }
}

TEST(Crc32cTest, DetectsSingleBitFlip) {
  std::vector<uint8_t> data = RandomBytes(4096, 2);
  const uint32_t before = Crc32c(data.data(), data.size());
  data[1234] ^= 0x10;
  EXPECT_NE(Crc32c(data.data(), data.size()), before);
}

// The SSE4.2 path (word steps after an unaligned head) must agree with the table for every
// length and start alignment. On a CPU without SSE4.2 both calls take the table path.
TEST(Crc32cTest, HardwareAndTableAgreeOnManyLengthsAndAlignments) {
  if (!internal::Crc32cHasHardware()) {
    std::cerr << "note: no SSE4.2 on this CPU; only the table path is exercised\n";
  }
  const std::vector<uint8_t> buffer = RandomBytes(4096 + 16, 3);
  for (size_t offset = 0; offset < 16; ++offset) {
    for (size_t n = 0; n <= 300; ++n) {
      const uint8_t* p = buffer.data() + offset;
      ASSERT_EQ(Crc32cExtend(0xDEADBEEFu, p, n), internal::Crc32cExtendTable(0xDEADBEEFu, p, n))
          << "offset " << offset << " length " << n;
    }
    const uint8_t* p = buffer.data() + offset;
    ASSERT_EQ(Crc32c(p, 4096), internal::Crc32cExtendTable(0, p, 4096)) << "offset " << offset;
  }
}

}  // namespace
}  // namespace tandem
