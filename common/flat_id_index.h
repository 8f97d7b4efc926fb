// FlatIdIndex: maps 64-bit ids to dense indices 0..n-1 in insertion order, with open addressing
// in one array, so merging or de-duplicating ids allocates nothing per id. Reused across calls
// (Clear keeps the capacity). Requires external synchronization.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

class FlatIdIndex {
 public:
  static constexpr uint32_t kAbsent = 0xffffffffu;

  // Prepares for up to `n` distinct ids and forgets the previous ones.
  void Reset(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    if (slots_.size() < cap) slots_.resize(cap);
    mask_ = slots_.size() - 1;
    for (auto& s : slots_) s.index = kAbsent;
    size_ = 0;
  }
  // Returns {index, inserted}: the id's dense index, new ids getting the next one.
  // REQUIRES: fewer than the Reset() bound of distinct ids.
  std::pair<uint32_t, bool> Insert(uint64_t id) {
    for (size_t i = Mix(id) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].index == kAbsent) {
        slots_[i] = {id, size_};
        return {size_++, true};
      }
      if (slots_[i].id == id) return {slots_[i].index, false};
    }
  }
  uint32_t Find(uint64_t id) const {
    if (slots_.empty()) return kAbsent;
    for (size_t i = Mix(id) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].index == kAbsent) return kAbsent;
      if (slots_[i].id == id) return slots_[i].index;
    }
  }
  uint32_t size() const { return size_; }

 private:
  static uint64_t Mix(uint64_t x) {  // splitmix64 finalizer: ids are often sequential
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }
  struct Slot {
    uint64_t id;
    uint32_t index;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  uint32_t size_ = 0;
};

}  // namespace tandem
