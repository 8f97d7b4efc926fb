// FlatIdIndex: maps 64-bit ids to dense indices 0..n-1 in insertion order, with open addressing
// in one array, so merging or de-duplicating ids allocates nothing per id. Reused across calls
// (Clear keeps the capacity). Requires external synchronization.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace tandem {

class FlatIdIndex {
 public:
  static constexpr uint32_t kAbsent = 0xffffffffu;

  // Prepares for up to `n` distinct ids and forgets the previous ones. A slot belongs to the
  // current ids only if it carries the current generation, so forgetting writes nothing (a
  // 64k-id pull's index is 2 MiB) but once every 2^32 resets.
  void Reset(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    if (slots_.size() < cap) {
      slots_.assign(cap, Slot{});
      generation_ = 0;
    }
    mask_ = slots_.size() - 1;
    if (++generation_ == 0) {
      for (auto& s : slots_) s.generation = 0;
      generation_ = 1;
    }
    size_ = 0;
  }
  // Returns {index, inserted}: the id's dense index, new ids getting the next one.
  // REQUIRES: fewer than the Reset() bound of distinct ids.
  std::pair<uint32_t, bool> Insert(uint64_t id) {
    for (size_t i = Mix(id) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].generation != generation_) {
        slots_[i] = {id, size_, generation_};
        return {size_++, true};
      }
      if (slots_[i].id == id) return {slots_[i].index, false};
    }
  }
  // Brings the id's first slot toward the cache: a loop over many ids calls it a few ids ahead
  // of Insert or Find, whose probes otherwise wait on a cache miss each (a 64k-id pull's index
  // is 2 MiB).
  void Prefetch(uint64_t id) const { __builtin_prefetch(&slots_[Mix(id) & mask_]); }
  // Insert of every id of `ids` in order, prefetching ahead; on_each(position, index, inserted).
  template <typename Fn>
  void InsertAll(const uint64_t* ids, size_t n, Fn&& on_each) {
    constexpr size_t kAhead = 16;
    for (size_t j = 0; j < n; ++j) {
      if (j + kAhead < n) Prefetch(ids[j + kAhead]);
      auto [index, inserted] = Insert(ids[j]);
      on_each(j, index, inserted);
    }
  }
  uint32_t Find(uint64_t id) const {
    if (slots_.empty()) return kAbsent;
    for (size_t i = Mix(id) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].generation != generation_) return kAbsent;
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
    uint64_t id = 0;
    uint32_t index = 0;
    uint32_t generation = 0;  // 0: never used
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  uint32_t size_ = 0;
  uint32_t generation_ = 0;
};

}  // namespace tandem
