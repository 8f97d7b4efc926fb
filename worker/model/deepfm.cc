#include "worker/model/deepfm.h"

#include <string>

#include "worker/model/concat_input.h"

namespace tandem::model {

StatusOr<std::unique_ptr<Network>> DeepFmNetwork::Create(const config::ModelConfig& config,
                                                         const ModelInputs& inputs) {
  if (inputs.num_wide != inputs.num_fields())
    return Status::InvalidArgument("deepfm: one wide (first-order) feature per field");
  for (int64_t f = inputs.num_fields(); f < static_cast<int64_t>(inputs.dims.size()); ++f) {
    if (inputs.dims[f] != inputs.num_labels)
      return Status::InvalidArgument("deepfm: wide tables have one column per label");
  }
  return std::unique_ptr<Network>(new DeepFmNetwork(config, inputs));
}

DeepFmNetwork::DeepFmNetwork(const config::ModelConfig& config, const ModelInputs& inputs)
    : inputs_(inputs),
      k_(config.bottom_mlp.back()),
      bottom_(inputs.num_dense, config.bottom_mlp, /*relu_last=*/true),
      top_((inputs.num_fields() + 1) * k_, config.top_mlp, /*relu_last=*/false) {
  proj_.resize(static_cast<size_t>(inputs.num_fields()));
  d_field_.resize(proj_.size());
  for (size_t f = 0; f < proj_.size(); ++f) {
    if (inputs.dims[f] != k_) {
      proj_[f] = std::make_unique<Mlp>(inputs.dims[f], std::vector<int64_t>{k_},
                                       /*relu_last=*/false);
    }
  }
  layout_.Add("bottom_mlp", &bottom_);
  layout_.Add("top_mlp", &top_);
  for (size_t f = 0; f < proj_.size(); ++f) {
    if (proj_[f]) layout_.Add("proj." + std::to_string(f), proj_[f].get());
  }
}

void DeepFmNetwork::Reserve(device::Backend* be, int64_t batch) {
  if (batch <= capacity_) return;
  const int64_t n = batch * num_vectors() * k_;
  fields_.Reset(be, n);
  d_fields_.Reset(be, n);
  d_fm_fields_.Reset(be, n);
  fm_.Reset(be, batch);
  d_fm_.Reset(be, batch);
  logits_.Reset(be, batch * inputs_.num_labels);
  d_bottom_.Reset(be, batch * k_);
  for (size_t f = 0; f < proj_.size(); ++f) {
    if (proj_[f]) d_field_[f].Reset(be, batch * k_);
  }
  capacity_ = batch;
}

void DeepFmNetwork::SetPrecision(device::Precision precision) {
  bottom_.SetPrecision(precision, /*keep_last_fp32=*/false);
  top_.SetPrecision(precision, /*keep_last_fp32=*/true);
  for (auto& p : proj_) {
    if (p) p->SetPrecision(precision, /*keep_last_fp32=*/false);
  }
}

const float* DeepFmNetwork::Forward(device::Backend* be, int64_t batch, const float* dense,
                                    const float* const* pooled) {
  Reserve(be, batch);
  const int64_t n = num_vectors();
  const int64_t labels = inputs_.num_labels;
  float* x = fields_.data();  // batch x n x k: also the deep tower's input
  be->CopyStrided(batch, k_, bottom_.Forward(be, batch, dense), k_, x, n * k_, false);
  for (size_t f = 0; f < proj_.size(); ++f) {
    const float* v = proj_[f] ? proj_[f]->Forward(be, batch, pooled[f]) : pooled[f];
    be->CopyStrided(batch, k_, v, k_, x + (f + 1) * k_, n * k_, false);
  }
  be->FmForward(batch, n, k_, x, fm_.data(), 1);
  be->Copy(batch * labels, top_.Forward(be, batch, x), logits_.data());
  for (int64_t t = 0; t < labels; ++t) {
    be->CopyStrided(batch, 1, fm_.data(), 1, logits_.data() + t, labels, /*accumulate=*/true);
  }
  AddWide(be, batch, inputs_, pooled, logits_.data());
  return logits_.data();
}

void DeepFmNetwork::Backward(device::Backend* be, int64_t batch, const float* dense,
                             const float* const* pooled, const float* d_logits,
                             float* const* d_pooled) {
  const int64_t n = num_vectors();
  const int64_t labels = inputs_.num_labels;
  const float* x = fields_.data();
  top_.Backward(be, batch, x, d_logits, d_fields_.data());
  // The FM term reaches every label's logit.
  be->CopyStrided(batch, 1, d_logits, labels, d_fm_.data(), 1, false);
  for (int64_t t = 1; t < labels; ++t) {
    be->CopyStrided(batch, 1, d_logits + t, labels, d_fm_.data(), 1, /*accumulate=*/true);
  }
  be->FmBackward(batch, n, k_, x, d_fm_.data(), 1, d_fm_fields_.data());
  be->Axpy(batch * n * k_, 1.0f, d_fm_fields_.data(), d_fields_.data());
  be->CopyStrided(batch, k_, d_fields_.data(), n * k_, d_bottom_.data(), k_, false);
  for (size_t f = 0; f < proj_.size(); ++f) {
    float* dst = proj_[f] ? d_field_[f].data() : d_pooled[f];
    be->CopyStrided(batch, k_, d_fields_.data() + (f + 1) * k_, n * k_, dst, k_, false);
    if (proj_[f]) proj_[f]->Backward(be, batch, pooled[f], d_field_[f].data(), d_pooled[f]);
  }
  bottom_.Backward(be, batch, dense, d_bottom_.data(), /*dx=*/nullptr);
  WideBackward(be, batch, inputs_, d_logits, d_pooled);
}

}  // namespace tandem::model
