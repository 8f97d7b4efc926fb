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

void MakeBadSample(Sample* out) {
  out->label = 0;
  out->weight = 0;
  std::fill(out->dense.begin(), out->dense.end(), 0.0f);
  for (size_t f = 0; f < out->cat.size(); ++f) out->cat[f] = MissingId(static_cast<int>(f));
}

void Batch::Reset(const Schema& s, int b) {
  schema = s;
  size = b;
  bad_count = 0;
  label.resize(b);
  weight.resize(b);
  dense.resize(static_cast<size_t>(b) * s.num_dense);
  cat.resize(static_cast<size_t>(b) * s.num_categorical);
  unique_ids.resize(s.num_categorical);
  inverse.resize(s.num_categorical);
  for (auto& inv : inverse) inv.resize(b);
}

void Batch::Set(int i, const Sample& sample) {
  label[i] = sample.label;
  weight[i] = sample.weight;
  if (sample.weight == 0) ++bad_count;
  std::copy(sample.dense.begin(), sample.dense.end(),
            dense.begin() + static_cast<size_t>(i) * schema.num_dense);
  std::copy(sample.cat.begin(), sample.cat.end(),
            cat.begin() + static_cast<size_t>(i) * schema.num_categorical);
}

void Batch::Get(int i, Sample* out) const {
  out->label = label[i];
  out->weight = weight[i];
  const size_t nd = schema.num_dense, nc = schema.num_categorical;
  out->dense.assign(dense.begin() + i * nd, dense.begin() + (i + 1) * nd);
  out->cat.assign(cat.begin() + i * nc, cat.begin() + (i + 1) * nc);
}

void Batch::Dedup() {
  const int nc = schema.num_categorical;
  for (int f = 0; f < nc; ++f) {
    index_.Reset(size);
    auto& ids = unique_ids[f];
    ids.clear();  // keeps capacity
    for (int i = 0; i < size; ++i) {
      const uint64_t id = cat[static_cast<size_t>(i) * nc + f];
      auto [pos, inserted] = index_.Insert(id);
      if (inserted) ids.push_back(id);
      inverse[f][i] = pos;
    }
  }
}

}  // namespace tandem::data
