#include "server/ps/store_checksum.h"

namespace tandem::ps {

Status AddStoreToChecksum(EmbeddingStore* store, const std::vector<embedding::TableSpec>& tables,
                          ModelChecksum* sum, uint64_t* rows) {
  ModelChecksum part;
  uint64_t n = 0;
  Status bad = Status::Ok();
  TANDEM_RETURN_IF_ERROR(store->ForEachRow([&](uint32_t table, uint64_t id, const uint8_t* bytes) {
    if (table >= tables.size()) {
      bad = Status::DataLoss("a row of table " + std::to_string(table) + ", which the job lacks");
      return;
    }
    const embedding::TableSpec& spec = tables[table];
    const embedding::RowRef row{const_cast<uint8_t*>(bytes)};
    part.AddRow(table, id, {row.embedding(), spec.dim}, {row.state(spec.dim), spec.state_floats()},
                row.meta()->last_updated_step, row.meta()->frequency);
    ++n;
  }));
  TANDEM_RETURN_IF_ERROR(bad);
  TANDEM_RETURN_IF_ERROR(
      store->ForEachAdmissionCount([&](uint32_t table, uint64_t id, uint64_t count) {
        part.AddAdmissionCounter(table, id, count);
      }));
  sum->Merge(part);
  if (rows != nullptr) *rows = n;
  return Status::Ok();
}

}  // namespace tandem::ps
