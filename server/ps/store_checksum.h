// The embedding part of model_checksum (DESIGN §12) of one store: every materialised row and
// admission counter. Used by `tandem checksum --checkpoint`, which opens a checkpoint's shards
// from the durable copy.
#pragma once

#include <cstdint>
#include <string>

#include "common/model_checksum.h"
#include "common/status.h"
#include "server/ps/embedding_store.h"

namespace tandem::ps {

// Adds the store's part to `sum` only when it succeeded; `rows` (may be null) gets the row
// count. Without `scan`, the sum the store keeps (instant; a store written before the sum was
// kept is scanned). With `scan`, every row is visited (from 2^20 rows on, progress and an
// estimate of the time left on stderr, naming `what`) and the result is compared with the kept
// sum: kDataLoss when they differ.
Status AddStoreToChecksum(EmbeddingStore* store, ModelChecksum* sum, uint64_t* rows, bool scan,
                          const std::string& what);

}  // namespace tandem::ps
