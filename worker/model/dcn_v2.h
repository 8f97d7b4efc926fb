// DCN-v2 (model.type: dcn_v2; Wang et al., "DCN V2", WWW'21): a cross network over
// x0 = [bottom_mlp(dense), pooled embeddings] (concat_input.h), each layer
//   x_{l+1} = x0 * (W_l x_l + b_l) + x_l          (model.dcn.low_rank = 0: W_l full, W x W)
//   x_{l+1} = x0 * (U_l (V_l x_l + c_l) + b_l) + x_l   (low_rank r: V_l r x W, U_l W x r)
// for model.dcn.cross_layers layers, then either
//   stacked (model.dcn.structure, the default): top_mlp over x_L to the logits, or
//   parallel: a deep tower (top_mlp without its last layer, ReLU) over x0 beside the cross
//   network, and one linear layer ("head") over [x_L, deep(x0)] to the logits.
// The low-rank V carries a bias c too: U(Vx + c) + b spans the same functions as UVx + b.
//
// Flat layout: bottom_mlp.*, cross.0 (full) or cross.0.v, cross.0.u (low rank), ..., then
// top_mlp.* (stacked) or top_mlp.* (the deep tower) and head (parallel).
#pragma once

#include <memory>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/model/concat_input.h"
#include "worker/model/network.h"

namespace tandem::model {

class DcnV2Network final : public Network {
 public:
  // InvalidArgument for wide features, cross_layers < 1 or low_rank < 0.
  static StatusOr<std::unique_ptr<Network>> Create(const config::ModelConfig& config,
                                                   const ModelInputs& inputs);

  void SetPrecision(device::Precision precision) override;
  const float* Forward(device::Backend* be, int64_t batch, const float* dense,
                       const float* const* pooled) override;
  void Backward(device::Backend* be, int64_t batch, const float* dense, const float* const* pooled,
                const float* d_logits, float* const* d_pooled) override;

 private:
  struct Cross {
    std::unique_ptr<Linear> full;  // W x W, or null when low rank
    std::unique_ptr<Linear> v;     // r x W
    std::unique_ptr<Linear> u;     // W x r
  };
  DcnV2Network(const config::ModelConfig& config, const ModelInputs& inputs);
  void Reserve(device::Backend* be, int64_t batch);

  ConcatInput input_;
  std::vector<Cross> cross_;
  bool parallel_;
  Mlp top_;      // stacked: the top MLP to the logits; parallel: the deep tower
  Linear head_;  // parallel only
  int64_t capacity_ = 0;
  const float* x0_ = nullptr;             // the last Forward's input
  std::vector<device::Buffer<float>> x_;  // x_1 .. x_L (x_0 is the input's)
  std::vector<device::Buffer<float>> h_;  // the linear part of each layer
  std::vector<device::Buffer<float>> v_;  // low rank: V x_l + c
  device::Buffer<float> cat_, d_cat_;     // parallel: [x_L, deep(x0)]
  device::Buffer<float> logits_;
  device::Buffer<float> g_, d_next_, dh_, dv_, d_x0_, d_deep_in_;
};

}  // namespace tandem::model
