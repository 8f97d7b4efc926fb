// The in-memory shape of training data: one Sample (a record, reused as a parse buffer) and a
// Batch (structure of arrays for one worker's slice of a global batch, plus per-table
// de-duplicated ids with an inverse index). DESIGN §2, §4 step 1.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/flat_id_index.h"

namespace tandem::data {

// The shape of a data set: dense count, sparse features (each looking up a table, with at most
// max_len ids per sample), and labels. The default is Criteo's: 13 dense, 26 single-hot
// features C1..C26 each with its own table, one label. Issue 18 adds multi-hot features, shared
// tables and several labels (`features` and `data.labels` in the job config).
struct Schema {
  Schema() = default;
  Schema(int dense, int categorical, int labels = 1)
      : num_dense(dense), num_categorical(categorical), num_labels(labels) {}

  int num_dense = 13;
  int num_categorical = 26;  // sparse features
  int num_labels = 1;
  // Per feature; empty = the Criteo layout (feature f looks up table f, one id each).
  std::vector<int> table;      // table id of each feature, tables numbered by first use
  std::vector<int> max_len;    // ids per sample, >= 1
  std::vector<bool> mean;      // pooling: mean (true) or sum
  std::vector<bool> weighted;  // ids carry weights
  // DeepFM and Wide & Deep (issue 19): table t has a wide companion, table num_tables() + t,
  // looked up with the same ids (Batch::Dedup copies them).
  bool wide = false;

  int table_of(int f) const { return table.empty() ? f : table[f]; }
  bool weighted_of(int f) const { return !weighted.empty() && weighted[f]; }
  bool any_weighted() const;
  int max_len_of(int f) const { return max_len.empty() ? 1 : max_len[f]; }
  bool mean_of(int f) const { return !mean.empty() && mean[f]; }
  int num_tables() const;
  // The tables a batch pulls: num_tables(), twice that with wide companions.
  int num_pull_tables() const { return wide ? 2 * num_tables() : num_tables(); }
  // One id per feature and one label: what Criteo lines and binary v1 records hold.
  bool single_hot() const;
  friend bool operator==(const Schema&, const Schema&) = default;
};

// One record. Malformed input is kept as a sample of weight 0 so that positions still count
// lines (PROTOCOLS §15 scenario 22). Reuse one Sample across reads: parsing allocates nothing
// once the buffers have grown.
struct Sample {
  std::vector<float> labels;  // num_labels values, each 0 or 1
  float weight = 0;           // 1, or 0 for a malformed line
  std::vector<float> dense;   // num_dense values, already through DenseTransform
  // Every id, feature after feature: feature f owns cat[offsets[f], offsets[f + 1]). Ids come
  // from CategoricalId / MissingId keyed by the feature's table.
  std::vector<uint64_t> cat;
  std::vector<uint32_t> offsets;  // num_categorical + 1
  // Per-id weights parallel to cat when the schema has a weighted feature (1 for the ids of
  // unweighted features), else empty.
  std::vector<float> id_weights;

  // Sized for one id per feature (offsets 0, 1, ..., num_categorical).
  explicit Sample(const Schema& schema = {});
  float label() const { return labels.empty() ? 0.0f : labels[0]; }
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

// Fills `out` with the weight-0 placeholder used for a malformed line: labels and dense 0, and
// one MissingId per feature (keyed by the feature's table).
void MakeBadSample(const Schema& schema, Sample* out);

// One worker's slice of a global batch, as structure of arrays. Buffers are kept across
// Reset() calls, so a recycled Batch allocates nothing in steady state.
struct Batch {
  Schema schema;
  int64_t step = 0;            // global step s
  int64_t first_position = 0;  // global order position of sample 0
  int size = 0;                // b
  int64_t bad_count = 0;       // samples of weight 0 in this slice
  std::vector<float> label;    // [b * num_labels], sample-major
  std::vector<float> weight;   // [b]
  std::vector<float> dense;    // [b * num_dense], sample-major
  // Per feature f: the ids of sample i are ids[f][offsets[f][i] .. offsets[f][i + 1]).
  std::vector<std::vector<int64_t>> offsets;  // [num_categorical][b + 1]
  std::vector<std::vector<uint64_t>> ids;     // [num_categorical][lookups of f]
  std::vector<std::vector<float>>
      id_weights;  // [num_categorical][lookups of f]; empty unless weighted
  // Per table: distinct ids in first-occurrence order (the table's features in feature order,
  // each in sample order), and per feature the position of each lookup in its table's list.
  // That order keeps gradient sums fixed.
  std::vector<std::vector<uint64_t>> unique_ids;  // [num_pull_tables][u_t]
  std::vector<std::vector<uint32_t>> inverse;     // [num_categorical][lookups of f]

  // Sizes the arrays for `b` samples of `schema`.
  void Reset(const Schema& schema, int b);
  // Copies `sample` into row i. REQUIRES: rows 0..i-1 were set, in order (bags are appended).
  void Set(int i, const Sample& sample);
  // Reads row i back (tests, tools).
  void Get(int i, Sample* out) const;
  // Builds unique_ids and inverse from cat.
  void Dedup();

 private:
  FlatIdIndex index_;  // reused by Dedup
};

}  // namespace tandem::data
