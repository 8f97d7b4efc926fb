#include "worker/model/embedding_bag.h"

#include <string>

namespace tandem::model {

Status EmbeddingBag::Validate(const BagIndex& index) {
  if (index.batch < 0 || index.num_unique < 0) {
    return Status::InvalidArgument("embedding bag: negative batch or unique count");
  }
  if (index.offsets == nullptr || index.offsets[0] != 0) {
    return Status::InvalidArgument("embedding bag: offsets must start at 0");
  }
  for (int64_t s = 0; s < index.batch; ++s) {
    if (index.offsets[s + 1] < index.offsets[s]) {
      return Status::InvalidArgument("embedding bag: offsets decrease at sample " +
                                     std::to_string(s));
    }
  }
  const int64_t lookups = index.offsets[index.batch];
  if (lookups > 0 && index.inverse == nullptr) {
    return Status::InvalidArgument("embedding bag: missing inverse index");
  }
  for (int64_t k = 0; k < lookups; ++k) {
    if (index.inverse[k] < 0 || index.inverse[k] >= index.num_unique) {
      return Status::InvalidArgument("embedding bag: inverse index " + std::to_string(k) +
                                     " out of range");
    }
  }
  return Status::Ok();
}

void EmbeddingBag::Forward(Backend* be, const BagIndex& index, int64_t d, Pooling pooling,
                           const float* rows, float* pooled) {
  be->EmbeddingBagForward(index.batch, d, rows, index.offsets, index.inverse, index.weights,
                          pooling == Pooling::kMean, pooled);
}

void EmbeddingBag::Backward(Backend* be, const BagIndex& index, int64_t d, Pooling pooling,
                            const float* d_pooled, float* d_rows) {
  be->EmbeddingBagBackward(index.batch, d, index.num_unique, d_pooled, index.offsets, index.inverse,
                           index.weights, pooling == Pooling::kMean, d_rows);
}

}  // namespace tandem::model
