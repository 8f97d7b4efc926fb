// The in-memory shape of training data: one Sample (a record, reused as a parse buffer) and a
// Batch (structure of arrays for one worker's slice of a global batch, plus per-table
// de-duplicated ids with an inverse index). DESIGN §2, §4 step 1.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/flat_id_index.h"

namespace tandem::data {

// Field counts of a data set (Criteo: 13 dense, 26 categorical).
struct Schema {
  int num_dense = 13;
  int num_categorical = 26;
  friend bool operator==(const Schema&, const Schema&) = default;
};

// One record. Malformed input is kept as a sample of weight 0 so that positions still count
// lines (PROTOCOLS §15 scenario 22). Reuse one Sample across reads: parsing allocates nothing.
struct Sample {
  float label = 0;            // 0 or 1
  float weight = 0;           // 1, or 0 for a malformed line
  std::vector<float> dense;   // num_dense values, already through DenseTransform
  std::vector<uint64_t> cat;  // num_categorical ids, from CategoricalId / MissingId

  explicit Sample(const Schema& schema = {})
      : dense(schema.num_dense), cat(schema.num_categorical) {}
  friend bool operator==(const Sample&, const Sample&) = default;
};

// The documented dense feature transform: log(1 + max(x, 0)).
float DenseTransform(int64_t raw);

// DenseTransform(0 .. kDenseTableSize - 1), precomputed: most Criteo counts are small, and a
// parser that indexes this directly saves a call per field.
inline constexpr int64_t kDenseTableSize = 4096;
const float* DenseTransformTable();

// 64-bit id of categorical value `value` (the hex field parsed as an integer) of field `field`.
// Hashing the parsed value, not its text, makes "0a1b" and "00000A1B" the same id.
uint64_t CategoricalId(int field, uint64_t value);

// The fixed id of an empty categorical field `field`.
uint64_t MissingId(int field);

// Fills `out` with the weight-0 placeholder used for a malformed line.
void MakeBadSample(Sample* out);

// One worker's slice of a global batch, as structure of arrays. Buffers are kept across
// Reset() calls, so a recycled Batch allocates nothing in steady state.
struct Batch {
  Schema schema;
  int64_t step = 0;            // global step s
  int64_t first_position = 0;  // global order position of sample 0
  int size = 0;                // b
  int64_t bad_count = 0;       // samples of weight 0 in this slice
  std::vector<float> label;    // [b]
  std::vector<float> weight;   // [b]
  std::vector<float> dense;    // [b * num_dense], sample-major
  std::vector<uint64_t> cat;   // [b * num_categorical], sample-major
  // Per table (categorical field): distinct ids in first-occurrence (sample) order, and for
  // each sample the position of its id in that list. Sample order keeps gradient sums fixed.
  std::vector<std::vector<uint64_t>> unique_ids;  // [num_categorical][u_f]
  std::vector<std::vector<uint32_t>> inverse;     // [num_categorical][b]

  // Sizes the arrays for `b` samples of `schema`.
  void Reset(const Schema& schema, int b);
  // Copies `sample` into row i.
  void Set(int i, const Sample& sample);
  // Reads row i back (tests, tools).
  void Get(int i, Sample* out) const;
  // Builds unique_ids and inverse from cat.
  void Dedup();

 private:
  FlatIdIndex index_;  // reused by Dedup
};

}  // namespace tandem::data
