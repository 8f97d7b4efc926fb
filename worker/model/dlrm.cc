#include "worker/model/dlrm.h"

#include <string>
#include <utility>

namespace tandem::model {

StatusOr<std::unique_ptr<Network>> DlrmNetwork::Create(const config::ModelConfig& config,
                                                       const ModelInputs& inputs) {
  if (inputs.num_wide != 0) return Status::InvalidArgument("dlrm: no wide features");
  // Dot needs one width: features of another width are projected to the bottom MLP's.
  std::vector<int64_t> inter_dims = inputs.dims;
  if (config.interaction == "dot") inter_dims.assign(inputs.dims.size(), config.bottom_mlp.back());
  TANDEM_ASSIGN_OR_RETURN(
      std::unique_ptr<Interaction> interaction,
      MakeInteraction(config.interaction, config.bottom_mlp.back(), inter_dims));
  return std::unique_ptr<Network>(new DlrmNetwork(config, inputs, std::move(interaction)));
}

DlrmNetwork::DlrmNetwork(const config::ModelConfig& config, const ModelInputs& inputs,
                         std::unique_ptr<Interaction> interaction)
    : bottom_(inputs.num_dense, config.bottom_mlp, /*relu_last=*/true),
      interaction_(std::move(interaction)),
      top_(interaction_->output_width(), config.top_mlp, /*relu_last=*/false) {
  proj_.resize(inputs.dims.size());
  d_proj_out_.resize(inputs.dims.size());
  if (config.interaction == "dot") {
    const int64_t width = config.bottom_mlp.back();
    for (size_t f = 0; f < inputs.dims.size(); ++f) {
      if (inputs.dims[f] != width) {
        proj_[f] = std::make_unique<Mlp>(inputs.dims[f], std::vector<int64_t>{width},
                                         /*relu_last=*/false);
      }
    }
  }
  layout_.Add("bottom_mlp", &bottom_);
  layout_.Add("top_mlp", &top_);
  for (size_t f = 0; f < proj_.size(); ++f) {
    if (proj_[f]) layout_.Add("proj." + std::to_string(f), proj_[f].get());
  }
}

void DlrmNetwork::Reserve(device::Backend* be, int64_t batch) {
  if (batch <= capacity_) return;
  const int64_t width = batch * interaction_->output_width();
  inter_out_.Reset(be, width);
  d_inter_.Reset(be, width);
  d_bottom_.Reset(be, batch * bottom_.out());
  for (size_t f = 0; f < proj_.size(); ++f) {
    if (proj_[f]) d_proj_out_[f].Reset(be, batch * proj_[f]->out());
  }
  capacity_ = batch;
}

void DlrmNetwork::SetPrecision(device::Precision precision) {
  bottom_.SetPrecision(precision, /*keep_last_fp32=*/false);
  top_.SetPrecision(precision, /*keep_last_fp32=*/true);
  for (auto& p : proj_) {
    if (p) p->SetPrecision(precision, /*keep_last_fp32=*/false);
  }
}

const float* DlrmNetwork::Forward(device::Backend* be, int64_t batch, const float* dense,
                                  const float* const* pooled) {
  Reserve(be, batch);
  const float* bottom_out = bottom_.Forward(be, batch, dense);
  inter_in_.resize(proj_.size());
  for (size_t f = 0; f < proj_.size(); ++f) {
    inter_in_[f] = proj_[f] ? proj_[f]->Forward(be, batch, pooled[f]) : pooled[f];
  }
  interaction_->Forward(be, batch, bottom_out, inter_in_.data(), inter_out_.data());
  return top_.Forward(be, batch, inter_out_.data());
}

void DlrmNetwork::Backward(device::Backend* be, int64_t batch, const float* dense,
                           const float* const* pooled, const float* d_logits,
                           float* const* d_pooled) {
  top_.Backward(be, batch, inter_out_.data(), d_logits, d_inter_.data());
  inter_d_.resize(proj_.size());
  for (size_t f = 0; f < proj_.size(); ++f) {
    inter_d_[f] = proj_[f] ? d_proj_out_[f].data() : d_pooled[f];
  }
  interaction_->Backward(be, batch, d_inter_.data(), d_bottom_.data(), inter_d_.data());
  for (size_t f = 0; f < proj_.size(); ++f) {
    if (proj_[f]) proj_[f]->Backward(be, batch, pooled[f], d_proj_out_[f].data(), d_pooled[f]);
  }
  bottom_.Backward(be, batch, dense, d_bottom_.data(), /*dx=*/nullptr);
}

}  // namespace tandem::model
