#include "server/ps/row_cache.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/check.h"

namespace tandem::ps::internal {
namespace {

// Chunks are at most a sixteenth of the stripe's budget within these bounds (rounded down to a
// power of two slots): small enough that a class holding one chunk wastes little, large enough
// that allocations are rare.
constexpr uint64_t kMinChunkBytes = 4 << 10;
constexpr uint64_t kMaxChunkBytes = 64 << 10;
constexpr size_t kInitialIndexSize = 64;  // a power of two
// Victims taken per eviction round, so their writebacks reach RocksDB in one WriteBatch and
// the next inserts find free slots.
constexpr int kEvictBatch = 16;

}  // namespace

RowCache::RowCache(Options options) : options_(std::move(options)) {
  TANDEM_CHECK(options_.row_bytes.size() <= 0x10000) << "RowCache: more than 65536 tables";
  const uint64_t target =
      options_.budget_bytes == 0
          ? kMaxChunkBytes
          : std::clamp<uint64_t>(options_.budget_bytes / 16, kMinChunkBytes, kMaxChunkBytes);
  for (uint32_t bytes : options_.row_bytes) {
    auto same = [bytes](const SlabClass& c) { return c.row_bytes == bytes; };
    auto it = std::find_if(classes_.begin(), classes_.end(), same);
    class_of_table_.push_back(static_cast<uint32_t>(it - classes_.begin()));
    if (it != classes_.end()) continue;
    TANDEM_CHECK(bytes != 0 && classes_.size() != kMaxClasses) << "RowCache: bad row sizes";
    SlabClass c;
    c.row_bytes = bytes;
    c.stride = (bytes + 7) / 8 * 8;
    const uint64_t per_slot = c.stride + sizeof(uint64_t) + sizeof(uint16_t) + 1;
    // A power of two, so that a slot's chunk and position are a shift and a mask.
    const uint64_t fit = std::max<uint64_t>(1, target / per_slot);
    while ((uint64_t{1} << (c.chunk_shift + 1)) <= fit) ++c.chunk_shift;
    c.rows_per_chunk = 1u << c.chunk_shift;
    c.ids_offset = size_t{c.rows_per_chunk} * c.stride;
    c.tables_offset = c.ids_offset + size_t{c.rows_per_chunk} * sizeof(uint64_t);
    c.flags_offset = c.tables_offset + size_t{c.rows_per_chunk} * sizeof(uint16_t);
    c.chunk_bytes = c.flags_offset + c.rows_per_chunk;
    classes_.push_back(std::move(c));
  }
  if (classes_.empty()) classes_.emplace_back();  // keeps the CLOCK hand's class valid
  index_.assign(kInitialIndexSize, IndexEntry{kEmpty, 0});
}

RowCache::~RowCache() = default;

uint8_t* RowCache::Insert(uint32_t table, uint64_t id, uint64_t hash, bool dirty) {
  EnsureIndexRoom();
  const uint32_t cls = class_of_table_[table];
  const uint32_t slot = AllocSlot(cls);
  if (slot == kNoSlot) return nullptr;
  SlabClass& c = classes_[cls];
  *c.id(slot) = id;
  *c.table(slot) = static_cast<uint16_t>(table);
  // Born referenced: a row just read or written is likely to be touched again soon.
  *c.flags(slot) = kLive | kRef | (dirty ? kDirty : 0);
  if (dirty) dirty_bytes_ += c.row_bytes;
  IndexInsert(cls << kClassShift | slot, static_cast<uint32_t>(hash));
  ++rows_;
  return c.row(slot);
}

bool RowCache::Erase(uint32_t table, uint64_t id, uint64_t hash) {
  size_t pos = FindPos(table, id, static_cast<uint32_t>(hash));
  if (pos == kNoPos) return false;
  const uint32_t cls = index_[pos].ref >> kClassShift;
  const uint32_t slot = index_[pos].ref & kSlotMask;
  IndexEraseAt(pos);
  SlabClass& c = classes_[cls];
  if (*c.flags(slot) & kDirty) dirty_bytes_ -= c.row_bytes;
  FreeSlot(c, slot);
  // Hand memory back after mass erasure (TTL GC); two chunks of slack avoid churning.
  if (c.free_count >= 2 * c.rows_per_chunk) ReleaseLastChunk(cls);
  return true;
}

// A checkpoint after a few changed rows must not cost a visit of every cached row: the flags of
// a chunk are contiguous, so they are tested eight at a time and a word without a dirty bit is
// skipped whole.
void RowCache::TakeDirty(const RowFn& fn) { VisitDirty(fn, /*clean=*/true); }

void RowCache::ForEachDirty(const RowFn& fn) { VisitDirty(fn, /*clean=*/false); }

uint64_t RowCache::WriteBackDirty() {
  uint64_t rows = 0;
  VisitDirty(
      [&](uint32_t table, uint64_t id, const uint8_t* row, uint32_t n) {
        options_.writeback(table, id, row, n);
        ++rows;
      },
      /*clean=*/true);
  written_ahead_ += rows;
  return rows;
}

void RowCache::VisitDirty(const RowFn& fn, bool clean) {
  constexpr uint64_t kDirtyBits = 0x0101010101010101ull * kDirty;
  for (SlabClass& c : classes_) {
    for (size_t k = 0; k < c.chunks.size(); ++k) {
      const uint32_t first = static_cast<uint32_t>(k) << c.chunk_shift;
      const uint8_t* flags = c.flags(first);
      for (uint32_t w = 0; w < c.rows_per_chunk; w += 8) {
        const uint32_t len = std::min<uint32_t>(8, c.rows_per_chunk - w);
        uint64_t word = 0;
        std::memcpy(&word, flags + w, len);
        if ((word & kDirtyBits) == 0) continue;
        for (uint32_t s = first + w; s < first + w + len; ++s) {
          uint8_t& f = *c.flags(s);
          if ((f & (kLive | kDirty)) != (kLive | kDirty)) continue;
          fn(*c.table(s), *c.id(s), c.row(s), c.row_bytes);
          if (!clean) continue;
          NoteChanged(KeyHash(*c.table(s), *c.id(s)));
          f &= ~kDirty;
          dirty_bytes_ -= c.row_bytes;
        }
      }
    }
  }
}

// ---- StagedRows.

uint64_t StagedRows::Put(uint32_t table, uint64_t id, uint64_t hash, const uint8_t* row,
                         uint32_t bytes) {
  const uint32_t tag = static_cast<uint32_t>(hash);
  const size_t pos = FindPos(table, id, tag);
  if (pos != kNoPos) {
    Entry& e = entries_[index_[pos]];
    // A table's rows all have one size, so the old copy's bytes take the new one.
    std::memcpy(e.row, row, bytes);
    if (e.live) return 0;
    e.live = true;
    ++live_;
    return bytes;
  }
  if ((entries_.size() + 1) * 2 > index_.size()) Grow();
  uint8_t* copy = Allocate(bytes);
  std::memcpy(copy, row, bytes);
  entries_.push_back(Entry{id, table, bytes, tag, true, copy});
  const size_t mask = index_.size() - 1;
  size_t p = tag & mask;
  while (index_[p] != kEmpty) p = (p + 1) & mask;
  index_[p] = static_cast<uint32_t>(entries_.size() - 1);
  ++live_;
  return bytes;
}

void StagedRows::Erase(uint32_t table, uint64_t id, uint64_t hash) {
  const size_t pos = FindPos(table, id, static_cast<uint32_t>(hash));
  if (pos == kNoPos) return;
  Entry& e = entries_[index_[pos]];
  if (!e.live) return;
  e.live = false;
  --live_;
}

void StagedRows::Clear(uint64_t keep_bytes) {
  entries_.clear();
  // Entries and index sized for about the rows the kept blocks hold (32 and 8 bytes a row
  // against 64 or more).
  if (entries_.capacity() * sizeof(Entry) > keep_bytes / 2) std::vector<Entry>().swap(entries_);
  if (index_.size() * sizeof(uint32_t) > keep_bytes / 4) {
    std::vector<uint32_t>().swap(index_);  // Put grows it again (Grow)
  } else {
    std::fill(index_.begin(), index_.end(), kEmpty);
  }
  uint64_t kept = 0;
  size_t keep = 0;
  while (keep < blocks_.size() && kept + block_sizes_[keep] <= keep_bytes)
    kept += block_sizes_[keep++];
  blocks_.resize(keep);
  block_sizes_.resize(keep);
  bytes_ = kept;
  blocks_in_use_ = 0;
  block_used_ = 0;
  live_ = 0;
}

uint8_t* StagedRows::Allocate(uint32_t bytes) {
  const size_t aligned = (size_t{bytes} + 7) / 8 * 8;
  if (blocks_in_use_ == 0 || block_used_ + aligned > block_sizes_[blocks_in_use_ - 1]) {
    // A row larger than a block (a very wide table) gets a block of its own size.
    const size_t size = std::max(kBlockBytes, aligned);
    if (blocks_in_use_ == blocks_.size()) {
      blocks_.emplace_back();
      block_sizes_.push_back(0);
    }
    if (block_sizes_[blocks_in_use_] < size) {
      bytes_ += size - block_sizes_[blocks_in_use_];
      blocks_[blocks_in_use_] = std::make_unique_for_overwrite<uint8_t[]>(size);
      block_sizes_[blocks_in_use_] = size;
    }
    ++blocks_in_use_;
    block_used_ = 0;
  }
  uint8_t* at = blocks_[blocks_in_use_ - 1].get() + block_used_;
  block_used_ += aligned;
  return at;
}

void StagedRows::Grow() {
  index_.assign(std::max<size_t>(64, index_.size() * 2), kEmpty);
  const size_t mask = index_.size() - 1;
  for (size_t k = 0; k < entries_.size(); ++k) {
    size_t p = entries_[k].tag & mask;
    while (index_[p] != kEmpty) p = (p + 1) & mask;
    index_[p] = static_cast<uint32_t>(k);
  }
}

// ---- Index: linear probing with backward-shift deletion (no tombstones), load <= 3/4.

void RowCache::IndexInsert(uint32_t ref, uint32_t tag) {
  const size_t mask = index_.size() - 1;
  size_t pos = tag & mask;
  while (index_[pos].ref != kEmpty) pos = (pos + 1) & mask;
  index_[pos] = IndexEntry{ref, tag};
  ++index_count_;
}

void RowCache::IndexEraseAt(size_t pos) {
  const size_t mask = index_.size() - 1;
  size_t hole = pos;
  for (size_t j = (pos + 1) & mask; index_[j].ref != kEmpty; j = (j + 1) & mask) {
    const size_t home = index_[j].tag & mask;
    // Entry j may fill the hole if the hole lies on its probe path (between home and j).
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      index_[hole] = index_[j];
      hole = j;
    }
  }
  index_[hole].ref = kEmpty;
  --index_count_;
}

