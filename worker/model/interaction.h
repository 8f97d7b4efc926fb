// Feature interactions between the bottom-MLP output and the T pooled embeddings (DESIGN §2).
// A new interaction (e.g. DCN cross layers) is a new subclass plus a case in MakeInteraction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/device/backend.h"
#include "worker/device/buffer.h"

namespace tandem::model {

using device::Backend;

// Maps (bottom: batch x bottom_dim, pooled: T pointers to batch x d) to batch x output_width().
// Parameter-free. Thread-safety: requires external synchronization (holds a workspace, in the
// memory of the backend passed to Forward, which must outlive the object).
class Interaction {
 public:
  virtual ~Interaction() = default;
  virtual int64_t output_width() const = 0;
  virtual void Forward(Backend* be, int64_t batch, const float* bottom, const float* const* pooled,
                       float* out) = 0;
  // Uses the inputs of the last Forward (same batch). Overwrites d_bottom and every d_pooled[t].
  virtual void Backward(Backend* be, int64_t batch, const float* d_out, float* d_bottom,
                        float* const* d_pooled) = 0;
};

// DLRM dot interaction: with x_0 = bottom and x_{t+1} = pooled[t] (all of dim d), the output is
// [x_0, <x_i, x_j> for i < j in row-major strict-upper-triangle order], width d + (T+1)T/2.
class DotInteraction final : public Interaction {
 public:
  DotInteraction(int64_t num_tables, int64_t dim) : num_tables_(num_tables), dim_(dim) {}

  int64_t output_width() const override;
  void Forward(Backend* be, int64_t batch, const float* bottom, const float* const* pooled,
               float* out) override;
  void Backward(Backend* be, int64_t batch, const float* d_out, float* d_bottom,
                float* const* d_pooled) override;

 private:
  int64_t num_vectors() const { return num_tables_ + 1; }

  int64_t num_tables_;
  int64_t dim_;
  device::Buffer<float> stacked_;    // batch x (T+1) x d: the vectors of the last Forward
  device::Buffer<float> d_stacked_;  // the same shape, for Backward
};

// Wide&Deep-style concatenation: [bottom, pooled_0, ..., pooled_{T-1}], width bottom_dim plus
// the sum of the pooled widths (which may differ: mixed-width tables).
class ConcatInteraction final : public Interaction {
 public:
  ConcatInteraction(int64_t bottom_dim, std::vector<int64_t> dims);

  int64_t output_width() const override { return width_; }
  void Forward(Backend* be, int64_t batch, const float* bottom, const float* const* pooled,
               float* out) override;
  void Backward(Backend* be, int64_t batch, const float* d_out, float* d_bottom,
                float* const* d_pooled) override;

 private:
  int64_t bottom_dim_;
  std::vector<int64_t> dims_;
  int64_t width_;
};

// "dot" (requires bottom_dim and every dim equal) or "concat" over pooled inputs of widths
// `dims`; InvalidArgument otherwise.
StatusOr<std::unique_ptr<Interaction>> MakeInteraction(const std::string& kind, int64_t bottom_dim,
                                                       const std::vector<int64_t>& dims);

}  // namespace tandem::model
