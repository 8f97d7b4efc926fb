#include "worker/model/wide_deep.h"

namespace tandem::model {

StatusOr<std::unique_ptr<Network>> WideDeepNetwork::Create(const config::ModelConfig& config,
                                                           const ModelInputs& inputs) {
  if (inputs.num_wide != inputs.num_fields())
    return Status::InvalidArgument("wide_deep: one wide feature per field");
  for (int64_t f = inputs.num_fields(); f < static_cast<int64_t>(inputs.dims.size()); ++f) {
    if (inputs.dims[f] != inputs.num_labels)
      return Status::InvalidArgument("wide_deep: wide tables have one column per label");
  }
  return std::unique_ptr<Network>(new WideDeepNetwork(config, inputs));
}

WideDeepNetwork::WideDeepNetwork(const config::ModelConfig& config, const ModelInputs& inputs)
    : inputs_(inputs),
      input_(config, inputs),
      top_(input_.width(), config.top_mlp, /*relu_last=*/false) {
  layout_.Add("bottom_mlp", input_.bottom());
  layout_.Add("top_mlp", &top_);
}

void WideDeepNetwork::SetPrecision(device::Precision precision) {
  input_.bottom()->SetPrecision(precision, /*keep_last_fp32=*/false);
  top_.SetPrecision(precision, /*keep_last_fp32=*/true);
}

const float* WideDeepNetwork::Forward(device::Backend* be, int64_t batch, const float* dense,
                                      const float* const* pooled) {
  if (batch > capacity_) {
    logits_.Reset(be, batch * inputs_.num_labels);
    d_x0_.Reset(be, batch * input_.width());
    capacity_ = batch;
  }
  x0_ = input_.Forward(be, batch, dense, pooled);
  be->Copy(batch * inputs_.num_labels, top_.Forward(be, batch, x0_), logits_.data());
  AddWide(be, batch, inputs_, pooled, logits_.data());
  return logits_.data();
}

void WideDeepNetwork::Backward(device::Backend* be, int64_t batch, const float* dense,
                               const float* const* pooled, const float* d_logits,
                               float* const* d_pooled) {
  (void)pooled;
  top_.Backward(be, batch, x0_, d_logits, d_x0_.data());
  input_.Backward(be, batch, dense, d_x0_.data(), d_pooled);
  WideBackward(be, batch, inputs_, d_logits, d_pooled);
}

}  // namespace tandem::model
