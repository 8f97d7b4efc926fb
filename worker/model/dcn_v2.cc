#include "worker/model/dcn_v2.h"

#include <string>
#include <utility>

namespace tandem::model {
namespace {
std::vector<int64_t> DeepTower(const std::vector<int64_t>& top_mlp) {
  return {top_mlp.begin(), top_mlp.end() - 1};
}
}  // namespace

StatusOr<std::unique_ptr<Network>> DcnV2Network::Create(const config::ModelConfig& config,
                                                        const ModelInputs& inputs) {
  if (inputs.num_wide != 0) return Status::InvalidArgument("dcn_v2: no wide features");
  if (config.dcn_cross_layers < 1 || config.dcn_low_rank < 0)
    return Status::InvalidArgument("dcn_v2: cross_layers >= 1 and low_rank >= 0");
  return std::unique_ptr<Network>(new DcnV2Network(config, inputs));
}

DcnV2Network::DcnV2Network(const config::ModelConfig& config, const ModelInputs& inputs)
    : input_(config, inputs),
      parallel_(config.dcn_structure == "parallel"),
      top_(input_.width(), parallel_ ? DeepTower(config.top_mlp) : config.top_mlp,
           /*relu_last=*/parallel_),
      head_(input_.width() + top_.out(), inputs.num_labels) {
  const int64_t w = input_.width();
  const int64_t r = config.dcn_low_rank;
  layout_.Add("bottom_mlp", input_.bottom());
  cross_.resize(static_cast<size_t>(config.dcn_cross_layers));
  for (size_t l = 0; l < cross_.size(); ++l) {
    const std::string name = "cross." + std::to_string(l);
    Cross& c = cross_[l];
    if (r == 0) {
      c.full = std::make_unique<Linear>(w, w);
      layout_.Add(name, c.full.get());
    } else {
      c.v = std::make_unique<Linear>(w, r);
      c.u = std::make_unique<Linear>(r, w);
      layout_.Add(name + ".v", c.v.get());
      layout_.Add(name + ".u", c.u.get());
    }
  }
  layout_.Add("top_mlp", &top_);
  if (parallel_) layout_.Add("head", &head_);
  x_.resize(cross_.size());
  h_.resize(cross_.size());
  v_.resize(cross_.size());
}

void DcnV2Network::Reserve(device::Backend* be, int64_t batch) {
  if (batch <= capacity_) return;
  const int64_t w = batch * input_.width();
  for (size_t l = 0; l < cross_.size(); ++l) {
    x_[l].Reset(be, w);
    h_[l].Reset(be, w);
    if (cross_[l].v) v_[l].Reset(be, batch * cross_[l].v->out());
  }
  for (auto* b : {&g_, &d_next_, &dh_, &d_x0_, &d_deep_in_}) b->Reset(be, w);
  if (cross_[0].v) dv_.Reset(be, batch * cross_[0].v->out());
  if (parallel_) {
    cat_.Reset(be, batch * head_.in());
    d_cat_.Reset(be, batch * head_.in());
    logits_.Reset(be, batch * head_.out());
  }
  capacity_ = batch;
}

void DcnV2Network::SetPrecision(device::Precision precision) {
  input_.bottom()->SetPrecision(precision, /*keep_last_fp32=*/false);
  for (Cross& c : cross_) {
    for (Linear* l : {c.full.get(), c.v.get(), c.u.get()}) {
      if (l) l->set_precision(precision);
    }
  }
  top_.SetPrecision(precision, /*keep_last_fp32=*/!parallel_);
}

const float* DcnV2Network::Forward(device::Backend* be, int64_t batch, const float* dense,
                                   const float* const* pooled) {
  Reserve(be, batch);
  const int64_t n = batch * input_.width();
  const float* x0 = input_.Forward(be, batch, dense, pooled);
  x0_ = x0;
  const float* x = x0;
  for (size_t l = 0; l < cross_.size(); ++l) {
    const Cross& c = cross_[l];
    if (c.full) {
      c.full->Forward(be, batch, x, h_[l].data());
    } else {
      c.v->Forward(be, batch, x, v_[l].data());
      c.u->Forward(be, batch, v_[l].data(), h_[l].data());
    }
    be->Copy(n, x, x_[l].data());
    be->Mul(n, x0, h_[l].data(), x_[l].data(), /*accumulate=*/true);
    x = x_[l].data();
  }
  if (!parallel_) return top_.Forward(be, batch, x);
  const float* deep = top_.Forward(be, batch, x0);
  const int64_t w = input_.width();
  be->CopyStrided(batch, w, x, w, cat_.data(), head_.in(), false);
  be->CopyStrided(batch, top_.out(), deep, top_.out(), cat_.data() + w, head_.in(), false);
  head_.Forward(be, batch, cat_.data(), logits_.data());
  return logits_.data();
}

void DcnV2Network::Backward(device::Backend* be, int64_t batch, const float* dense,
                            const float* const* pooled, const float* d_logits,
                            float* const* d_pooled) {
  const int64_t w = input_.width();
  const int64_t n = batch * w;
  (void)pooled;
  const float* x0 = x0_;  // the input's buffer, valid until the next Forward
  float* g = g_.data();   // d x_{l+1}
  float* next = d_next_.data();
  if (!parallel_) {
    top_.Backward(be, batch, x_.back().data(), d_logits, g);
    be->Fill(n, 0.0f, d_x0_.data());
  } else {
    head_.Backward(be, batch, cat_.data(), d_logits, d_cat_.data());
    be->CopyStrided(batch, w, d_cat_.data(), head_.in(), g, w, false);
    be->CopyStrided(batch, top_.out(), d_cat_.data() + w, head_.in(), d_deep_in_.data(), top_.out(),
                    false);
    top_.Backward(be, batch, x0, d_deep_in_.data(), d_x0_.data());
  }
  for (size_t l = cross_.size(); l-- > 0;) {
    const Cross& c = cross_[l];
    const float* x_in = l == 0 ? x0 : x_[l - 1].data();
    // x_{l+1} = x_l + x0 * h_l: dh = x0 * g, d_x0 += h_l * g, d_x_l = g + dh W.
    be->Mul(n, x0, g, dh_.data(), /*accumulate=*/false);
    be->Mul(n, h_[l].data(), g, d_x0_.data(), /*accumulate=*/true);
    if (c.full) {
      c.full->Backward(be, batch, x_in, dh_.data(), next);
    } else {
      c.u->Backward(be, batch, v_[l].data(), dh_.data(), dv_.data());
      c.v->Backward(be, batch, x_in, dv_.data(), next);
    }
    be->Axpy(n, 1.0f, g, next);
    std::swap(g, next);  // g = d x_l
  }
  be->Axpy(n, 1.0f, g, d_x0_.data());  // x_0 is also the first layer's input
  input_.Backward(be, batch, dense, d_x0_.data(), d_pooled);
}

}  // namespace tandem::model
