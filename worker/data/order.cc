#include "worker/data/order.h"

#include <algorithm>
#include <bit>

#include "common/embedding/initializer.h"

namespace tandem::data {
namespace {

// Philox stream tags keep the order's randomness apart from other uses of the same seed.
constexpr uint32_t kOrderTag = 0x6f726472;  // "ordr"

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer: the Feistel round function
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

FeistelPermutation::FeistelPermutation(uint64_t n, uint64_t seed, uint64_t epoch) : n_(n) {
  const int bits = n <= 2 ? 2 : std::bit_width(n - 1);
  half_bits_ = (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  const std::array<uint32_t, 2> key = {static_cast<uint32_t>(seed),
                                       static_cast<uint32_t>(seed >> 32)};
  for (uint32_t i = 0; i < kRounds / 2; ++i) {
    const auto w = embedding::Philox4x32(
        {static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32), kOrderTag, i}, key);
    keys_[2 * i] = uint64_t{w[0]} << 32 | w[1];
    keys_[2 * i + 1] = uint64_t{w[2]} << 32 | w[3];
  }
}

uint64_t FeistelPermutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t next = left ^ (Mix(right ^ keys_[r]) & half_mask_);
    left = right;
    right = next;
  }
  return left << half_bits_ | right;
}

uint64_t FeistelPermutation::operator()(uint64_t i) const {
  // Cycle walking: the orbit of i < n under Encrypt returns to [0, n), so this terminates and
  // stays a bijection on [0, n).
  uint64_t y = Encrypt(i);
  while (y >= n_) y = Encrypt(y);
  return y;
}

Order Order::Permuted(int64_t n, uint64_t seed) {
  Order o;
  o.n_ = n;
  o.seed_ = seed;
  return o;
}

Order Order::BlockShuffled(std::vector<int64_t> block_sizes, uint64_t seed) {
  Order o;
  o.seed_ = seed;
  o.blocks_ = true;
  o.block_size_ = std::move(block_sizes);
  o.block_start_.reserve(o.block_size_.size());
  for (int64_t size : o.block_size_) {
    o.block_start_.push_back(o.n_);
    o.n_ += size;
  }
  return o;
}

void Order::EnterEpoch(int64_t epoch) {
  epoch_ = epoch;
  const uint64_t count = blocks_ ? block_size_.size() : static_cast<uint64_t>(n_);
  perm_ = FeistelPermutation(count, seed_, static_cast<uint64_t>(epoch));
  if (!blocks_) return;
  // O(blocks) once per epoch: the blocks' order and where each starts in it.
  epoch_block_.resize(count);
  epoch_cum_.resize(count);
  int64_t cum = 0;
  for (uint64_t k = 0; k < count; ++k) {
    epoch_block_[k] = static_cast<int64_t>(perm_(k));
    epoch_cum_[k] = cum;
    cum += block_size_[epoch_block_[k]];
  }
}

int64_t Order::RecordAt(int64_t position) {
  const int64_t epoch = position / n_, i = position % n_;
  if (epoch != epoch_) EnterEpoch(epoch);
  if (!blocks_) return static_cast<int64_t>(perm_(static_cast<uint64_t>(i)));
  const auto it = std::upper_bound(epoch_cum_.begin(), epoch_cum_.end(), i) - 1;
  const int64_t block = epoch_block_[it - epoch_cum_.begin()];
  return block_start_[block] + (i - *it);
}

}  // namespace tandem::data
