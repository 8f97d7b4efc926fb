// Wide & Deep (model.type: wide_deep; Cheng et al., DLRS'16):
//   logit_t = top_mlp([bottom_mlp(dense), pooled embeddings])_t + sum over fields of wide_f,t
// The deep part is the top MLP over x0 (concat_input.h); the wide part is linear over the
// sparse ids: field f's ids looked up in its table's wide companion (width num_labels, on the
// PS, trained with model.wide.optimizer, FTRL by default; network_factory.h).
//
// Flat layout: bottom_mlp.*, top_mlp.*.
#pragma once

#include <memory>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/model/concat_input.h"
#include "worker/model/network.h"

namespace tandem::model {

class WideDeepNetwork final : public Network {
 public:
  // InvalidArgument unless there is one wide feature per field.
  static StatusOr<std::unique_ptr<Network>> Create(const config::ModelConfig& config,
                                                   const ModelInputs& inputs);

  void SetPrecision(device::Precision precision) override;
  const float* Forward(device::Backend* be, int64_t batch, const float* dense,
                       const float* const* pooled) override;
  void Backward(device::Backend* be, int64_t batch, const float* dense, const float* const* pooled,
                const float* d_logits, float* const* d_pooled) override;

 private:
  WideDeepNetwork(const config::ModelConfig& config, const ModelInputs& inputs);

  ModelInputs inputs_;
  ConcatInput input_;
  Mlp top_;
  int64_t capacity_ = 0;
  const float* x0_ = nullptr;  // the last Forward's input
  device::Buffer<float> logits_, d_x0_;
};

}  // namespace tandem::model