void RowCache::GrowIndex() {
  std::vector<IndexEntry> old(index_.size() * 2, IndexEntry{kEmpty, 0});
  old.swap(index_);
  index_count_ = 0;
  for (const IndexEntry& e : old) {
    if (e.ref != kEmpty) IndexInsert(e.ref, e.tag);
  }
}

void RowCache::EnsureIndexRoom() {
  while ((index_count_ + 1) * 4 > index_.size() * 3) {
    // Growing adds index_.size() entries; when that does not fit, a row makes way instead.
    if (rows_ == 0 || Fits(index_.size() * sizeof(IndexEntry))) {
      GrowIndex();
    } else {
      EvictOne();
    }
  }
}

// ---- Slabs and CLOCK eviction.

bool RowCache::Fits(uint64_t extra_bytes) const {
  return options_.budget_bytes == 0 || bytes_used() + extra_bytes <= options_.budget_bytes;
}

uint32_t RowCache::AllocSlot(uint32_t cls) {
  for (;;) {
    SlabClass& c = classes_[cls];
    if (c.free_head != kNoSlot) return c.PopFree();
    if (Fits(c.chunk_bytes)) {
      if (!AddChunk(cls)) return kNoSlot;
      continue;
    }
    // Over budget: first take back a chunk that another class no longer needs.
    bool released = false;
    for (uint32_t u = 0; u < classes_.size() && !released; ++u) {
      if (classes_[u].capacity() > 0 && classes_[u].free_count >= classes_[u].rows_per_chunk) {
        ReleaseLastChunk(u);
        released = true;
      }
    }
    if (released) continue;
    // Nothing left to evict: every class may hold one chunk whatever the budget.
    if (rows_ == 0) {
      if (!AddChunk(cls)) return kNoSlot;
      continue;
    }
    EvictBatch();
  }
}

