// The global record order of DESIGN §2. Global position P counts records (or lines) from the
// start of epoch 0 across epochs; epoch e = P / N holds a fresh order that is a pure function of
// (seed, e). Global batch s is positions [s*M*b, (s+1)*M*b) and worker r of M takes
// [s*M*b + r*b, s*M*b + (r+1)*b), so what M workers see together does not depend on M, and a
// reader position is one number.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace tandem::data {

// A keyed bijection on [0, n): a 4-round balanced Feistel network on the smallest even-bit
// domain 2^(2h) >= n, cycle-walking values that land outside [0, n) (at most ~4 steps on
// average since 2^(2h) < 4n). Round keys come from Philox4x32 of (seed, epoch). O(1) per call.
class FeistelPermutation {
 public:
  FeistelPermutation(uint64_t n, uint64_t seed, uint64_t epoch);
  uint64_t operator()(uint64_t i) const;  // REQUIRES: i < n
  uint64_t size() const { return n_; }

 private:
  uint64_t Encrypt(uint64_t x) const;

  static constexpr int kRounds = 4;
  uint64_t n_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
  std::array<uint64_t, kRounds> keys_{};
};

// Maps a global position to a record index (file order). Thread-compatible: it caches the
// current epoch's permutation.
class Order {
 public:
  // Seekable sources (binary files, the generator): a full permutation of [0, n) per epoch.
  static Order Permuted(int64_t n, uint64_t seed);
  // Text: blocks of consecutive lines (sizes in file order) are shuffled per epoch; lines
  // within a block keep file order, so reading stays sequential.
  static Order BlockShuffled(std::vector<int64_t> block_sizes, uint64_t seed);

  int64_t num_records() const { return n_; }  // N, records per epoch
  int64_t RecordAt(int64_t position);         // REQUIRES: position >= 0, N > 0

 private:
  Order() = default;
  void EnterEpoch(int64_t epoch);

  int64_t n_ = 0;
  uint64_t seed_ = 0;
  bool blocks_ = false;
  std::vector<int64_t> block_start_;  // first record of block k, file order
  std::vector<int64_t> block_size_;
  int64_t epoch_ = -1;
  FeistelPermutation perm_{1, 0, 0};
  std::vector<int64_t> epoch_block_;  // blocks in this epoch's order
  std::vector<int64_t> epoch_cum_;    // first position (within the epoch) of each of them
};

// First global position of rank `rank`'s slice of global step `step` (world M, batch b per
// worker), counted from `base` (the position of step 0; a checkpoint stores it).
inline int64_t SlicePosition(int64_t base, int64_t step, int world, int rank, int batch) {
  return base + (step * world + rank) * static_cast<int64_t>(batch);
}

}  // namespace tandem::data
