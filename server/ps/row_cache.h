// The in-memory tier of one EmbeddingStore stripe (DESIGN §3): rows live in slab chunks of
// fixed-size slots, are found through an open-addressing index, and are evicted by CLOCK when
// the stripe's byte budget is reached. Also the stripe's admission-counter cache. Internal to
// server/ps; EmbeddingStore is the public API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

namespace tandem::ps::internal {

// A fixed 64-bit mix of a key (murmur3's fmix64 over table and id; a bijection of id for a fixed
// table). The store picks the stripe from the high half; the caches probe with the low half.
inline uint64_t KeyHash(uint32_t table, uint64_t id) {
  uint64_t x = id ^ (uint64_t{table} * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

// Cached rows of one stripe. Tables whose rows have the same size share one slab class; each
// class owns chunks of `rows_per_chunk` slots (row bytes, then per-slot id, table and flags, in
// one allocation, so nothing is allocated per row). The index maps a key to (class, slot) in 8
// bytes (slot ref + 32 hash bits), comparing the full key against the slot's stored id/table.
// With a budget, when a class needs a slot and no chunk fits, CLOCK evicts rows of any class;
// a class whose free slots reach a chunk gives that chunk back (moving its last chunk's rows
// down), so memory flows between classes.
//
// Requires external synchronization (EmbeddingStore holds the stripe's mutex).
class RowCache {
 public:
  // Receives each dirty row when it is evicted, before its slot is reused.
  using RowFn =
      std::function<void(uint32_t table, uint64_t id, const uint8_t* row, uint32_t row_bytes)>;

  struct Options {
    std::vector<uint32_t> row_bytes;  // by table id (TableSpec::row_bytes()), each > 0
    uint64_t budget_bytes = 0;        // bound on bytes_used(); 0 = unbounded, never evicts
    RowFn writeback;                  // called for dirty victims
  };

  // Most slots one class may have in one stripe (the index packs class and slot into 32 bits).
  static constexpr uint32_t kMaxSlotsPerClass = (1u << 26) - 1;
  static constexpr uint32_t kMaxClasses = 63;

  // REQUIRES: at most kMaxClasses distinct slot sizes among options.row_bytes.
  explicit RowCache(Options options);
  ~RowCache();
  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  // The cached row of (table, id) or nullptr. Sets its CLOCK reference bit, and its dirty bit
  // when `mark_dirty`; `was_dirty` (if given) gets whether it was dirty before. The pointer is
  // valid until the next Insert or Erase.
  uint8_t* Find(uint32_t table, uint64_t id, uint64_t hash, bool mark_dirty,
                bool* was_dirty = nullptr) {
    const size_t pos = FindPos(table, id, static_cast<uint32_t>(hash));
    if (pos == kNoPos) return nullptr;
    const uint32_t ref = index_[pos].ref;
    SlabClass& c = classes_[ref >> kClassShift];
    const uint32_t slot = ref & kSlotMask;
    uint8_t& f = *c.flags(slot);
    if (was_dirty != nullptr) *was_dirty = (f & kDirty) != 0;
    if (mark_dirty && !(f & kDirty)) dirty_bytes_ += c.row_bytes;
    f |= kRef | (mark_dirty ? kDirty : 0);
    return c.row(slot);
  }

  // Hints for batched lookups, no effect on state: a caller about to Find keys ahead of time
  // prefetches each key's index slot, and a few keys later (once that slot is likely cached)
  // the first `row_prefix` bytes of its row and the slot's key.
  void PrefetchSlot(uint64_t hash) const {
    __builtin_prefetch(&index_[hash & (index_.size() - 1)]);
  }
  void PrefetchRow(uint64_t hash, uint32_t row_prefix) const {
    const size_t mask = index_.size() - 1;
    const uint32_t tag = static_cast<uint32_t>(hash);
    // Looks at the first few entries of the probe sequence only; a miss just goes unprefetched.
    for (size_t pos = tag & mask, n = 0; n < 4; pos = (pos + 1) & mask, ++n) {
      const IndexEntry e = index_[pos];
      if (e.ref == kEmpty) return;
      if (e.tag != tag) continue;
      const SlabClass& c = classes_[e.ref >> kClassShift];
      const uint32_t slot = e.ref & kSlotMask;
      const uint8_t* row = c.row(slot);
      for (uint32_t off = 0; off < row_prefix; off += 64) __builtin_prefetch(row + off, 1);
      __builtin_prefetch(row + row_prefix - 1, 1);
      __builtin_prefetch(c.id(slot));
      __builtin_prefetch(c.flags(slot), 1);
      return;
    }
  }

  // Caches (table, id), which must not be cached, and returns its (uninitialised) row bytes for
  // the caller to fill. May evict other rows. Returns nullptr only when an unbounded cache hits
  // kMaxSlotsPerClass.
  uint8_t* Insert(uint32_t table, uint64_t id, uint64_t hash, bool dirty);

  // Drops (table, id), dirty or not, without a writeback (the caller deletes the stored copy and
  // calls NoteChanged). Returns whether it was cached.
  bool Erase(uint32_t table, uint64_t id, uint64_t hash);

  // Calls fn for every dirty row (for the caller to write to RocksDB), then marks it clean. The
  // row pointers fn gets stay valid until the next Insert or Erase.
  void TakeDirty(const RowFn& fn);
  // Calls fn for every dirty row and leaves it dirty.
  void ForEachDirty(const RowFn& fn);
  // Hands every dirty row to options.writeback, as an eviction would, and keeps it cached,
  // clean: the caller bounds dirty_bytes() so that a flush never has a whole cache to write.
  // Returns the rows handed over.
  uint64_t WriteBackDirty();

  // Change tracking, so that a row read from RocksDB without the stripe lock can be checked for
  // staleness: RocksDB's copy of a row changes only through writebacks, TakeDirty and erasures,
  // each stamped here with a sequence number in a small table of hash buckets.
  //
  // Records that the stored row with this key hash changes now (the store calls it on erasure).
  void NoteChanged(uint64_t hash) { changed_[ChangeBucket(hash)] = ++change_seq_; }
  // From DeferChanges until ApplyDeferredChanges, the stamps of rows evicted to the writeback
  // wait in a list. The store defers them while a call holds the stripe for a window: RocksDB's
  // copy of the stripe's rows cannot change meanwhile (drains and flushes take every stripe, and
  // an evicted row is found in the stage), and applied before the stripe is released, the stamps
  // reach every reader that could see the row written. Applied at once, a window's own evictions
  // stamped the buckets of its later misses (a bucket holds many keys), whose MultiGet values
  // were then thrown away and read again alone, one Get each.
  void DeferChanges() { defer_changes_ = true; }
  void ApplyDeferredChanges() {
    defer_changes_ = false;
    for (uint64_t hash : deferred_changes_) NoteChanged(hash);
    deferred_changes_.clear();
  }
  uint32_t change_seq() const { return change_seq_; }
  // False only if no row with this hash changed since change_seq() returned `seq`.
  bool MaybeChangedSince(uint64_t hash, uint32_t seq) const {
    return static_cast<int32_t>(changed_[ChangeBucket(hash)] - seq) > 0;
  }

  uint64_t rows() const { return rows_; }
  // Slab chunks + index, the bytes the budget bounds.
  uint64_t bytes_used() const {
    return slab_bytes_ + index_.size() * sizeof(IndexEntry) + sizeof(changed_);
  }
  uint64_t evictions() const { return evictions_; }
  uint64_t writebacks() const { return writebacks_; }
  // Row bytes of the cached dirty rows.
  uint64_t dirty_bytes() const { return dirty_bytes_; }
  uint64_t written_ahead() const { return written_ahead_; }

 private:
  struct IndexEntry {
    uint32_t ref;  // class << kClassShift | slot, or kEmpty
    uint32_t tag;  // low 32 bits of the key hash; its low bits are the home position
  };
  static constexpr uint8_t kLive = 1, kDirty = 2, kRef = 4;
  // TakeDirty when `clean`, else ForEachDirty.
  void VisitDirty(const RowFn& fn, bool clean);
  static constexpr uint32_t kNoSlot = 0xFFFFFFFFu;
  static constexpr uint32_t kSlotMask = kMaxSlotsPerClass;
  static constexpr size_t kNoPos = ~size_t{0};

  // A slab class: chunks of `rows_per_chunk` (a power of two) slots. One chunk is a single
  // allocation laid out as [rows: rpc x stride][ids: rpc x u64][tables: rpc x u16]
  // [flags: rpc x u8]. Free slots form a list threaded through their own row bytes.
  struct SlabClass {
    uint32_t row_bytes = 0;
    uint32_t stride = 0;  // row_bytes rounded up to 8, so each RowMeta stays aligned
    uint32_t rows_per_chunk = 0;
    uint32_t chunk_shift = 0;  // log2(rows_per_chunk)
    size_t ids_offset = 0, tables_offset = 0, flags_offset = 0, chunk_bytes = 0;
    std::vector<std::unique_ptr<uint8_t[]>> chunks;
    uint32_t free_head = kNoSlot;
    uint32_t free_count = 0;

    uint32_t capacity() const { return static_cast<uint32_t>(chunks.size()) * rows_per_chunk; }
    uint8_t* chunk(uint32_t s) const { return chunks[s >> chunk_shift].get(); }
    uint32_t in_chunk(uint32_t s) const { return s & (rows_per_chunk - 1); }
    uint8_t* row(uint32_t s) const { return chunk(s) + size_t{in_chunk(s)} * stride; }
    uint64_t* id(uint32_t s) const {
      return reinterpret_cast<uint64_t*>(chunk(s) + ids_offset) + in_chunk(s);
    }
    uint16_t* table(uint32_t s) const {
      return reinterpret_cast<uint16_t*>(chunk(s) + tables_offset) + in_chunk(s);
    }
    uint8_t* flags(uint32_t s) const { return chunk(s) + flags_offset + in_chunk(s); }

    void PushFree(uint32_t s) {
      std::memcpy(row(s), &free_head, sizeof(free_head));
      free_head = s;
      ++free_count;
    }
    uint32_t PopFree() {
      uint32_t s = free_head;
      std::memcpy(&free_head, row(s), sizeof(free_head));
      --free_count;
      return s;
    }
    uint32_t NextFree(uint32_t s) const {
      uint32_t next;
      std::memcpy(&next, row(s), sizeof(next));
      return next;
    }
  };

  static constexpr uint32_t kClassShift = 26;
  // Enough buckets that the few dozen rows a call changes in one stripe rarely collide with
  // the ones it is about to read; a collision only costs one extra point read.
  static constexpr uint32_t kChangeBuckets = 1024;
  static uint32_t ChangeBucket(uint64_t hash) { return (hash >> 20) & (kChangeBuckets - 1); }
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;

  // Index.
  // Linear probing: the 32-bit tag is compared first, the slot's key only on a tag match.
  size_t FindPos(uint32_t table, uint64_t id, uint32_t tag) const {
    const size_t mask = index_.size() - 1;
    for (size_t pos = tag & mask;; pos = (pos + 1) & mask) {
      const IndexEntry e = index_[pos];
      if (e.ref == kEmpty) return kNoPos;
      if (e.tag != tag) continue;
      const SlabClass& c = classes_[e.ref >> kClassShift];
      const uint32_t slot = e.ref & kSlotMask;
      if (*c.id(slot) == id && *c.table(slot) == table) return pos;
    }
  }
  void IndexInsert(uint32_t ref, uint32_t tag);
  void IndexEraseAt(size_t pos);
  void GrowIndex();
  void EnsureIndexRoom();

  // Slabs and eviction.
  uint32_t AllocSlot(uint32_t cls);
  bool AddChunk(uint32_t cls);
  void FreeSlot(SlabClass& c, uint32_t slot);
  void EvictOne();
  void EvictBatch();
  void ReleaseLastChunk(uint32_t cls);
  bool Fits(uint64_t extra_bytes) const;

  Options options_;
  std::vector<uint32_t> class_of_table_;
  std::vector<SlabClass> classes_;
  std::vector<IndexEntry> index_;
  uint64_t index_count_ = 0;
  uint64_t slab_bytes_ = 0;
  uint64_t rows_ = 0;
  uint32_t hand_class_ = 0;  // CLOCK hand: (class, slot)
  uint32_t hand_slot_ = 0;
  uint64_t evictions_ = 0;
  uint64_t writebacks_ = 0;
  uint64_t dirty_bytes_ = 0;
  uint64_t written_ahead_ = 0;  // rows WriteBackDirty handed over
  uint32_t change_seq_ = 0;     // wraps; compared as a signed difference
  uint32_t changed_[kChangeBuckets] = {};
  bool defer_changes_ = false;
  std::vector<uint64_t> deferred_changes_;  // hashes, while deferred
};

// Evicted dirty rows of one stripe that are not in RocksDB yet: the store writes those of all
// stripes together, in key order, once they reach a few MiB (EmbeddingStore's DrainStaged).
// One copy per key, the newest. Rows live in fixed-size blocks, so a row never moves while it
// is staged (pointers from Find stay valid until Erase of that key or Clear); an open-addressing
// index (entries are never removed from it, an erased entry is only marked dead) finds them.
// Requires external synchronization.
class StagedRows {
 public:
  StagedRows() = default;
  StagedRows(const StagedRows&) = delete;
  StagedRows& operator=(const StagedRows&) = delete;

  // Stages a copy of the row; replaces an older copy of the key. Returns the bytes it added.
  uint64_t Put(uint32_t table, uint64_t id, uint64_t hash, const uint8_t* row, uint32_t bytes);
  // The staged row of (table, id), or nullptr.
  const uint8_t* Find(uint32_t table, uint64_t id, uint64_t hash) const {
    const size_t pos = FindPos(table, id, static_cast<uint32_t>(hash));
    if (pos == kNoPos) return nullptr;
    const Entry& e = entries_[index_[pos]];
    return e.live ? e.row : nullptr;
  }
  // Unstages (table, id): a row erased or replaced in RocksDB must not be written later.
  void Erase(uint32_t table, uint64_t id, uint64_t hash);
  // Calls fn(table, id, row, row_bytes) for every staged row.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const Entry& e : entries_) {
      if (e.live) fn(e.table, e.id, e.row, e.bytes);
    }
  }
  // Empties the stage. Its blocks are kept for the next rows up to `keep_bytes` (and the entries
  // and index while they fit rows of that many bytes), the rest freed: a stage that once held
  // far more (a stripe written ahead whole, the rows of a failed write) does not keep it for good.
  void Clear(uint64_t keep_bytes);
  uint64_t rows() const { return live_; }
  // Blocks + entries + index: what the stage costs beyond the cache.
  uint64_t bytes_used() const {
    return bytes_ + entries_.capacity() * sizeof(Entry) + index_.capacity() * sizeof(uint32_t);
  }

 private:
  struct Entry {
    uint64_t id;
    uint32_t table;
    uint32_t bytes;
    uint32_t tag;  // low 32 bits of the key hash
    bool live;
    uint8_t* row;
  };
  static constexpr size_t kBlockBytes = 16 << 10;
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  static constexpr size_t kNoPos = ~size_t{0};

  size_t FindPos(uint32_t table, uint64_t id, uint32_t tag) const {
    if (index_.empty()) return kNoPos;
    const size_t mask = index_.size() - 1;
    for (size_t pos = tag & mask;; pos = (pos + 1) & mask) {
      const uint32_t k = index_[pos];
      if (k == kEmpty) return kNoPos;
      const Entry& e = entries_[k];
      if (e.tag == tag && e.id == id && e.table == table) return pos;
    }
  }
  uint8_t* Allocate(uint32_t bytes);
  void Grow();

  // Blocks are kept across Clear (up to its keep_bytes) and reused: a stripe stages about as
  // much after each drain.
  std::vector<std::unique_ptr<uint8_t[]>> blocks_;
  std::vector<size_t> block_sizes_;
  size_t blocks_in_use_ = 0;
  size_t block_used_ = 0;  // bytes taken in blocks_[blocks_in_use_ - 1]
  uint64_t bytes_ = 0;     // sum of block_sizes_
  std::vector<Entry> entries_;
  std::vector<uint32_t> index_;  // entry number, or kEmpty; a power of two, load <= 1/2
  uint64_t live_ = 0;
};

// Keys a read of one stripe found absent everywhere (cache, stage, RocksDB). A later read or
// push of such a key skips RocksDB: at k = 0 a step's ids are read by the prefetch of a parked
// pull, by the pull's answer and by the push, and with a table far larger than the cache most
// of them are new. The store forgets a key whenever it could become stored (cached by Insert,
// or written by WriteRows), so a key found here is still absent. Direct-mapped: a newer key
// takes an older one's place. 1024 entries (16 KiB): 4096 made the Zipf 1.05 scale job ~5 %
// slower (4 pairs), 1024 did not (2 pairs).
// Requires external synchronization.
class AbsentKeys {
 public:
  AbsentKeys() : entries_(kEntries) {}
  void Note(uint32_t table, uint64_t id, uint64_t hash) {
    entries_[Slot(hash)] = Entry{id, table, true};
  }
  bool Find(uint32_t table, uint64_t id, uint64_t hash) const {
    const Entry& e = entries_[Slot(hash)];
    return e.used && e.id == id && e.table == table;
  }
  void Forget(uint32_t table, uint64_t id, uint64_t hash) {
    Entry& e = entries_[Slot(hash)];
    if (e.id == id && e.table == table) e.used = false;
  }

