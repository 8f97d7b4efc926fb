#include "common/model_checksum.h"

#include <bit>
#include <cstdio>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tandem {
namespace {

static_assert(std::endian::native == std::endian::little, "canonical records are little-endian");

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void PutFloats(std::string* out, std::span<const float> v) {
  out->append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
}

}  // namespace

ModelChecksum ModelChecksum::FromParts(uint64_t high, uint64_t low) {
  ModelChecksum sum;
  sum.hi_ = high;
  sum.lo_ = low;
  return sum;
}

void ModelChecksum::AddRecord(const std::string& bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  const uint64_t lo = lo_ + h.low64;
  hi_ += h.high64 + (lo < lo_ ? 1 : 0);  // carry: the sum is taken mod 2^128
  lo_ = lo;
}

void ModelChecksum::AddDenseTensor(std::string_view name, std::span<const int64_t> shape,
                                   std::span<const float> values,
                                   std::span<const float> optimizer_slots) {
  std::string r;
  Put<uint8_t>(&r, 1);
  Put<uint32_t>(&r, static_cast<uint32_t>(name.size()));
  r.append(name);
  Put<uint32_t>(&r, static_cast<uint32_t>(shape.size()));
  for (int64_t d : shape) Put<int64_t>(&r, d);
  Put<uint64_t>(&r, values.size());
  PutFloats(&r, values);
  Put<uint64_t>(&r, optimizer_slots.size());
  PutFloats(&r, optimizer_slots);
  AddRecord(r);
}

void ModelChecksum::AddRow(uint32_t table, uint64_t id, std::span<const float> embedding,
                           std::span<const float> state, int64_t last_updated_step,
                           uint64_t frequency) {
  std::string r;
  Put<uint8_t>(&r, 2);
  Put<uint32_t>(&r, table);
  Put<uint64_t>(&r, id);
  Put<uint32_t>(&r, static_cast<uint32_t>(embedding.size()));
  PutFloats(&r, embedding);
  Put<uint32_t>(&r, static_cast<uint32_t>(state.size()));
  PutFloats(&r, state);
  Put<int64_t>(&r, last_updated_step);
  Put<uint64_t>(&r, frequency);
  AddRecord(r);
}

void ModelChecksum::AddAdmissionCounter(uint32_t table, uint64_t id, uint64_t count) {
  std::string r;
  Put<uint8_t>(&r, 3);
  Put<uint32_t>(&r, table);
  Put<uint64_t>(&r, id);
  Put<uint64_t>(&r, count);
  AddRecord(r);
}

void ModelChecksum::Merge(const ModelChecksum& other) {
  const uint64_t lo = lo_ + other.lo_;
  hi_ += other.hi_ + (lo < lo_ ? 1 : 0);
  lo_ = lo;
}

std::string ModelChecksum::Hex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi_),
                static_cast<unsigned long long>(lo_));
  return buf;
}

}  // namespace tandem
