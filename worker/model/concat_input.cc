#include "worker/model/concat_input.h"

#include <vector>

namespace tandem::model {
namespace {
std::vector<int64_t> FieldDims(const ModelInputs& inputs) {
  return {inputs.dims.begin(), inputs.dims.begin() + inputs.num_fields()};
}
}  // namespace

ConcatInput::ConcatInput(const config::ModelConfig& config, const ModelInputs& inputs)
    : bottom_(inputs.num_dense, config.bottom_mlp, /*relu_last=*/true),
      concat_(bottom_.out(), FieldDims(inputs)) {}

const float* ConcatInput::Forward(device::Backend* be, int64_t batch, const float* dense,
                                  const float* const* pooled) {
  if (batch > capacity_) {
    x0_.Reset(be, batch * width());
    d_bottom_.Reset(be, batch * bottom_.out());
    capacity_ = batch;
  }
  const float* bottom_out = bottom_.Forward(be, batch, dense);
  concat_.Forward(be, batch, bottom_out, pooled, x0_.data());
  return x0_.data();
}

void ConcatInput::Backward(device::Backend* be, int64_t batch, const float* dense,
                           const float* d_x0, float* const* d_pooled) {
  concat_.Backward(be, batch, d_x0, d_bottom_.data(), d_pooled);
  bottom_.Backward(be, batch, dense, d_bottom_.data(), /*dx=*/nullptr);
}

void AddWide(device::Backend* be, int64_t batch, const ModelInputs& inputs,
             const float* const* pooled, float* logits) {
  for (int64_t f = inputs.num_fields(); f < static_cast<int64_t>(inputs.dims.size()); ++f) {
    be->Axpy(batch * inputs.num_labels, 1.0f, pooled[f], logits);
  }
}

void WideBackward(device::Backend* be, int64_t batch, const ModelInputs& inputs,
                  const float* d_logits, float* const* d_pooled) {
  for (int64_t f = inputs.num_fields(); f < static_cast<int64_t>(inputs.dims.size()); ++f) {
    be->Copy(batch * inputs.num_labels, d_logits, d_pooled[f]);
  }
}

}  // namespace tandem::model
