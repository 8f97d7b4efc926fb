// LocalEmbeddingTable: the embedding tables in this process, behind the same interface as the
// parameter-server client, with the same initial values and sparse-optimizer math as a shard
// (rows are materialised by their first push; pulls store nothing). For tests and the
// in-process baseline of benchmarks (tandem_testing: no daemon links it). Admission and TTL are
// left to the PS. Requires external synchronization.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "common/embedding/table_spec.h"
#include "common/embedding_client.h"
#include "common/model_checksum.h"

namespace tandem {

class LocalEmbeddingTable : public EmbeddingClient {
 public:
  LocalEmbeddingTable(std::vector<embedding::TableSpec> tables, uint64_t seed);

  Status Pull(int64_t step, std::span<const TableIds> tables,
              std::vector<std::vector<float>>* rows) override;
  Status Push(int64_t step, std::span<const TableGrads> tables) override;

  size_t rows_stored() const;
  // Adds every stored row to `sum` (the embedding part of model_checksum).
  void AddToChecksum(ModelChecksum* sum) const;
  // Visits every stored row: (table, id, row bytes as RowRef lays them out).
  void ForEachRow(const std::function<void(uint32_t, uint64_t, const uint8_t*)>& fn) const;

 private:
  struct Table {
    embedding::TableSpec spec;
    std::unordered_map<uint64_t, uint32_t> index;  // id -> row slot
    std::vector<uint8_t> rows;                     // slot * row_bytes
  };
  uint8_t* FindOrCreate(Table& t, uint64_t id);

  std::vector<Table> tables_;
  uint64_t seed_;
};

}  // namespace tandem