bool RowCache::AddChunk(uint32_t cls) {
  SlabClass& c = classes_[cls];
  if (uint64_t{c.capacity()} + c.rows_per_chunk > kMaxSlotsPerClass) return false;
  c.chunks.push_back(std::make_unique_for_overwrite<uint8_t[]>(c.chunk_bytes));
  std::memset(c.chunks.back().get() + c.flags_offset, 0, c.rows_per_chunk);
  slab_bytes_ += c.chunk_bytes;
  // Pushed in reverse so that slots are handed out in address order.
  const uint32_t base = c.capacity() - c.rows_per_chunk;
  for (uint32_t i = c.rows_per_chunk; i-- > 0;) c.PushFree(base + i);
  return true;
}

void RowCache::FreeSlot(SlabClass& c, uint32_t slot) {
  *c.flags(slot) = 0;
  c.PushFree(slot);
  --rows_;
}

void RowCache::EvictOne() {
  for (;;) {
    SlabClass& c = classes_[hand_class_];
    if (hand_slot_ >= c.capacity()) {
      hand_class_ = (hand_class_ + 1) % static_cast<uint32_t>(classes_.size());
      hand_slot_ = 0;
      continue;
    }
    const uint32_t slot = hand_slot_++;
    uint8_t& f = *c.flags(slot);
    if (!(f & kLive)) continue;
    if (f & kRef) {  // second chance
      f &= ~kRef;
      continue;
    }
    const uint32_t table = *c.table(slot);
    const uint64_t id = *c.id(slot);
    if (f & kDirty) {
      options_.writeback(table, id, c.row(slot), c.row_bytes);
      if (defer_changes_)
        deferred_changes_.push_back(KeyHash(table, id));
      else
        NoteChanged(KeyHash(table, id));
      ++writebacks_;
      dirty_bytes_ -= c.row_bytes;
    }
    IndexEraseAt(FindPos(table, id, static_cast<uint32_t>(KeyHash(table, id))));
    FreeSlot(c, slot);
    ++evictions_;
    return;
  }
}

