// Where a served model version reads its embedding rows (serve/README.md): a bundle's table
// files mapped read-only, a committed checkpoint's shards opened read-only with a bounded row
// cache, or the rows changed since either, layered over it. Every source is immutable once
// built, so requests read it concurrently without locks, and a version's rows never change
// under a request.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/embedding/table_spec.h"
#include "common/status.h"
#include "offline/bundle.h"
#include "offline/checkpoint_reader.h"
#include "server/ps/durable_copy.h"
#include "server/ps/embedding_store.h"
#include "worker/frozen_model.h"

namespace tandem::serve {

class RowSource {
 public:
  virtual ~RowSource() = default;
  // For each ids[i] of `table`: found[i] = 1 and its row in out[i * dim ...], or found[i] = 0
  // and that row of `out` left as it was. kInvalidArgument for a table the model lacks.
  virtual Status Read(uint32_t table, std::span<const uint64_t> ids, float* out,
                      uint8_t* found) const = 0;
  // Rows held in memory (changed rows, cached rows) and rows on disk behind them (mapped table
  // files; RocksDB's estimate for a checkpoint): the metrics' "rows loaded".
  struct Rows {
    uint64_t in_memory = 0;
    uint64_t on_disk = 0;
  };
  virtual Rows rows_held() const = 0;
};

// A whole bundle's tables (offline::MappedTableFile).
class BundleRows : public RowSource {
 public:
  static StatusOr<std::shared_ptr<BundleRows>> Open(const offline::BundleHeader& bundle);
  Status Read(uint32_t table, std::span<const uint64_t> ids, float* out,
              uint8_t* found) const override;
  Rows rows_held() const override { return {0, rows()}; }
  uint64_t rows() const;

 private:
  std::vector<std::unique_ptr<offline::MappedTableFile>> tables_;
};

// The shards of one committed checkpoint, each part's durable copy materialised (hard links)
// under its own directory of `state_dir` and opened read-only; the directory is removed when
// the last version using it goes. A row is read from the shard the slot map names.
class CheckpointRows : public RowSource {
 public:
  // `cache_bytes` bounds each shard's row cache. Errors as offline::OpenCheckpointShard's.
  static StatusOr<std::shared_ptr<CheckpointRows>> Open(const offline::OpenedCheckpoint& ckpt,
                                                        const config::JobConfig& job,
                                                        const std::string& state_dir,
                                                        uint64_t cache_bytes);
  ~CheckpointRows() override;
  Status Read(uint32_t table, std::span<const uint64_t> ids, float* out,
              uint8_t* found) const override;
  Rows rows_held() const override;

  int64_t step() const { return step_; }
  // Each shard's part as the manifest describes it, by shard: what a delta compares.
  const std::vector<ps::CheckpointPart>& parts() const { return parts_; }
  // The (table, id) of every row in the SST files of shard `shard` that `older` (the same
  // shard's part of an older checkpoint) lacks: a superset of the rows changed since it (a
  // compaction rewrites unchanged rows too). Sorted, each once.
  Status KeysNotIn(uint32_t shard, const ps::CheckpointPart& older,
                   std::vector<std::pair<uint32_t, uint64_t>>* keys) const;
  // The shards' row caches, summed.
  ps::StoreStats stats() const;

 private:
  CheckpointRows() = default;
  int64_t step_ = -1;
  std::string dir_;
  std::vector<embedding::TableSpec> specs_;
  std::vector<ps::CheckpointPart> parts_;
  std::vector<std::string> part_dirs_;                       // by shard: the materialised part
  std::vector<std::string> durable_dirs_;                    // by shard: its durable copy
  std::vector<std::unique_ptr<ps::EmbeddingStore>> shards_;  // by shard
};

// Rows that replace a base's: per table, ascending ids and their rows (worker::FrozenTable).
class DeltaRows : public RowSource {
 public:
  DeltaRows(std::shared_ptr<const RowSource> base, std::vector<worker::FrozenTable> tables);
  Status Read(uint32_t table, std::span<const uint64_t> ids, float* out,
              uint8_t* found) const override;
  Rows rows_held() const override {
    Rows r = base_->rows_held();
    r.in_memory += rows();
    return r;
  }
  const std::shared_ptr<const RowSource>& base() const { return base_; }
  const std::vector<worker::FrozenTable>& tables() const { return tables_; }
  uint64_t rows() const;

 private:
  std::shared_ptr<const RowSource> base_;
  std::vector<worker::FrozenTable> tables_;
};

// `older` with every row of `newer` put over it (both sorted; newer wins).
worker::FrozenTable MergeRows(const worker::FrozenTable& older, const worker::FrozenTable& newer);

}  // namespace tandem::serve
