#include "worker/data/record.h"

#include <algorithm>
#include <cmath>

#include "worker/data/categorical_id.h"

namespace tandem::data {
namespace {
// Separates the hash of "missing" from every hash of a value.
constexpr uint64_t kMissingSeed = 0x6d697373696e6721ull;  // "missing!"
}  // namespace

namespace {
float DenseTransformSlow(int64_t raw) {
  return static_cast<float>(std::log1p(static_cast<double>(std::max<int64_t>(raw, 0))));
}
}  // namespace

// Most Criteo counts are small: a table of the same values saves a log call per field.
const float* DenseTransformTable() {
  static const std::vector<float> table = [] {
    std::vector<float> t(kDenseTableSize);
    for (int64_t i = 0; i < kDenseTableSize; ++i) t[i] = DenseTransformSlow(i);
    return t;
  }();
  return table.data();
}

float DenseTransform(int64_t raw) {
  if (raw <= 0) return 0.0f;
  return raw < kDenseTableSize ? DenseTransformTable()[raw] : DenseTransformSlow(raw);
}

uint64_t CategoricalId(int field, uint64_t value) {
  return internal::CategoricalIdInline(field, value);
}

uint64_t MissingId(int field) {
  const uint64_t f = static_cast<uint64_t>(field);
  return XXH3_64bits_withSeed(&f, sizeof(f), kMissingSeed);
}

int Schema::num_tables() const {
  if (table.empty()) return num_categorical;
  int n = 0;
  for (int t : table) n = std::max(n, t + 1);
  return n;
}

bool Schema::any_weighted() const {
  return std::find(weighted.begin(), weighted.end(), true) != weighted.end();
}

bool Schema::single_hot() const {
  return num_labels == 1 && !any_weighted() &&
         std::all_of(max_len.begin(), max_len.end(), [](int len) { return len == 1; });
}

Sample::Sample(const Schema& schema)
    : labels(schema.num_labels),
      dense(schema.num_dense),
      cat(schema.num_categorical),
      offsets(schema.num_categorical + 1) {
  for (size_t f = 0; f < offsets.size(); ++f) offsets[f] = static_cast<uint32_t>(f);
  if (schema.any_weighted()) id_weights.assign(cat.size(), 1.0f);
}

void MakeBadSample(const Schema& schema, Sample* out) {
  out->labels.assign(schema.num_labels, 0.0f);
  out->weight = 0;
  out->dense.assign(schema.num_dense, 0.0f);
  const auto nc = static_cast<size_t>(schema.num_categorical);
  out->cat.resize(nc);
  out->offsets.resize(nc + 1);
  for (size_t f = 0; f < nc; ++f) {
    out->cat[f] = MissingId(schema.table_of(static_cast<int>(f)));
    out->offsets[f] = static_cast<uint32_t>(f);
  }
  out->offsets[nc] = static_cast<uint32_t>(nc);
  if (schema.any_weighted()) {
    out->id_weights.assign(nc, 1.0f);
  } else {
    out->id_weights.clear();
  }
}

void Batch::Reset(const Schema& s, int b) {
  schema = s;
  size = b;
  bad_count = 0;
  label.resize(static_cast<size_t>(b) * s.num_labels);
  weight.resize(b);
  dense.resize(static_cast<size_t>(b) * s.num_dense);
  offsets.resize(s.num_categorical);
  ids.resize(s.num_categorical);
  id_weights.resize(s.num_categorical);
  inverse.resize(s.num_categorical);
  for (int f = 0; f < s.num_categorical; ++f) {
    offsets[f].resize(static_cast<size_t>(b) + 1);
    offsets[f][0] = 0;
    // Capacity for full bags, so that Set appends without reallocating in steady state.
    ids[f].reserve(static_cast<size_t>(b) * s.max_len_of(f));
    ids[f].clear();
    id_weights[f].clear();
  }
  unique_ids.resize(s.num_pull_tables());
}

void Batch::Set(int i, const Sample& sample) {
  const int nl = schema.num_labels;
  std::copy_n(sample.labels.begin(), nl, label.begin() + static_cast<size_t>(i) * nl);
  weight[i] = sample.weight;
  if (sample.weight == 0) ++bad_count;
  std::copy(sample.dense.begin(), sample.dense.end(),
            dense.begin() + static_cast<size_t>(i) * schema.num_dense);
  if (i == 0) {
    for (auto& f : ids) f.clear();
    for (auto& f : id_weights) f.clear();
  }
  for (int f = 0; f < schema.num_categorical; ++f) {
    auto& out = ids[f];
    out.insert(out.end(), sample.cat.begin() + sample.offsets[f],
               sample.cat.begin() + sample.offsets[f + 1]);
    offsets[f][i + 1] = static_cast<int64_t>(out.size());
    if (schema.weighted_of(f)) {
      auto& w = id_weights[f];
      if (sample.id_weights.empty()) {
        w.resize(out.size(), 1.0f);  // a source without weights: all 1
      } else {
        w.insert(w.end(), sample.id_weights.begin() + sample.offsets[f],
                 sample.id_weights.begin() + sample.offsets[f + 1]);
      }
    }
  }
}

void Batch::Get(int i, Sample* out) const {
  const size_t nl = schema.num_labels;
  out->labels.assign(label.begin() + i * nl, label.begin() + (i + 1) * nl);
  out->weight = weight[i];
  const size_t nd = schema.num_dense;
  out->dense.assign(dense.begin() + i * nd, dense.begin() + (i + 1) * nd);
  out->cat.clear();
  out->id_weights.clear();
  out->offsets.assign(1, 0);
  const bool weighted = schema.any_weighted();
  for (int f = 0; f < schema.num_categorical; ++f) {
    out->cat.insert(out->cat.end(), ids[f].begin() + offsets[f][i],
                    ids[f].begin() + offsets[f][i + 1]);
    if (weighted && schema.weighted_of(f)) {
      out->id_weights.insert(out->id_weights.end(), id_weights[f].begin() + offsets[f][i],
                             id_weights[f].begin() + offsets[f][i + 1]);
    } else if (weighted) {
      out->id_weights.resize(out->cat.size(), 1.0f);
    }
    out->offsets.push_back(static_cast<uint32_t>(out->cat.size()));
  }
}

void Batch::Dedup() {
  const int nc = schema.num_categorical;
  const int nt = schema.num_tables();
  for (int t = 0; t < nt; ++t) unique_ids[t].clear();  // keeps capacity
  // Tables are numbered by first use, so a table's features are visited in feature order.
  for (int t = 0; t < nt; ++t) {
    size_t lookups = 0;
    for (int f = 0; f < nc; ++f) {
      if (schema.table_of(f) == t) lookups += ids[f].size();
    }
    index_.Reset(static_cast<int64_t>(lookups));
    auto& uniq = unique_ids[t];
    for (int f = 0; f < nc; ++f) {
      if (schema.table_of(f) != t) continue;
      const auto& in = ids[f];
      auto& inv = inverse[f];
      inv.resize(in.size());
      index_.InsertAll(in.data(), in.size(), [&](size_t k, uint32_t pos, bool inserted) {
        if (inserted) uniq.push_back(in[k]);
        inv[k] = pos;
      });
    }
  }
  if (schema.wide) {
    for (int t = 0; t < nt; ++t) unique_ids[nt + t] = unique_ids[t];
  }
}

}  // namespace tandem::data
