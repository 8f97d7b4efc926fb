#include "serve/row_source.h"

#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <set>

#include "common/checkpoint_layout.h"
#include "common/slot_map.h"

namespace tandem::serve {

namespace fs = std::filesystem;

StatusOr<std::shared_ptr<BundleRows>> BundleRows::Open(const offline::BundleHeader& bundle) {
  auto rows = std::make_shared<BundleRows>();
  const auto specs = embedding::TableSpecsFromConfig(bundle.job);
  for (size_t t = 0; t < specs.size(); ++t) {
    TANDEM_ASSIGN_OR_RETURN(auto file,
                            offline::MappedTableFile::Open(bundle.table_files[t], specs[t].dim));
    if (file->table() != t)
      return Status::DataLoss(bundle.table_files[t] + ": holds table " +
                              std::to_string(file->table()) + ", not " + std::to_string(t));
    rows->tables_.push_back(std::move(file));
  }
  return rows;
}

Status BundleRows::Read(uint32_t table, std::span<const uint64_t> ids, float* out,
                        uint8_t* found) const {
  if (table >= tables_.size())
    return Status::InvalidArgument("unknown table " + std::to_string(table));
  const offline::MappedTableFile& t = *tables_[table];
  const size_t dim = t.dim();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t k = t.Find(ids[i]);
    found[i] = k >= 0;
    if (k >= 0) std::memcpy(out + i * dim, t.row(k), dim * sizeof(float));
  }
  return Status::Ok();
}

uint64_t BundleRows::rows() const {
  uint64_t n = 0;
  for (const auto& t : tables_) n += t->rows();
  return n;
}

StatusOr<std::shared_ptr<CheckpointRows>> CheckpointRows::Open(
    const offline::OpenedCheckpoint& ckpt, const config::JobConfig& job,
    const std::string& state_dir, uint64_t cache_bytes) {
  std::shared_ptr<CheckpointRows> rows(new CheckpointRows());
  rows->step_ = ckpt.manifest.step;
  rows->specs_ = embedding::TableSpecsFromConfig(job);
  // A fresh directory per opening: a version being served may still read an older one of the
  // same step (a re-commit).
  static std::atomic<uint64_t> serial{0};
  rows->dir_ =
      state_dir + "/" + CheckpointDirName(rows->step_) + "-" + std::to_string(serial.fetch_add(1));
  std::error_code ec;
  fs::remove_all(rows->dir_, ec);
  fs::create_directories(rows->dir_, ec);
  if (ec) return Status::Unavailable("create " + rows->dir_ + ": " + ec.message());
  const uint32_t num_ps = ckpt.manifest.num_ps;
  rows->parts_.resize(num_ps);
  rows->shards_.resize(num_ps);
  rows->part_dirs_.resize(num_ps);
  rows->durable_dirs_.resize(num_ps);
  for (const auto& part : ckpt.manifest.parts) {
    if (part.name == "dense") continue;
    TANDEM_ASSIGN_OR_RETURN(ps::CheckpointPart cp, ps::CheckpointPartFromJson(part.detail));
    if (cp.shard >= num_ps || rows->shards_[cp.shard] != nullptr)
      return Status::DataLoss("checkpoint " + std::to_string(rows->step_) + ": part " + part.name +
                              " names shard " + std::to_string(cp.shard) + " of " +
                              std::to_string(num_ps));
    const std::string staged = rows->dir_ + "/" + part.name;
    TANDEM_RETURN_IF_ERROR(
        ps::MaterializePart(ckpt.root + "/" + ShardDurableDir(cp.shard), cp, staged)
            .WithContext(part.name));
    ps::StoreOptions so;
    so.db_dir = staged;
    so.tables = rows->specs_;
    so.seed = job.train.seed;
    so.cache_bytes = cache_bytes;
    so.read_only = true;
    auto store = ps::EmbeddingStore::Open(so);
    if (!store.ok()) return store.status().WithContext(part.name);
    rows->shards_[cp.shard] = std::move(store).value();
    rows->part_dirs_[cp.shard] = staged;
    rows->durable_dirs_[cp.shard] = ckpt.root + "/" + ShardDurableDir(cp.shard);
    rows->parts_[cp.shard] = std::move(cp);
  }
  for (uint32_t s = 0; s < num_ps; ++s)
    if (rows->shards_[s] == nullptr)
      return Status::DataLoss("checkpoint " + std::to_string(rows->step_) +
                              " has no part for shard " + std::to_string(s));
  return rows;
}

