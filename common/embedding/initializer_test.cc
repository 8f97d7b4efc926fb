#include "common/embedding/initializer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tandem::embedding {
namespace {

using Words = std::array<uint32_t, 4>;

TableSpec Spec(InitDist dist, uint32_t dim, float scale, uint32_t table_id = 3) {
  TableSpec spec;
  spec.table_id = table_id;
  spec.dim = dim;
  spec.init_dist = dist;
  spec.init_scale = scale;
  return spec;
}

std::vector<float> Embedding(uint64_t seed, const TableSpec& spec, uint64_t id) {
  std::vector<float> emb(spec.dim, -123.0f);
  InitialEmbedding(seed, spec, id, emb.data());
  return emb;
}

std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> bits;
  for (float v : values) bits.push_back(std::bit_cast<uint32_t>(v));
  return bits;
}

// Known-answer vectors from Random123 (kat_vectors, philox4x32_10).
TEST(PhiloxTest, MatchesRandom123ZeroVector) {
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
}

TEST(PhiloxTest, MatchesRandom123PiVector) {
  EXPECT_EQ(
      Philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
      (Words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(PhiloxTest, MatchesRandom123AllOnesVector) {
  EXPECT_EQ(
      Philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
      (Words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
}

// The exact bits are part of the protocol (PROTOCOLS §5.4): pulls of absent rows on different
// processes and builds must agree. These were cross-checked with an independent Python model of
// the mapping; any change to counter layout, word use or float mapping breaks them.
TEST(InitialEmbeddingTest, UniformBitsArePinned) {
  const TableSpec spec = Spec(InitDist::kUniform, 6, 0.05f);
  EXPECT_EQ(Bits(Embedding(42, spec, 123456789012345u)),
            (std::vector<uint32_t>{0x3d3bbc95u, 0x3d345c17u, 0x3d4159a7u, 0x3b73f767u, 0xbce6c82au,
                                   0xbd4828ebu}));
}

TEST(InitialEmbeddingTest, NormalBitsArePinned) {
  const TableSpec spec = Spec(InitDist::kNormal, 6, 0.05f);
  EXPECT_EQ(Bits(Embedding(42, spec, 123456789012345u)),
            (std::vector<uint32_t>{0x3c7aa713u, 0xbd433a86u, 0xbcf1447fu, 0xbbf1c6d3u, 0x3c940873u,
                                   0xbd4a181bu}));
}

TEST(InitialEmbeddingTest, UniformUsesPhiloxWordsInOrder) {
  // Element i is word i % 4 of block i / 4 with counter (id lo, id hi, table, block).
  const uint64_t seed = 0x0123456789abcdefull;
  const uint64_t id = 0xfedcba9876543210ull;
  const TableSpec spec = Spec(InitDist::kUniform, 8, 1.0f, 7);
  const std::vector<float> emb = Embedding(seed, spec, id);
  for (uint32_t i = 0; i < 8; ++i) {
    const Words words =
        Philox4x32({0x76543210u, 0xfedcba98u, 7, i / 4}, {0x89abcdefu, 0x01234567u});
    const float u = static_cast<float>(words[i % 4] >> 8) / 16777216.0f;
    EXPECT_EQ(emb[i], 2.0f * u - 1.0f) << "element " << i;
  }
}

TEST(InitialEmbeddingTest, IsDeterministic) {
  for (InitDist dist : {InitDist::kUniform, InitDist::kNormal}) {
    const TableSpec spec = Spec(dist, 16, 0.1f);
    EXPECT_EQ(Bits(Embedding(9, spec, 77)), Bits(Embedding(9, spec, 77)));
  }
}

TEST(InitialEmbeddingTest, DiffersAcrossIdsTablesAndSeeds) {
  for (InitDist dist : {InitDist::kUniform, InitDist::kNormal}) {
    const TableSpec spec = Spec(dist, 16, 0.1f, 0);
    const TableSpec other_table = Spec(dist, 16, 0.1f, 1);
    const std::vector<float> base = Embedding(1, spec, 5);
    EXPECT_NE(base, Embedding(1, spec, 6));
    EXPECT_NE(base, Embedding(1, spec, 5 + (uint64_t{1} << 32)));  // high id word matters
    EXPECT_NE(base, Embedding(1, other_table, 5));
    EXPECT_NE(base, Embedding(2, spec, 5));
    EXPECT_NE(base, Embedding(1 + (uint64_t{1} << 32), spec, 5));  // high seed word matters
  }
}

TEST(InitialEmbeddingTest, UniformIsInRangeWithZeroMean) {
  const float scale = 0.05f;
  const TableSpec spec = Spec(InitDist::kUniform, 16, scale);
  double sum = 0.0;
  double sum_sq = 0.0;
  int count = 0;
  for (uint64_t id = 0; id < 10000; ++id) {
    for (float v : Embedding(3, spec, id)) {
      ASSERT_GE(v, -scale);
      ASSERT_LT(v, scale);
      sum += v;
      sum_sq += double{v} * v;
      ++count;
    }
  }
  const double mean = sum / count;
  // Standard error of the mean is scale / sqrt(3 * 160000) ~ 7e-5; allow ~7 sigma.
  EXPECT_NEAR(mean, 0.0, 5e-4);
  EXPECT_NEAR(sum_sq / count - mean * mean, double{scale} * scale / 3.0, 1e-5);
}

TEST(InitialEmbeddingTest, NormalHasZeroMeanAndScaleSquaredVariance) {
  const float scale = 0.5f;
  const TableSpec spec = Spec(InitDist::kNormal, 16, scale);
  double sum = 0.0;
  double sum_sq = 0.0;
  int count = 0;
  for (uint64_t id = 0; id < 10000; ++id) {
    for (float v : Embedding(11, spec, id)) {
      ASSERT_LE(std::abs(v), 6.0f * scale);  // Irwin-Hall(12) - 6 is bounded by 6
      sum += v;
      sum_sq += double{v} * v;
      ++count;
    }
  }
  const double mean = sum / count;
  const double variance = sum_sq / count - mean * mean;
  // 160000 samples: the mean's standard error is 0.5 / 400 = 1.25e-3, the variance's ~1.8e-3.
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(variance, 0.25, 0.01);
}

TEST(InitialEmbeddingTest, ZerosAreZero) {
  const TableSpec spec = Spec(InitDist::kZeros, 5, 0.05f);
  const std::vector<float> emb = Embedding(1, spec, 2);
  EXPECT_EQ(Bits(emb), std::vector<uint32_t>(5, 0u));  // +0.0f, not -0.0f
}

TEST(InitialStateTest, MatchesEachOptimizer) {
  TableSpec spec = Spec(InitDist::kUniform, 3, 0.05f);
  spec.adagrad_initial_accumulator = 0.25f;
  std::vector<float> state(16, -7.0f);

  spec.optimizer = OptimizerKind::kAdagrad;
  InitialState(spec, state.data());
  EXPECT_EQ(std::vector<float>(state.begin(), state.begin() + 4),
            (std::vector<float>{0.25f, 0.25f, 0.25f, -7.0f}));

  std::fill(state.begin(), state.end(), -7.0f);
  spec.optimizer = OptimizerKind::kRowwiseAdagrad;
  InitialState(spec, state.data());
  EXPECT_EQ(std::vector<float>(state.begin(), state.begin() + 2),
            (std::vector<float>{0.25f, -7.0f}));

  std::fill(state.begin(), state.end(), -7.0f);
  spec.optimizer = OptimizerKind::kAdam;
  InitialState(spec, state.data());
  EXPECT_EQ(std::vector<float>(state.begin(), state.begin() + 9),
            (std::vector<float>{0, 0, 0, 0, 0, 0, 1, 1, -7.0f}));

  std::fill(state.begin(), state.end(), -7.0f);
  spec.optimizer = OptimizerKind::kFtrl;
  InitialState(spec, state.data());
  EXPECT_EQ(std::vector<float>(state.begin(), state.begin() + 7),
            (std::vector<float>{0, 0, 0, 0, 0, 0, -7.0f}));

  std::fill(state.begin(), state.end(), -7.0f);
  spec.optimizer = OptimizerKind::kSgd;
  InitialState(spec, state.data());
  EXPECT_EQ(state[0], -7.0f);  // no state, nothing written
}

TEST(InitialRowTest, FillsMetaEmbeddingAndState) {
  TableSpec spec = Spec(InitDist::kUniform, 4, 0.05f);
  spec.optimizer = OptimizerKind::kAdam;
  std::vector<uint8_t> bytes(spec.row_bytes() + 4, 0xAB);
  const RowRef row{bytes.data()};
  InitialRow(5, spec, 99, row);
  EXPECT_EQ(row.meta()->last_updated_step, -1);
  EXPECT_EQ(row.meta()->frequency, 0u);
  EXPECT_EQ(std::vector<float>(row.embedding(), row.embedding() + 4), Embedding(5, spec, 99));
  const float* state = row.state(4);
  EXPECT_EQ(std::vector<float>(state, state + 10),
            (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1}));
  // Nothing past the row is written.
  EXPECT_EQ(bytes[spec.row_bytes()], 0xAB);
}

}  // namespace
}  // namespace tandem::embedding
