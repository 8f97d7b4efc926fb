#include "worker/model/dlrm.h"

#include <utility>

namespace tandem::model {
namespace {

Status ValidateShape(const ModelConfig& config, int64_t num_dense, int64_t num_tables) {
  if (num_dense < 1) return Status::InvalidArgument("dlrm: num_dense must be >= 1");
  if (num_tables < 1) return Status::InvalidArgument("dlrm: num_tables must be >= 1");
  if (config.embedding_dim < 1) return Status::InvalidArgument("dlrm: embedding_dim must be >= 1");
  if (config.bottom_mlp.empty() || config.top_mlp.empty()) {
    return Status::InvalidArgument("dlrm: bottom_mlp and top_mlp must be non-empty");
  }
  for (const auto* sizes : {&config.bottom_mlp, &config.top_mlp}) {
    for (int64_t size : *sizes) {
      if (size < 1) return Status::InvalidArgument("dlrm: MLP layer sizes must be >= 1");
    }
  }
  if (config.top_mlp.back() != 1) {
    return Status::InvalidArgument("dlrm: the last top_mlp size must be 1 (one logit)");
  }
  return Status::Ok();
}

void AppendLayerInfo(const std::string& prefix, const Mlp& mlp, int64_t* offset,
                     std::vector<ParamInfo>* info) {
  for (size_t l = 0; l < mlp.layers().size(); ++l) {
    const Linear& layer = mlp.layers()[l];
    const std::string name = prefix + "." + std::to_string(l);
    info->push_back(
        {name + ".weight", {layer.out(), layer.in()}, *offset, layer.out() * layer.in()});
    *offset += layer.out() * layer.in();
    info->push_back({name + ".bias", {layer.out()}, *offset, layer.out()});
    *offset += layer.out();
  }
}

}  // namespace

StatusOr<std::unique_ptr<Dlrm>> Dlrm::Create(const ModelConfig& config, int64_t num_dense,
                                             int64_t num_tables, uint64_t seed, Backend* backend) {
  if (backend == nullptr) return Status::InvalidArgument("dlrm: null backend");
  TANDEM_RETURN_IF_ERROR(ValidateShape(config, num_dense, num_tables));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Interaction> interaction,
                          MakeInteraction(config.interaction, config.bottom_mlp.back(), num_tables,
                                          config.embedding_dim));
  std::unique_ptr<Dlrm> model(
      new Dlrm(config, num_dense, num_tables, std::move(interaction), backend));
  model->Initialize(seed);
  return model;
}

Dlrm::Dlrm(const ModelConfig& config, int64_t num_dense, int64_t num_tables,
           std::unique_ptr<Interaction> interaction, Backend* backend)
    : backend_(backend),
      num_dense_(num_dense),
      num_tables_(num_tables),
      dim_(config.embedding_dim),
      bottom_(num_dense, config.bottom_mlp, /*relu_last=*/true),
      interaction_(std::move(interaction)),
      top_(interaction_->output_width(), config.top_mlp, /*relu_last=*/false) {
  BuildLayout();
}

void Dlrm::BuildLayout() {
  const int64_t total = bottom_.num_params() + top_.num_params();
  params_.assign(static_cast<size_t>(total), 0.0f);
  grads_.assign(static_cast<size_t>(total), 0.0f);
  bottom_.Bind(params_.data(), grads_.data());
  top_.Bind(params_.data() + bottom_.num_params(), grads_.data() + bottom_.num_params());
  int64_t offset = 0;
  AppendLayerInfo("bottom_mlp", bottom_, &offset, &param_info_);
  AppendLayerInfo("top_mlp", top_, &offset, &param_info_);
}

void Dlrm::Initialize(uint64_t seed) {
  bottom_.Init(seed, 0, params_.data());
  top_.Init(seed, static_cast<uint32_t>(bottom_.layers().size()),
            params_.data() + bottom_.num_params());
}

void Dlrm::Reserve(int64_t batch) {
  if (batch <= capacity_) return;
  const auto width = static_cast<size_t>(batch * interaction_->output_width());
  inter_out_.resize(width);
  d_inter_.resize(width);
  d_bottom_.resize(static_cast<size_t>(batch * bottom_.out()));
  d_logits_.resize(static_cast<size_t>(batch));
  capacity_ = batch;
}

const float* Dlrm::ForwardLogits(int64_t batch, const float* dense, const float* const* pooled) {
  Reserve(batch);
  const float* bottom_out = bottom_.Forward(backend_, batch, dense);
  interaction_->Forward(backend_, batch, bottom_out, pooled, inter_out_.data());
  return top_.Forward(backend_, batch, inter_out_.data());
}

float Dlrm::ForwardBackward(int64_t batch, const float* dense, const float* const* pooled,
                            const float* labels, const float* weights, float normaliser,
                            float* const* d_pooled) {
  const float* logits = ForwardLogits(batch, dense, pooled);
  const float loss =
      BceWithLogitsLoss(backend_, batch, logits, labels, weights, normaliser, d_logits_.data());
  top_.Backward(backend_, batch, inter_out_.data(), d_logits_.data(), d_inter_.data());
  interaction_->Backward(backend_, batch, d_inter_.data(), d_bottom_.data(), d_pooled);
  bottom_.Backward(backend_, batch, dense, d_bottom_.data(), /*dx=*/nullptr);
  return loss;
}

void Dlrm::Predict(int64_t batch, const float* dense, const float* const* pooled, float* probs) {
  const float* logits = ForwardLogits(batch, dense, pooled);
  Sigmoid::Forward(backend_, batch, logits, probs);
}

}  // namespace tandem::model
