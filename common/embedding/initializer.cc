#include "common/embedding/initializer.h"

#include <algorithm>

namespace tandem::embedding {
namespace {

// Philox4x32 constants (Random123, philox.h): round multipliers and Weyl key increments.
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
constexpr int kPhiloxRounds = 10;

// 2^-24: scales a 24-bit integer into [0, 1) exactly.
constexpr float kTwoPowMinus24 = 1.0f / 16777216.0f;

struct HiLo {
  uint32_t hi;
  uint32_t lo;
};

HiLo MulHiLo(uint32_t a, uint32_t b) {
  const uint64_t product = uint64_t{a} * b;
  return {static_cast<uint32_t>(product >> 32), static_cast<uint32_t>(product)};
}

std::array<uint32_t, 4> PhiloxRound(const std::array<uint32_t, 4>& ctr,
                                    const std::array<uint32_t, 2>& key) {
  const HiLo p0 = MulHiLo(kPhiloxM0, ctr[0]);
  const HiLo p1 = MulHiLo(kPhiloxM1, ctr[2]);
  return {p1.hi ^ ctr[1] ^ key[0], p1.lo, p0.hi ^ ctr[3] ^ key[1], p0.lo};
}

// The generator's stream for one row: key = seed, counter = (id, table, block).
struct RowStream {
  std::array<uint32_t, 2> key;
  uint32_t id_lo;
  uint32_t id_hi;
  uint32_t table_id;

  std::array<uint32_t, 4> Block(uint32_t block) const {
    return Philox4x32({id_lo, id_hi, table_id, block}, key);
  }
};

RowStream MakeStream(uint64_t seed, uint32_t table_id, uint64_t id) {
  return {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
          static_cast<uint32_t>(id),
          static_cast<uint32_t>(id >> 32),
          table_id};
}

// The top 24 bits of x, i.e. u = Top24(x) * 2^-24 is uniform on [0, 1) with 24-bit resolution.
uint32_t Top24(uint32_t x) { return x >> 8; }

// Element i uses word i % 4 of counter block i / 4, so one Philox call feeds four elements.
// Every step is exact in fp32 (24-bit integer -> float, power-of-two scaling, 2u - 1 has at
// most 24 significant bits) except the final multiplication by scale, which is one IEEE
// rounding: the result is the same bits everywhere.
void FillUniform(const RowStream& stream, uint32_t dim, float scale, float* emb) {
  for (uint32_t block = 0; block * 4 < dim; ++block) {
    const std::array<uint32_t, 4> words = stream.Block(block);
    const uint32_t count = std::min<uint32_t>(4, dim - block * 4);
    for (uint32_t j = 0; j < count; ++j) {
      const float u = static_cast<float>(Top24(words[j])) * kTwoPowMinus24;
      emb[block * 4 + j] = (2.0f * u - 1.0f) * scale;
    }
  }
}

// Irwin-Hall with 12 terms: element i consumes counter blocks 3i, 3i+1, 3i+2 (all 12 words, in
// order). The sum of the 12 24-bit integers minus 6 * 2^24 is formed exactly in int32 (its
// magnitude is below 2^27), converted to float once (one IEEE rounding), scaled by 2^-24 (exact)
// and by `scale` (one rounding). This equals (sum of u - 6) * scale up to those two roundings and
// never depends on the order of a floating-point sum.
void FillNormal(const RowStream& stream, uint32_t dim, float scale, float* emb) {
  constexpr int32_t kSixTimesTwoPow24 = 6 * (1 << 24);
  for (uint32_t i = 0; i < dim; ++i) {
    int32_t sum = 0;
    for (uint32_t j = 0; j < 3; ++j) {
      for (uint32_t word : stream.Block(3 * i + j)) sum += static_cast<int32_t>(Top24(word));
    }
    const float centered = static_cast<float>(sum - kSixTimesTwoPow24) * kTwoPowMinus24;
    emb[i] = centered * scale;
  }
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  for (int round = 0; round < kPhiloxRounds; ++round) {
    if (round > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    counter = PhiloxRound(counter, key);
  }
  return counter;
}

void InitialEmbedding(uint64_t seed, const TableSpec& spec, uint64_t id, float* emb) {
  const RowStream stream = MakeStream(seed, spec.table_id, id);
  switch (spec.init_dist) {
    case InitDist::kUniform:
      FillUniform(stream, spec.dim, spec.init_scale, emb);
      return;
    case InitDist::kNormal:
      FillNormal(stream, spec.dim, spec.init_scale, emb);
      return;
    case InitDist::kZeros:
      std::fill_n(emb, spec.dim, 0.0f);
      return;
  }
}

void InitialState(const TableSpec& spec, float* state) {
  const uint32_t dim = spec.dim;
  switch (spec.optimizer) {
    case OptimizerKind::kSgd:
      return;
    case OptimizerKind::kAdagrad:
    case OptimizerKind::kRowwiseAdagrad:
      std::fill_n(state, spec.state_floats(), spec.adagrad_initial_accumulator);
      return;
    case OptimizerKind::kAdam:
      // m[dim], v[dim], then the running products beta1^t and beta2^t (t = 0).
      std::fill_n(state, 2 * dim, 0.0f);
      state[2 * dim] = 1.0f;
      state[2 * dim + 1] = 1.0f;
      return;
    case OptimizerKind::kFtrl:
      std::fill_n(state, 2 * dim, 0.0f);  // z[dim], n[dim]
      return;
  }
}

void InitialRow(uint64_t seed, const TableSpec& spec, uint64_t id, RowRef row) {
  *row.meta() = RowMeta{};  // {last_updated_step = -1, frequency = 0}
  InitialEmbedding(seed, spec, id, row.embedding());
  InitialState(spec, row.state(spec.dim));
}

}  // namespace tandem::embedding
