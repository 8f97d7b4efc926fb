#include "common/model_checksum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tandem {
namespace {

TEST(ModelChecksumTest, OrderDoesNotMatterButEveryBitDoes) {
  std::vector<float> e1 = {0.5f, -1.25f}, e2 = {3.0f, 4.0f}, st = {0.1f};
  ModelChecksum a, b;
  a.AddRow(0, 7, e1, st, 3, 2);
  a.AddRow(1, 9, e2, st, 4, 1);
  b.AddRow(1, 9, e2, st, 4, 1);
  b.AddRow(0, 7, e1, st, 3, 2);
  EXPECT_EQ(a.Hex(), b.Hex());
  EXPECT_EQ(a.Hex().size(), 32u);
  ModelChecksum c;
  c.AddRow(0, 7, e1, st, 3, 2);
  std::vector<float> e2b = e2;
  e2b[1] = std::nextafter(e2b[1], 10.0f);  // one ulp
  c.AddRow(1, 9, e2b, st, 4, 1);
  EXPECT_NE(a.Hex(), c.Hex());
  ModelChecksum d;
  d.AddRow(0, 7, e1, st, 3, 3);  // frequency differs
  d.AddRow(1, 9, e2, st, 4, 1);
  EXPECT_NE(a.Hex(), d.Hex());
}

TEST(ModelChecksumTest, MergeOfPartsEqualsTheWhole) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6}, slots = {0, 0};
  std::vector<int64_t> shape = {2, 3};
  ModelChecksum whole, part1, part2;
  whole.AddDenseTensor("w", shape, v, slots);
  whole.AddAdmissionCounter(2, 5, 1);
  part1.AddDenseTensor("w", shape, v, slots);
  part2.AddAdmissionCounter(2, 5, 1);
  part1.Merge(part2);
  EXPECT_EQ(part1.Hex(), whole.Hex());
  // A tensor's name and shape are part of its record.
  ModelChecksum renamed;
  renamed.AddDenseTensor("v", shape, v, slots);
  renamed.AddAdmissionCounter(2, 5, 1);
  EXPECT_NE(renamed.Hex(), whole.Hex());
}

TEST(ModelChecksumTest, EmptyIsZeroAndValueIsPinned) {
  EXPECT_EQ(ModelChecksum().Hex(), std::string(32, '0'));
  ModelChecksum one;
  one.AddAdmissionCounter(1, 2, 3);
  // Pinned: the canonical record encoding and XXH3-128 must never change silently, or old
  // checkpoints would stop matching their runs.
  // (computed independently with the C libxxhash over the hand-built 21-byte record)
  EXPECT_EQ(one.Hex(), "bdaf3d6c3c5461038049220bcd41db2c");
}

// A part sent over the wire as (high, low) and rebuilt merges like the original, carry included.
TEST(ModelChecksumTest, FromPartsRoundTripsAndMergesWithCarry) {
  ModelChecksum a;
  a.AddAdmissionCounter(1, 2, 3);
  ModelChecksum b = ModelChecksum::FromParts(a.high(), a.low());
  EXPECT_EQ(b.Hex(), a.Hex());
  ModelChecksum max_low = ModelChecksum::FromParts(7, ~0ull);
  max_low.Merge(ModelChecksum::FromParts(0, 1));
  EXPECT_EQ(max_low.high(), 8u);
  EXPECT_EQ(max_low.low(), 0u);
  ModelChecksum wraps = ModelChecksum::FromParts(~0ull, ~0ull);
  wraps.Merge(ModelChecksum::FromParts(0, 2));
  EXPECT_EQ(wraps.Hex(), "00000000000000000000000000000001");
}

// A sum kept up to date (a row's old record out, its new one in) ends where summing the final
// records from scratch does, borrows across the halves included.
TEST(ModelChecksumTest, SubtractingARecordUndoesAddingIt) {
  std::vector<float> e1 = {0.5f, -1.25f}, e2 = {3.0f, 4.0f}, st = {0.1f};
  ModelChecksum kept;
  kept.AddRow(0, 7, e1, st, 3, 2);
  kept.AddAdmissionCounter(1, 4, 2);
  kept.SubtractRow(0, 7, e1, st, 3, 2);
  kept.AddRow(0, 7, e2, st, 4, 3);
  kept.SubtractAdmissionCounter(1, 4, 2);
  kept.AddAdmissionCounter(1, 4, 3);
  ModelChecksum fresh;
  fresh.AddAdmissionCounter(1, 4, 3);
  fresh.AddRow(0, 7, e2, st, 4, 3);
  EXPECT_EQ(kept, fresh);
  ModelChecksum empty;
  empty.AddRow(1, 1, e1, st, 0, 1);
  empty.SubtractRow(1, 1, e1, st, 0, 1);
  EXPECT_EQ(empty.Hex(), std::string(32, '0'));
  ModelChecksum borrow = ModelChecksum::FromParts(8, 0);
  borrow.Unmerge(ModelChecksum::FromParts(0, 1));
  EXPECT_EQ(borrow.high(), 7u);
  EXPECT_EQ(borrow.low(), ~0ull);
  borrow.Merge(ModelChecksum::FromParts(0, 1));
  EXPECT_EQ(borrow, ModelChecksum::FromParts(8, 0));
}

}  // namespace
}  // namespace tandem
