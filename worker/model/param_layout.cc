#include <algorithm>

#include "worker/model/network.h"

namespace tandem::model {

ModelInputs ModelInputs::Uniform(int64_t num_dense, int64_t num_features, int64_t dim) {
  ModelInputs in;
  in.num_dense = num_dense;
  in.dims.assign(static_cast<size_t>(num_features > 0 ? num_features : 0), dim);
  return in;
}

int64_t ParamLayout::num_params() const {
  int64_t total = 0;
  for (const Block& b : blocks_) total += b.mlp ? b.mlp->num_params() : b.linear->num_params();
  return total;
}

void ParamLayout::Bind(float* params, float* grads) {
  for (Block& b : blocks_) {
    const int64_t n = b.mlp ? b.mlp->num_params() : b.linear->num_params();
    if (b.mlp) {
      b.mlp->Bind(params, grads);
    } else {
      b.linear->Bind(params, grads);
    }
    params += n;
    grads += n;
  }
}

void ParamLayout::Init(uint64_t seed, float* params) const {
  uint32_t layer = 0;
  for (const Block& b : blocks_) {
    if (b.mlp) {
      b.mlp->Init(seed, layer, params);
      layer += static_cast<uint32_t>(b.mlp->layers().size());
      params += b.mlp->num_params();
      continue;
    }
    const Linear& l = *b.linear;
    InitGlorotUniform(seed, layer++, l.in(), l.out(), params);
    std::fill_n(params + l.in() * l.out(), l.out(), 0.0f);
    params += l.num_params();
  }
}

namespace {
void AppendLinear(const std::string& name, const Linear& l, int64_t* offset,
                  std::vector<ParamInfo>* info) {
  info->push_back({name + ".weight", {l.out(), l.in()}, *offset, l.out() * l.in()});
  *offset += l.out() * l.in();
  info->push_back({name + ".bias", {l.out()}, *offset, l.out()});
  *offset += l.out();
}
}  // namespace

std::vector<ParamInfo> ParamLayout::Info() const {
  std::vector<ParamInfo> info;
  int64_t offset = 0;
  for (const Block& b : blocks_) {
    if (!b.mlp) {
      AppendLinear(b.name, *b.linear, &offset, &info);
      continue;
    }
    for (size_t l = 0; l < b.mlp->layers().size(); ++l) {
      AppendLinear(b.name + "." + std::to_string(l), b.mlp->layers()[l], &offset, &info);
    }
  }
  return info;
}

}  // namespace tandem::model
