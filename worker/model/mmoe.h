// MMoE (model.type: mmoe; Ma et al., "Modeling Task Relationships in Multi-task Learning with
// Multi-gate Mixture-of-Experts", KDD'18): over x0 = [bottom_mlp(dense), pooled embeddings]
// (concat_input.h), model.mmoe.num_experts shared experts (each an MLP of sizes
// model.mmoe.expert_mlp, ReLU after every layer), and per label t a gate
// g_t = softmax(W_t x0 + b_t) over the experts and a tower (top_mlp with its last size, the
// label count, replaced by 1) over sum_e g_t,e * expert_e(x0), giving logit t.
//
// Flat layout: bottom_mlp.*, expert.0.* .. expert.{E-1}.*, gate.0 .. gate.{T-1},
// tower.0.* .. tower.{T-1}.*.
#pragma once

#include <memory>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/model/concat_input.h"
#include "worker/model/network.h"

namespace tandem::model {

class MmoeNetwork final : public Network {
 public:
  // InvalidArgument for wide features, num_experts < 1 or an empty expert_mlp.
  static StatusOr<std::unique_ptr<Network>> Create(const config::ModelConfig& config,
                                                   const ModelInputs& inputs);

  void SetPrecision(device::Precision precision) override;
  const float* Forward(device::Backend* be, int64_t batch, const float* dense,
                       const float* const* pooled) override;
  void Backward(device::Backend* be, int64_t batch, const float* dense, const float* const* pooled,
                const float* d_logits, float* const* d_pooled) override;

 private:
  MmoeNetwork(const config::ModelConfig& config, const ModelInputs& inputs);
  void Reserve(device::Backend* be, int64_t batch);

  int64_t tasks_;
  ConcatInput input_;
  std::vector<std::unique_ptr<Mlp>> experts_;
  std::vector<std::unique_ptr<Linear>> gates_;
  std::vector<std::unique_ptr<Mlp>> towers_;
  int64_t e_;  // experts
  int64_t h_;  // expert output width
  int64_t capacity_ = 0;
  const float* x0_ = nullptr;
  device::Buffer<float> stacked_, d_stacked_;              // batch x E x H
  std::vector<device::Buffer<float>> gate_logits_, gate_;  // per task: batch x E
  std::vector<device::Buffer<float>> mix_;                 // per task: batch x H
  device::Buffer<float> logits_;                           // batch x T
  device::Buffer<float> d_tower_, d_mix_, d_gate_, d_gate_logits_, d_expert_, d_x0_, d_tmp_;
};

}  // namespace tandem::model
