// model_checksum (DESIGN §12): hex of the 128-bit sum (mod 2^128) of XXH3-128 hashes of
// canonical little-endian records, one per dense tensor, per materialised row and per admission
// counter. Summing makes the value independent of storage and visiting order, so shards,
// checkpoints and replicas can each contribute their part.
//
// Canonical records (every integer little-endian, every float its IEEE-754 bits):
//   dense tensor:  u8 kind=1, u32 name length, name bytes, u32 rank, rank x i64 dims,
//                  u64 value count, values (f32), u64 slot count, slot values (f32)
//   embedding row: u8 kind=2, u32 table, u64 id, u32 dim, dim x f32 embedding,
//                  u32 state count, state f32, i64 last-updated step, u64 frequency
//   admission:     u8 kind=3, u32 table, u64 id, u64 count
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tandem {

// Requires external synchronization. Combine partial sums with Merge.
class ModelChecksum {
 public:
  // A partial sum carried over the wire as its two halves (a shard's part, PROTOCOLS §4).
  static ModelChecksum FromParts(uint64_t high, uint64_t low);

  void AddDenseTensor(std::string_view name, std::span<const int64_t> shape,
                      std::span<const float> values, std::span<const float> optimizer_slots);
  void AddRow(uint32_t table, uint64_t id, std::span<const float> embedding,
              std::span<const float> state, int64_t last_updated_step, uint64_t frequency);
  void AddAdmissionCounter(uint32_t table, uint64_t id, uint64_t count);
  // The inverses of AddRow / AddAdmissionCounter: a sum kept up to date as rows change (a
  // shard's store, issue 21) takes out a row's old record and adds its new one.
  void SubtractRow(uint32_t table, uint64_t id, std::span<const float> embedding,
                   std::span<const float> state, int64_t last_updated_step, uint64_t frequency);
  void SubtractAdmissionCounter(uint32_t table, uint64_t id, uint64_t count);
  void Merge(const ModelChecksum& other);
  // Merge's inverse: this - other (mod 2^128).
  void Unmerge(const ModelChecksum& other);
  bool operator==(const ModelChecksum& other) const = default;

  std::string Hex() const;  // 32 lowercase hex chars, high half first
  uint64_t high() const { return hi_; }
  uint64_t low() const { return lo_; }

 private:
  void AddRecord(const std::string& bytes);
  void AddHash(uint64_t high, uint64_t low, bool subtract);
  uint64_t hi_ = 0;
  uint64_t lo_ = 0;
};

}  // namespace tandem