CheckpointRows::~CheckpointRows() {
  shards_.clear();  // close RocksDB before its files go
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

Status CheckpointRows::Read(uint32_t table, std::span<const uint64_t> ids, float* out,
                            uint8_t* found) const {
  if (table >= specs_.size())
    return Status::InvalidArgument("unknown table " + std::to_string(table));
  const uint32_t dim = specs_[table].dim;
  const uint32_t row_bytes = specs_[table].row_bytes();
  const uint32_t num_shards = static_cast<uint32_t>(shards_.size());
  // Per shard: the positions of its ids, read with one batched call.
  std::vector<std::vector<size_t>> at(num_shards);
  for (size_t i = 0; i < ids.size(); ++i) at[ShardOf(table, ids[i], num_shards)].push_back(i);
  std::vector<uint64_t> want;
  std::vector<uint64_t> bytes;  // u64 for RowMeta's alignment
  std::vector<bool> present;
  for (uint32_t s = 0; s < num_shards; ++s) {
    if (at[s].empty()) continue;
    want.clear();
    for (size_t i : at[s]) want.push_back(ids[i]);
    bytes.resize((want.size() * row_bytes + 7) / 8);
    TANDEM_RETURN_IF_ERROR(
        shards_[s]->ReadRows(table, want, reinterpret_cast<uint8_t*>(bytes.data()), &present));
    for (size_t j = 0; j < at[s].size(); ++j) {
      const size_t i = at[s][j];
      found[i] = present[j];
      if (!present[j]) continue;
      const embedding::RowRef row{reinterpret_cast<uint8_t*>(bytes.data()) + j * row_bytes};
      std::memcpy(out + i * dim, row.embedding(), dim * sizeof(float));
    }
  }
  return Status::Ok();
}

Status CheckpointRows::KeysNotIn(uint32_t shard, const ps::CheckpointPart& older,
                                 std::vector<std::pair<uint32_t, uint64_t>>* keys) const {
  keys->clear();
  if (shard >= parts_.size()) return Status::InvalidArgument("no shard " + std::to_string(shard));
  std::set<std::string> old_files;
  for (const auto& f : older.files)
    if (f.is_sst || f.is_log) old_files.insert(f.path);
  rocksdb::Options options;
  // A delta part's rows changed after its base are the keys its change log segments write.
  struct LoggedKeys : rocksdb::WriteBatch::Handler {
    std::vector<std::string> keys;
    void Put(const rocksdb::Slice& key, const rocksdb::Slice&) override {
      keys.push_back(key.ToString());
    }
    void Delete(const rocksdb::Slice& key) override { keys.push_back(key.ToString()); }
  };
  const auto add_key = [&](const rocksdb::Slice& k) {
    if (k.size() != 12) return;  // the checksum record and admission counters
    auto big = [&](size_t at, size_t n) {
      uint64_t v = 0;
      for (size_t b = 0; b < n; ++b) v = v << 8 | static_cast<uint8_t>(k.data()[at + b]);
      return v;
    };
    const uint32_t table = static_cast<uint32_t>(big(0, 4));
    if (table >= specs_.size()) return;  // 0xFFFFFFFF: an admission counter
    keys->emplace_back(table, big(4, 8));
  };
  for (const auto& f : parts_[shard].files) {
    if (!f.is_log || old_files.count(f.path) != 0) continue;
    TANDEM_RETURN_IF_ERROR(ps::ForEachChangeRecord(
        durable_dirs_[shard] + "/" + f.path, [&](std::string&& rep) -> Status {
          LoggedKeys logged;
          rocksdb::WriteBatch batch(std::move(rep));
          rocksdb::Status st = batch.Iterate(&logged);
          if (!st.ok()) return Status::DataLoss(f.path + ": " + st.ToString());
          for (const std::string& k : logged.keys) add_key(k);
          return Status::Ok();
        }));
  }
  for (const auto& f : parts_[shard].files) {
    if (!f.is_sst || old_files.count(f.path) != 0) continue;
    const std::string path = part_dirs_[shard] + "/" + f.db_name;
    rocksdb::SstFileReader reader(options);
    rocksdb::Status st = reader.Open(path);
    if (!st.ok()) return Status::DataLoss(path + ": " + st.ToString());
    std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) add_key(it->key());
    if (!it->status().ok()) return Status::DataLoss(path + ": " + it->status().ToString());
  }
  std::sort(keys->begin(), keys->end());
  keys->erase(std::unique(keys->begin(), keys->end()), keys->end());
  return Status::Ok();
}

