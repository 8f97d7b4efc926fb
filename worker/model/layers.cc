#include "worker/model/layers.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "common/embedding/initializer.h"

namespace tandem::model {
namespace {

constexpr float kTwoPowMinus24 = 1.0f / 16777216.0f;  // scales a 24-bit integer into [0, 1)

}  // namespace

void InitGlorotUniform(uint64_t seed, uint32_t layer_index, int64_t in, int64_t out, float* w) {
  const float scale = static_cast<float>(std::sqrt(6.0 / static_cast<double>(in + out)));
  const std::array<uint32_t, 2> key = {static_cast<uint32_t>(seed),
                                       static_cast<uint32_t>(seed >> 32) ^ kDenseInitTag};
  const int64_t n = in * out;
  for (int64_t block = 0; block * 4 < n; ++block) {
    const std::array<uint32_t, 4> words = embedding::Philox4x32(
        {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), layer_index, 0}, key);
    const int64_t count = std::min<int64_t>(4, n - block * 4);
    for (int64_t j = 0; j < count; ++j) {
      // Same exact mapping as InitialEmbedding: (2u - 1) is exact, times scale rounds once.
      const float u = static_cast<float>(words[j] >> 8) * kTwoPowMinus24;
      w[block * 4 + j] = (2.0f * u - 1.0f) * scale;
    }
  }
}

void Linear::Bind(float* params, float* grads) {
  w_ = params;
  b_ = params + out_ * in_;
  dw_ = grads;
  db_ = grads + out_ * in_;
}

void Linear::Forward(Backend* be, int64_t batch, const float* x, float* y, bool relu) const {
  be->LinearForward(precision_, batch, in_, out_, x, w_, b_, relu, y);
}

void Linear::Backward(Backend* be, int64_t batch, const float* x, const float* dy,
                      float* dx) const {
  be->GemmMixed(precision_, true, false, out_, in_, batch, 1.0f, dy, x, 0.0f, dw_);  // dy^T x
  be->BiasGrad(batch, out_, dy, db_);
  if (dx != nullptr)
    be->GemmMixed(precision_, false, false, batch, in_, out_, 1.0f, dy, w_, 0.0f, dx);
}

Mlp::Mlp(int64_t in, const std::vector<int64_t>& sizes, bool relu_last)
    : in_(in), relu_last_(relu_last) {
  int64_t prev = in;
  for (int64_t size : sizes) {
    layers_.emplace_back(prev, size);
    prev = size;
  }
  acts_.resize(layers_.size());
  d_pre_.resize(layers_.size());
  d_in_.resize(layers_.size());
}

int64_t Mlp::num_params() const {
  int64_t total = 0;
  for (const Linear& layer : layers_) total += layer.num_params();
  return total;
}

void Mlp::Bind(float* params, float* grads) {
  for (Linear& layer : layers_) {
    layer.Bind(params, grads);
    params += layer.num_params();
    grads += layer.num_params();
  }
}

void Mlp::Init(uint64_t seed, uint32_t first_layer_index, float* params) const {
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Linear& layer = layers_[l];
    InitGlorotUniform(seed, first_layer_index + static_cast<uint32_t>(l), layer.in(), layer.out(),
                      params);
    std::fill_n(params + layer.in() * layer.out(), layer.out(), 0.0f);
    params += layer.num_params();
  }
}

void Mlp::SetPrecision(Precision precision, bool keep_last_fp32) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    const bool last = l + 1 == layers_.size();
    layers_[l].set_precision(last && keep_last_fp32 ? Precision::kFp32 : precision);
  }
}

void Mlp::Reserve(Backend* be, int64_t batch) {
  if (batch <= capacity_) return;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const int64_t size = batch * layers_[l].out();
    acts_[l].Reset(be, size);
    d_pre_[l].Reset(be, size);
    d_in_[l].Reset(be, batch * layers_[l].in());
  }
  capacity_ = batch;
}

const float* Mlp::Forward(Backend* be, int64_t batch, const float* x) {
  Reserve(be, batch);
  const float* input = x;
  for (size_t l = 0; l < layers_.size(); ++l) {
    float* y = acts_[l].data();
    layers_[l].Forward(be, batch, input, y, HasRelu(l));
    input = y;
  }
  return input;
}

void Mlp::Backward(Backend* be, int64_t batch, const float* x, const float* dy, float* dx) {
  if (layers_.empty()) {
    if (dx != nullptr) be->Copy(batch * in_, dy, dx);
    return;
  }
  const float* grad = dy;
  for (size_t l = layers_.size(); l-- > 0;) {
    const Linear& layer = layers_[l];
    if (HasRelu(l)) {
      Relu::Backward(be, batch * layer.out(), acts_[l].data(), grad, d_pre_[l].data());
      grad = d_pre_[l].data();
    }
    const float* input = l == 0 ? x : acts_[l - 1].data();
    float* d_input = l == 0 ? dx : d_in_[l].data();
    layer.Backward(be, batch, input, grad, d_input);
    grad = d_input;
  }
}

}  // namespace tandem::model