void RowCache::EvictBatch() {
  for (int k = 0; k < kEvictBatch && rows_ > 0; ++k) EvictOne();
}

void RowCache::ReleaseLastChunk(uint32_t cls) {
  SlabClass& c = classes_[cls];
  const uint32_t base = c.capacity() - c.rows_per_chunk;
  // Keep only the free slots below the last chunk; they receive its live rows.
  uint32_t head = kNoSlot, count = 0;
  for (uint32_t s = c.free_head; s != kNoSlot;) {
    const uint32_t next = c.NextFree(s);
    if (s < base) {
      std::memcpy(c.row(s), &head, sizeof(head));
      head = s;
      ++count;
    }
    s = next;
  }
  c.free_head = head;
  c.free_count = count;
  for (uint32_t s = base; s < base + c.rows_per_chunk; ++s) {
    if (!(*c.flags(s) & kLive)) continue;
    TANDEM_CHECK(c.free_head != kNoSlot) << "RowCache: ReleaseLastChunk without enough free slots";
    const uint32_t dst = c.PopFree();
    std::memcpy(c.row(dst), c.row(s), c.row_bytes);
    *c.id(dst) = *c.id(s);
    *c.table(dst) = *c.table(s);
    *c.flags(dst) = *c.flags(s);
    const uint32_t tag = static_cast<uint32_t>(KeyHash(*c.table(s), *c.id(s)));
    index_[FindPos(*c.table(s), *c.id(s), tag)].ref = cls << kClassShift | dst;
  }
  c.chunks.pop_back();
  slab_bytes_ -= c.chunk_bytes;
}

// ---- CounterCache.

CounterCache::CounterCache() : entries_(16) {}

CounterCache::Entry* CounterCache::Find(uint32_t table, uint64_t id, uint64_t hash) {
  const size_t mask = entries_.size() - 1;
  for (size_t pos = hash & mask;; pos = (pos + 1) & mask) {
    Entry& e = entries_[pos];
    if (e.state == kEmptyEntry) return nullptr;
    if (e.id == id && e.table == table) return &e;
  }
}

CounterCache::Entry* CounterCache::Insert(uint32_t table, uint64_t id, uint64_t hash,
                                          uint64_t count, uint32_t state) {
  if ((count_ + 1) * 4 > entries_.size() * 3) Grow();
  const size_t mask = entries_.size() - 1;
  size_t pos = hash & mask;
  while (entries_[pos].state != kEmptyEntry) pos = (pos + 1) & mask;
  entries_[pos] = Entry{id, table, state, count};
  ++count_;
  return &entries_[pos];
}

void CounterCache::ForEach(const std::function<void(const Entry&)>& fn) const {
  for (const Entry& e : entries_) {
    if (e.state != kEmptyEntry) fn(e);
  }
}

void CounterCache::Clear() {
  std::vector<Entry>(16).swap(entries_);
  count_ = 0;
}

void CounterCache::Grow() {
  std::vector<Entry> old(entries_.size() * 2);
  old.swap(entries_);
  count_ = 0;
  for (const Entry& e : old) {
    if (e.state != kEmptyEntry) Insert(e.table, e.id, KeyHash(e.table, e.id), e.count, e.state);
  }
}

}  // namespace tandem::ps::internal
