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

void ModelChecksum::AddHash(uint64_t high, uint64_t low, bool subtract) {
  if (subtract) {  // adding the two's complement of (high, low) mod 2^128
    low = ~low + 1;
    high = ~high + (low == 0 ? 1 : 0);
  }
  const uint64_t lo = lo_ + low;
  hi_ += high + (lo < lo_ ? 1 : 0);  // carry: the sum is taken mod 2^128
  lo_ = lo;
}

void ModelChecksum::AddRecord(const std::string& bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  AddHash(h.high64, h.low64, false);
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

namespace {

// Row and counter records are hashed on every apply of a shard (twice per row), so they are
// laid out in a per-thread buffer instead of a fresh string.
XXH128_hash_t RowRecordHash(uint32_t table, uint64_t id, std::span<const float> embedding,
                            std::span<const float> state, int64_t last_updated_step,
                            uint64_t frequency) {
  thread_local std::string r;
  r.clear();
  Put<uint8_t>(&r, 2);
  Put<uint32_t>(&r, table);
  Put<uint64_t>(&r, id);
  Put<uint32_t>(&r, static_cast<uint32_t>(embedding.size()));
  PutFloats(&r, embedding);
  Put<uint32_t>(&r, static_cast<uint32_t>(state.size()));
  PutFloats(&r, state);
  Put<int64_t>(&r, last_updated_step);
  Put<uint64_t>(&r, frequency);
  return XXH3_128bits(r.data(), r.size());
}

XXH128_hash_t CounterRecordHash(uint32_t table, uint64_t id, uint64_t count) {
  char r[1 + 4 + 8 + 8];
  r[0] = 3;
  std::memcpy(r + 1, &table, 4);
  std::memcpy(r + 5, &id, 8);
  std::memcpy(r + 13, &count, 8);
  return XXH3_128bits(r, sizeof(r));
}

}  // namespace

void ModelChecksum::AddRow(uint32_t table, uint64_t id, std::span<const float> embedding,
                           std::span<const float> state, int64_t last_updated_step,
                           uint64_t frequency) {
  const XXH128_hash_t h = RowRecordHash(table, id, embedding, state, last_updated_step, frequency);
  AddHash(h.high64, h.low64, false);
}

void ModelChecksum::SubtractRow(uint32_t table, uint64_t id, std::span<const float> embedding,
                                std::span<const float> state, int64_t last_updated_step,
                                uint64_t frequency) {
  const XXH128_hash_t h = RowRecordHash(table, id, embedding, state, last_updated_step, frequency);
  AddHash(h.high64, h.low64, true);
}

void ModelChecksum::AddAdmissionCounter(uint32_t table, uint64_t id, uint64_t count) {
  const XXH128_hash_t h = CounterRecordHash(table, id, count);
  AddHash(h.high64, h.low64, false);
}

void ModelChecksum::SubtractAdmissionCounter(uint32_t table, uint64_t id, uint64_t count) {
  const XXH128_hash_t h = CounterRecordHash(table, id, count);
  AddHash(h.high64, h.low64, true);
}

void ModelChecksum::Merge(const ModelChecksum& other) { AddHash(other.hi_, other.lo_, false); }

void ModelChecksum::Unmerge(const ModelChecksum& other) { AddHash(other.hi_, other.lo_, true); }

std::string ModelChecksum::Hex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi_),
                static_cast<unsigned long long>(lo_));
  return buf;
}

}  // namespace tandem
