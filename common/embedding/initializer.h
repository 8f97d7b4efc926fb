// Initial values of embedding rows: a pure function of (seed, table, id), the same bits in every
// process and build (PROTOCOLS §5.4): a Philox4x32-10 counter-based generator keyed by the seed,
// mapped to floats with integer arithmetic and exact float operations only (no libm, no <random>
// distributions).
#pragma once

#include <array>
#include <cstdint>

#include "common/embedding/table_spec.h"

namespace tandem::embedding {

// Philox4x32-10 (Salmon et al., SC'11): 4 x u32 of output per (counter, key).
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Writes the initial embedding of (table, id) into emb[spec.dim]:
// uniform: (2u - 1) * scale with u = (x >> 8) * 2^-24 in [0, 1);
// normal: (sum of 12 such u - 6) * scale (Irwin-Hall: mean 0, variance 1, no libm);
// zeros: 0.
void InitialEmbedding(uint64_t seed, const TableSpec& spec, uint64_t id, float* emb);

// Writes the initial optimizer state into state[spec.state_floats()]: adagrad and rowwise
// accumulators = adagrad_initial_accumulator; adam m = v = 0, beta powers = 1; ftrl z = n = 0.
void InitialState(const TableSpec& spec, float* state);

// Fills a whole row (meta = {-1, 0}, initial embedding, initial state).
void InitialRow(uint64_t seed, const TableSpec& spec, uint64_t id, RowRef row);

}  // namespace tandem::embedding
