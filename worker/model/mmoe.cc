#include "worker/model/mmoe.h"

#include <string>

namespace tandem::model {
namespace {
std::vector<int64_t> Tower(const std::vector<int64_t>& top_mlp) {
  std::vector<int64_t> sizes(top_mlp.begin(), top_mlp.end() - 1);
  sizes.push_back(1);
  return sizes;
}
}  // namespace

StatusOr<std::unique_ptr<Network>> MmoeNetwork::Create(const config::ModelConfig& config,
                                                       const ModelInputs& inputs) {
  if (inputs.num_wide != 0) return Status::InvalidArgument("mmoe: no wide features");
  if (config.mmoe_num_experts < 1 || config.mmoe_expert_mlp.empty())
    return Status::InvalidArgument("mmoe: num_experts >= 1 and a non-empty expert_mlp");
  return std::unique_ptr<Network>(new MmoeNetwork(config, inputs));
}

MmoeNetwork::MmoeNetwork(const config::ModelConfig& config, const ModelInputs& inputs)
    : tasks_(inputs.num_labels),
      input_(config, inputs),
      e_(config.mmoe_num_experts),
      h_(config.mmoe_expert_mlp.back()) {
  layout_.Add("bottom_mlp", input_.bottom());
  for (int64_t e = 0; e < e_; ++e) {
    experts_.push_back(
        std::make_unique<Mlp>(input_.width(), config.mmoe_expert_mlp, /*relu_last=*/true));
    layout_.Add("expert." + std::to_string(e), experts_.back().get());
  }
  for (int64_t t = 0; t < tasks_; ++t) {
    gates_.push_back(std::make_unique<Linear>(input_.width(), e_));
    layout_.Add("gate." + std::to_string(t), gates_.back().get());
  }
  for (int64_t t = 0; t < tasks_; ++t) {
    towers_.push_back(std::make_unique<Mlp>(h_, Tower(config.top_mlp), /*relu_last=*/false));
    layout_.Add("tower." + std::to_string(t), towers_.back().get());
  }
  gate_logits_.resize(static_cast<size_t>(tasks_));
  gate_.resize(static_cast<size_t>(tasks_));
  mix_.resize(static_cast<size_t>(tasks_));
}

void MmoeNetwork::Reserve(device::Backend* be, int64_t batch) {
  if (batch <= capacity_) return;
  stacked_.Reset(be, batch * e_ * h_);
  d_stacked_.Reset(be, batch * e_ * h_);
  for (size_t t = 0; t < gate_.size(); ++t) {
    gate_logits_[t].Reset(be, batch * e_);
    gate_[t].Reset(be, batch * e_);
    mix_[t].Reset(be, batch * h_);
  }
  logits_.Reset(be, batch * tasks_);
  d_tower_.Reset(be, batch);
  d_mix_.Reset(be, batch * h_);
  d_gate_.Reset(be, batch * e_);
  d_gate_logits_.Reset(be, batch * e_);
  d_expert_.Reset(be, batch * h_);
  d_x0_.Reset(be, batch * input_.width());
  d_tmp_.Reset(be, batch * input_.width());
  capacity_ = batch;
}

void MmoeNetwork::SetPrecision(device::Precision precision) {
  input_.bottom()->SetPrecision(precision, /*keep_last_fp32=*/false);
  for (auto& e : experts_) e->SetPrecision(precision, /*keep_last_fp32=*/false);
  for (auto& g : gates_) g->set_precision(precision);
  for (auto& t : towers_) t->SetPrecision(precision, /*keep_last_fp32=*/true);
}

const float* MmoeNetwork::Forward(device::Backend* be, int64_t batch, const float* dense,
                                  const float* const* pooled) {
  Reserve(be, batch);
  x0_ = input_.Forward(be, batch, dense, pooled);
  for (int64_t e = 0; e < e_; ++e) {
    const float* out = experts_[e]->Forward(be, batch, x0_);
    be->CopyStrided(batch, h_, out, h_, stacked_.data() + e * h_, e_ * h_, false);
  }
  for (int64_t t = 0; t < tasks_; ++t) {
    gates_[t]->Forward(be, batch, x0_, gate_logits_[t].data());
    be->SoftmaxForward(batch, e_, gate_logits_[t].data(), gate_[t].data());
    be->MixtureForward(batch, e_, h_, gate_[t].data(), stacked_.data(), mix_[t].data());
    const float* logit = towers_[t]->Forward(be, batch, mix_[t].data());
    be->CopyStrided(batch, 1, logit, 1, logits_.data() + t, tasks_, false);
  }
  return logits_.data();
}

void MmoeNetwork::Backward(device::Backend* be, int64_t batch, const float* dense,
                           const float* const* pooled, const float* d_logits,
                           float* const* d_pooled) {
  (void)pooled;
  const int64_t w = batch * input_.width();
  for (int64_t t = 0; t < tasks_; ++t) {
    be->CopyStrided(batch, 1, d_logits + t, tasks_, d_tower_.data(), 1, false);
    towers_[t]->Backward(be, batch, mix_[t].data(), d_tower_.data(), d_mix_.data());
    be->MixtureBackward(batch, e_, h_, gate_[t].data(), stacked_.data(), d_mix_.data(),
                        d_gate_.data(), d_stacked_.data(), /*accumulate=*/t > 0);
    be->SoftmaxBackward(batch, e_, gate_[t].data(), d_gate_.data(), d_gate_logits_.data());
    // Task 0's gate writes d_x0; every later contribution adds to it in a fixed order.
    float* dx = t == 0 ? d_x0_.data() : d_tmp_.data();
    gates_[t]->Backward(be, batch, x0_, d_gate_logits_.data(), dx);
    if (t > 0) be->Axpy(w, 1.0f, d_tmp_.data(), d_x0_.data());
  }
  for (int64_t e = 0; e < e_; ++e) {
    be->CopyStrided(batch, h_, d_stacked_.data() + e * h_, e_ * h_, d_expert_.data(), h_, false);
    experts_[e]->Backward(be, batch, x0_, d_expert_.data(), d_tmp_.data());
    be->Axpy(w, 1.0f, d_tmp_.data(), d_x0_.data());
  }
  input_.Backward(be, batch, dense, d_x0_.data(), d_pooled);
}

}  // namespace tandem::model