 private:
  struct Entry {
    uint64_t id = 0;
    uint32_t table = 0;
    bool used = false;
  };
  static constexpr size_t kEntries = 1024;
  static size_t Slot(uint64_t hash) { return (hash >> 12) & (kEntries - 1); }
  std::vector<Entry> entries_;
};

// Admission counters of one stripe that were read or set since the last flush: an
// open-addressing map that only grows until Clear(), so it never deletes one key.
// Requires external synchronization.
class CounterCache {
 public:
  struct Entry {
    uint64_t id = 0;
    uint32_t table = 0;
    uint32_t state = kEmptyEntry;  // kEmptyEntry, kClean or kDirty
    uint64_t count = 0;
  };
  static constexpr uint32_t kEmptyEntry = 0, kClean = 1, kDirty = 2;

  CounterCache();
  // The entry of (table, id) or nullptr.
  Entry* Find(uint32_t table, uint64_t id, uint64_t hash);
  // Adds (table, id), which must be absent.
  Entry* Insert(uint32_t table, uint64_t id, uint64_t hash, uint64_t count, uint32_t state);
  // Visits every entry (state != kEmptyEntry).
  void ForEach(const std::function<void(const Entry&)>& fn) const;
  void Clear();
  uint64_t bytes_used() const { return entries_.size() * sizeof(Entry); }

 private:
  void Grow();
  std::vector<Entry> entries_;
  uint64_t count_ = 0;
};

}  // namespace tandem::ps::internal