RowSource::Rows CheckpointRows::rows_held() const {
  Rows r;
  for (const auto& s : shards_) {
    r.in_memory += s->stats().cached_rows;
    r.on_disk += s->RocksIntProperty("rocksdb.estimate-num-keys");
  }
  return r;
}

ps::StoreStats CheckpointRows::stats() const {
  ps::StoreStats sum;
  for (const auto& s : shards_) {
    const ps::StoreStats st = s->stats();
    sum.cached_rows += st.cached_rows;
    sum.cache_bytes_used += st.cache_bytes_used;
    sum.hits += st.hits;
    sum.misses += st.misses;
    sum.evictions += st.evictions;
  }
  return sum;
}

DeltaRows::DeltaRows(std::shared_ptr<const RowSource> base, std::vector<worker::FrozenTable> tables)
    : base_(std::move(base)), tables_(std::move(tables)) {}

Status DeltaRows::Read(uint32_t table, std::span<const uint64_t> ids, float* out,
                       uint8_t* found) const {
  TANDEM_RETURN_IF_ERROR(base_->Read(table, ids, out, found));
  if (table >= tables_.size()) return Status::Ok();
  const worker::FrozenTable& t = tables_[table];
  if (t.ids.empty()) return Status::Ok();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t k = t.Find(ids[i]);
    if (k < 0) continue;
    found[i] = 1;
    std::memcpy(out + i * t.dim, &t.values[static_cast<size_t>(k) * t.dim], t.dim * sizeof(float));
  }
  return Status::Ok();
}

uint64_t DeltaRows::rows() const {
  uint64_t n = 0;
  for (const auto& t : tables_) n += t.ids.size();
  return n;
}

worker::FrozenTable MergeRows(const worker::FrozenTable& older, const worker::FrozenTable& newer) {
  worker::FrozenTable m;
  m.table = newer.table;
  m.dim = newer.dim;
  const size_t dim = m.dim;
  m.ids.reserve(older.ids.size() + newer.ids.size());
  m.values.reserve(m.ids.capacity() * dim);
  size_t i = 0, j = 0;
  auto take = [&](const worker::FrozenTable& t, size_t k) {
    m.ids.push_back(t.ids[k]);
    m.values.insert(m.values.end(), t.values.begin() + static_cast<ptrdiff_t>(k * dim),
                    t.values.begin() + static_cast<ptrdiff_t>((k + 1) * dim));
  };
  while (i < older.ids.size() || j < newer.ids.size()) {
    if (j == newer.ids.size() || (i < older.ids.size() && older.ids[i] < newer.ids[j])) {
      take(older, i++);
    } else {
      if (i < older.ids.size() && older.ids[i] == newer.ids[j]) ++i;
      take(newer, j++);
    }
  }
  return m;
}

}  // namespace tandem::serve
