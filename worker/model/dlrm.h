// DLRM (model.type: dlrm, the default; DESIGN §2): bottom MLP over the dense features, an
// interaction with the T pooled embeddings (dot, or concat), a top MLP to the logits.
//
// Flat layout: bottom_mlp.0.weight [out x in], bottom_mlp.0.bias [out], ..., top_mlp.{K-1}.bias,
// then, for dot with features of another width than bottom_mlp.back() (mixed-width tables),
// each such feature f's learned projection proj.f.0.weight [D x d_f], proj.f.0.bias [D].
// Bottom layer 0 has in = num_dense; top layer 0 has in = the interaction width (dot:
// D + (T+1)T/2, concat: bottom_mlp.back() + the sum of the widths).
#pragma once

#include <memory>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/model/interaction.h"
#include "worker/model/network.h"

namespace tandem::model {

class DlrmNetwork final : public Network {
 public:
  // InvalidArgument for an unknown interaction or wide features.
  static StatusOr<std::unique_ptr<Network>> Create(const config::ModelConfig& config,
                                                   const ModelInputs& inputs);

  void SetPrecision(device::Precision precision) override;
  const float* Forward(device::Backend* be, int64_t batch, const float* dense,
                       const float* const* pooled) override;
  void Backward(device::Backend* be, int64_t batch, const float* dense, const float* const* pooled,
                const float* d_logits, float* const* d_pooled) override;

 private:
  DlrmNetwork(const config::ModelConfig& config, const ModelInputs& inputs,
              std::unique_ptr<Interaction> interaction);
  void Reserve(device::Backend* be, int64_t batch);

  Mlp bottom_;
  std::unique_ptr<Interaction> interaction_;
  Mlp top_;
  // Per feature: the linear projection to the dot width, or null (dot needs one width).
  std::vector<std::unique_ptr<Mlp>> proj_;
  std::vector<device::Buffer<float>> d_proj_out_;  // per projected feature: batch x D
  std::vector<const float*> inter_in_;             // what the interaction reads per feature
  std::vector<float*> inter_d_;                    // where it writes their gradients
  int64_t capacity_ = 0;
  device::Buffer<float> inter_out_;  // batch x interaction width
  device::Buffer<float> d_inter_;    // batch x interaction width
  device::Buffer<float> d_bottom_;   // batch x bottom_mlp.back()
};

}  // namespace tandem::model
