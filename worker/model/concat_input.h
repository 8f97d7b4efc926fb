// The input block DCN-v2, Wide & Deep and MMoE share (issue 19): x0 = [bottom_mlp(dense),
// pooled_0, ..., pooled_{F-1}] over the F fields (not the wide features), any widths.
#pragma once

#include <cstdint>

#include "common/config/job_config.h"
#include "worker/model/interaction.h"
#include "worker/model/network.h"

namespace tandem::model {

// Thread-safety: requires external synchronization; workspaces in the backend's memory.
class ConcatInput {
 public:
  ConcatInput(const config::ModelConfig& config, const ModelInputs& inputs);

  Mlp* bottom() { return &bottom_; }
  int64_t width() const { return concat_.output_width(); }
  // x0 (batch x width()), valid until the next Forward.
  const float* Forward(device::Backend* be, int64_t batch, const float* dense,
                       const float* const* pooled);
  // Overwrites the bottom MLP's gradients and d_pooled[f] for the F fields.
  void Backward(device::Backend* be, int64_t batch, const float* dense, const float* d_x0,
                float* const* d_pooled);

 private:
  Mlp bottom_;
  ConcatInteraction concat_;
  int64_t capacity_ = 0;
  device::Buffer<float> x0_;
  device::Buffer<float> d_bottom_;
};

// The first-order ("wide") part of DeepFM and Wide & Deep: the wide features' pooled rows (one
// value per label each) added to the logits (batch x num_labels), in feature order.
void AddWide(device::Backend* be, int64_t batch, const ModelInputs& inputs,
             const float* const* pooled, float* logits);
// Their gradients: each wide feature's d_pooled is d_logits.
void WideBackward(device::Backend* be, int64_t batch, const ModelInputs& inputs,
                  const float* d_logits, float* const* d_pooled);

}  // namespace tandem::model
