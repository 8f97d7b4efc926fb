// The embedding part of model_checksum (DESIGN §12) of one store: every materialised row and
// admission counter. Used by a live shard and by `tandem checksum --checkpoint`, which opens a
// checkpoint's shards from the durable copy.
#pragma once

#include <cstdint>
#include <vector>

#include "common/embedding/table_spec.h"
#include "common/model_checksum.h"
#include "common/status.h"
#include "server/ps/embedding_store.h"

namespace tandem::ps {

// Adds to `sum` only when the whole scan succeeded; `rows` (may be null) gets the row count.
Status AddStoreToChecksum(EmbeddingStore* store, const std::vector<embedding::TableSpec>& tables,
                          ModelChecksum* sum, uint64_t* rows);

}  // namespace tandem::ps
