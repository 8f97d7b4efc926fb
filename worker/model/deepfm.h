// DeepFM (model.type: deepfm; Guo et al., IJCAI'17): the fields are the bottom MLP's output
// over the dense features and the F pooled embeddings, all of width k = bottom_mlp.back()
// (a feature of another width goes through a learned projection, as DLRM's dot does);
//   logit_t = top_mlp([fields])_t + FM(fields) + sum over fields of wide_f,t
// where FM is the second-order factorisation machine 0.5 * sum_c ((sum_i v_ic)^2 - sum_i v_ic^2)
// and wide_f is the first-order term: field f's ids looked up in its table's wide companion
// (width num_labels, on the PS like any table; network_factory.h).
//
// Flat layout: bottom_mlp.*, top_mlp.*, then proj.f.* for each projected feature.
#pragma once

#include <memory>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/model/network.h"

namespace tandem::model {

class DeepFmNetwork final : public Network {
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
  DeepFmNetwork(const config::ModelConfig& config, const ModelInputs& inputs);
  void Reserve(device::Backend* be, int64_t batch);
  int64_t num_vectors() const { return inputs_.num_fields() + 1; }

  ModelInputs inputs_;
  int64_t k_;
  Mlp bottom_;
  Mlp top_;
  std::vector<std::unique_ptr<Mlp>> proj_;  // per field, or null
  int64_t capacity_ = 0;
  device::Buffer<float> fields_, d_fields_, d_fm_fields_;  // batch x (F+1) x k
  device::Buffer<float> fm_, d_fm_;                        // batch
  device::Buffer<float> logits_;                           // batch x num_labels
  device::Buffer<float> d_bottom_;                         // batch x k
  std::vector<device::Buffer<float>> d_field_;             // per projected field: batch x k
};

}  // namespace tandem::model
