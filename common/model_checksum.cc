#include "common/model_checksum.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <vector>

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

template <typename T>
char* PutAt(char* p, T v) {
  std::memcpy(p, &v, sizeof(v));
  return p + sizeof(v);
}

char* PutFloatsAt(char* p, std::span<const float> v) {
  if (!v.empty()) std::memcpy(p, v.data(), v.size_bytes());
  return p + v.size_bytes();
}

// Row and counter records are hashed on every apply of a shard (twice per row), so a record is
// laid out with fixed-offset copies into a stack buffer (a per-thread one for rows too wide for
// it) instead of appends to a string (a dim-16 Adagrad record: about 60 ns to 30 ns each).
XXH128_hash_t RowRecordHash(uint32_t table, uint64_t id, std::span<const float> embedding,
                            std::span<const float> state, int64_t last_updated_step,
                            uint64_t frequency) {
  const size_t size = 1 + 4 + 8 + 4 + embedding.size_bytes() + 4 + state.size_bytes() + 8 + 8;
  char stack[1024];
  thread_local std::vector<char> wide;
  char* const record = size <= sizeof(stack) ? stack : (wide.resize(size), wide.data());
  char* p = PutAt<uint8_t>(record, 2);
  p = PutAt<uint32_t>(p, table);
  p = PutAt<uint64_t>(p, id);
  p = PutAt<uint32_t>(p, static_cast<uint32_t>(embedding.size()));
  p = PutFloatsAt(p, embedding);
  p = PutAt<uint32_t>(p, static_cast<uint32_t>(state.size()));
  p = PutFloatsAt(p, state);
  p = PutAt<int64_t>(p, last_updated_step);
  p = PutAt<uint64_t>(p, frequency);
  return XXH3_128bits(record, static_cast<size_t>(p - record));
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
