#include "common/testing/local_embedding_table.h"

#include <algorithm>

#include "common/embedding/initializer.h"
#include "common/embedding/sparse_optimizer.h"

namespace tandem {

LocalEmbeddingTable::LocalEmbeddingTable(std::vector<embedding::TableSpec> tables, uint64_t seed)
    : seed_(seed) {
  for (auto& spec : tables) tables_.push_back(Table{std::move(spec), {}, {}});
}

Status LocalEmbeddingTable::Pull(int64_t, std::span<const TableIds> tables,
                                 std::vector<std::vector<float>>* rows) {
  rows->resize(tables.size());
  for (size_t i = 0; i < tables.size(); ++i) {
    if (tables[i].table >= tables_.size())
      return Status::InvalidArgument("unknown table " + std::to_string(tables[i].table));
    const Table& t = tables_[tables[i].table];
    const uint32_t dim = t.spec.dim;
    auto& out = (*rows)[i];
    out.resize(tables[i].ids.size() * dim);
    for (size_t j = 0; j < tables[i].ids.size(); ++j) {
      auto it = t.index.find(tables[i].ids[j]);
      if (it == t.index.end()) {
        embedding::InitialEmbedding(seed_, t.spec, tables[i].ids[j], &out[j * dim]);
      } else {
        embedding::RowRef row{
            const_cast<uint8_t*>(&t.rows[size_t{it->second} * t.spec.row_bytes()])};
        std::copy_n(row.embedding(), dim, &out[j * dim]);
      }
    }
  }
  return Status::Ok();
}

uint8_t* LocalEmbeddingTable::FindOrCreate(Table& t, uint64_t id) {
  const uint32_t bytes = t.spec.row_bytes();
  auto [it, inserted] = t.index.emplace(id, static_cast<uint32_t>(t.rows.size() / bytes));
  if (inserted) {
    t.rows.resize(t.rows.size() + bytes);
    embedding::InitialRow(seed_, t.spec, id,
                          embedding::RowRef{&t.rows[size_t{it->second} * bytes]});
  }
  return &t.rows[size_t{it->second} * bytes];
}

Status LocalEmbeddingTable::Push(int64_t step, std::span<const TableGrads> tables) {
  for (const auto& g : tables) {
    if (g.table >= tables_.size())
      return Status::InvalidArgument("unknown table " + std::to_string(g.table));
    Table& t = tables_[g.table];
    const uint32_t dim = t.spec.dim;
    if (g.grads.size() != g.ids.size() * dim)
      return Status::InvalidArgument("ids and gradients disagree");
    for (size_t j = 0; j < g.ids.size(); ++j) {
      embedding::RowRef row{FindOrCreate(t, g.ids[j])};
      embedding::ApplySparseUpdate(t.spec, &g.grads[j * dim], row);
      row.meta()->last_updated_step = step;
      row.meta()->frequency++;
    }
  }
  return Status::Ok();
}

size_t LocalEmbeddingTable::rows_stored() const {
  size_t n = 0;
  for (const auto& t : tables_) n += t.index.size();
  return n;
}

void LocalEmbeddingTable::AddToChecksum(ModelChecksum* sum) const {
  for (uint32_t i = 0; i < tables_.size(); ++i) {
    const auto& spec = tables_[i].spec;
    for (const auto& [id, slot] : tables_[i].index) {
      embedding::RowRef row{
          const_cast<uint8_t*>(&tables_[i].rows[size_t{slot} * spec.row_bytes()])};
      sum->AddRow(i, id, {row.embedding(), spec.dim}, {row.state(spec.dim), spec.state_floats()},
                  row.meta()->last_updated_step, row.meta()->frequency);
    }
  }
}

void LocalEmbeddingTable::ForEachRow(
    const std::function<void(uint32_t, uint64_t, const uint8_t*)>& fn) const {
  for (uint32_t i = 0; i < tables_.size(); ++i)
    for (const auto& [id, slot] : tables_[i].index)
      fn(i, id, &tables_[i].rows[size_t{slot} * tables_[i].spec.row_bytes()]);
}

}  // namespace tandem
