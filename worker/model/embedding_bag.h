// Embedding-bag pooling over de-duplicated rows (DESIGN §4 steps 2-3). The data pipeline gives,
// per table, the unique ids of the batch and an inverse index from each lookup to its unique
// position; the worker pulls the unique rows, pools them per sample here, and after backward
// scatters each bag's gradient back to per-unique-row gradients, summed in sample order
// (PROTOCOLS §5.1), ready to push.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "worker/device/backend.h"

namespace tandem::model {

using device::Backend;

enum class Pooling { kSum, kMean };

// The lookups of one table for one batch.
struct BagIndex {
  int64_t batch = 0;                 // samples
  const int64_t* offsets = nullptr;  // batch + 1 entries; sample s owns [offsets[s], offsets[s+1])
  const int64_t* inverse = nullptr;  // offsets[batch] entries, each in [0, num_unique)
  int64_t num_unique = 0;            // rows of the unique-row buffers
  const float* weights = nullptr;    // offsets[batch] per-lookup weights, or null for all 1
};

// Stateless helpers; thread-compatible.
class EmbeddingBag {
 public:
  // InvalidArgument unless offsets start at 0, never decrease and every inverse entry indexes a
  // unique row. Call it where the index comes from outside (the data pipeline), not per step.
  static Status Validate(const BagIndex& index);

  // pooled (batch x d) from rows (num_unique x d): sum or mean per sample, in lookup order; an
  // empty bag pools to 0.
  static void Forward(Backend* be, const BagIndex& index, int64_t d, Pooling pooling,
                      const float* rows, float* pooled);

  // Overwrites d_rows (num_unique x d): for each unique row the sum, in sample order, of the
  // pooled gradients of the bags that looked it up (once per lookup; mean scales by 1/count).
  static void Backward(Backend* be, const BagIndex& index, int64_t d, Pooling pooling,
                       const float* d_pooled, float* d_rows);
};

}  // namespace tandem::model
