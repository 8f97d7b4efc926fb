#include "worker/model/dlrm.h"

#include <algorithm>
#include <utility>

namespace tandem::model {
namespace {

Status ValidateShape(const ModelConfig& config, const DlrmInputs& in) {
  if (in.num_dense < 1) return Status::InvalidArgument("dlrm: num_dense must be >= 1");
  if (in.dims.empty()) return Status::InvalidArgument("dlrm: num_tables must be >= 1");
  for (int64_t d : in.dims) {
    if (d < 1) return Status::InvalidArgument("dlrm: embedding_dim must be >= 1");
  }
  if (!in.mean.empty() && in.mean.size() != in.dims.size()) {
    return Status::InvalidArgument("dlrm: one pooling per feature");
  }
  if (in.num_labels < 1 ||
      (!in.loss_weights.empty() && static_cast<int64_t>(in.loss_weights.size()) != in.num_labels)) {
    return Status::InvalidArgument("dlrm: num_labels >= 1 with one loss weight each");
  }
  if (config.bottom_mlp.empty() || config.top_mlp.empty()) {
    return Status::InvalidArgument("dlrm: bottom_mlp and top_mlp must be non-empty");
  }
  for (const auto* sizes : {&config.bottom_mlp, &config.top_mlp}) {
    for (int64_t size : *sizes) {
      if (size < 1) return Status::InvalidArgument("dlrm: MLP layer sizes must be >= 1");
    }
  }
  if (config.top_mlp.back() != in.num_labels) {
    return Status::InvalidArgument("dlrm: the last top_mlp size must be num_labels (a logit each)");
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

DlrmInputs DlrmInputs::Uniform(int64_t num_dense, int64_t num_features, int64_t dim) {
  DlrmInputs in;
  in.num_dense = num_dense;
  in.dims.assign(static_cast<size_t>(std::max<int64_t>(num_features, 0)), dim);
  return in;
}

StatusOr<std::unique_ptr<Dlrm>> Dlrm::Create(const ModelConfig& config, int64_t num_dense,
                                             int64_t num_tables, uint64_t seed, Backend* backend) {
  if (num_tables < 1) return Status::InvalidArgument("dlrm: num_tables must be >= 1");
  // One width for every table: dot needs the bottom MLP to end in it (no projections here).
  if (config.interaction == "dot" && !config.bottom_mlp.empty() &&
      config.bottom_mlp.back() != config.embedding_dim) {
    return Status::InvalidArgument(
        "dot interaction: the last bottom_mlp size (" + std::to_string(config.bottom_mlp.back()) +
        ") must equal embedding_dim (" + std::to_string(config.embedding_dim) + ")");
  }
  return Create(config, DlrmInputs::Uniform(num_dense, num_tables, config.embedding_dim), seed,
                backend);
}

StatusOr<std::unique_ptr<Dlrm>> Dlrm::Create(const ModelConfig& config, const DlrmInputs& inputs,
                                             uint64_t seed, Backend* backend) {
  if (backend == nullptr) return Status::InvalidArgument("dlrm: null backend");
  TANDEM_RETURN_IF_ERROR(ValidateShape(config, inputs));
  // Dot needs one width: features of another width are projected to the bottom MLP's.
  std::vector<int64_t> inter_dims = inputs.dims;
  if (config.interaction == "dot") inter_dims.assign(inputs.dims.size(), config.bottom_mlp.back());
  TANDEM_ASSIGN_OR_RETURN(
      std::unique_ptr<Interaction> interaction,
      MakeInteraction(config.interaction, config.bottom_mlp.back(), inter_dims));
  std::unique_ptr<Dlrm> model(new Dlrm(config, inputs, std::move(interaction), backend));
  model->Initialize(seed);
  return model;
}

Dlrm::Dlrm(const ModelConfig& config, const DlrmInputs& inputs,
           std::unique_ptr<Interaction> interaction, Backend* backend)
    : backend_(backend),
      num_dense_(inputs.num_dense),
      num_tables_(static_cast<int64_t>(inputs.dims.size())),
      inputs_(inputs),
      bottom_(inputs.num_dense, config.bottom_mlp, /*relu_last=*/true),
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
  BuildLayout();
}

void Dlrm::BuildLayout() {
  int64_t total = bottom_.num_params() + top_.num_params();
  for (const auto& p : proj_) total += p ? p->num_params() : 0;
  params_.assign(static_cast<size_t>(total), 0.0f);
  grads_.assign(static_cast<size_t>(total), 0.0f);
  float* params = params_.data();
  float* grads = grads_.data();
  if (!backend_->host_memory()) {
    dev_params_.Reset(backend_, total);
    dev_grads_.Reset(backend_, total + kGradBucketTail);
    params = dev_params_.data();
    grads = dev_grads_.data();
  }
  bottom_.Bind(params, grads);
  top_.Bind(params + bottom_.num_params(), grads + bottom_.num_params());
  int64_t at = bottom_.num_params() + top_.num_params();
  for (auto& p : proj_) {
    if (!p) continue;
    p->Bind(params + at, grads + at);
    at += p->num_params();
  }
  int64_t offset = 0;
  AppendLayerInfo("bottom_mlp", bottom_, &offset, &param_info_);
  AppendLayerInfo("top_mlp", top_, &offset, &param_info_);
  for (size_t f = 0; f < proj_.size(); ++f) {
    if (proj_[f]) AppendLayerInfo("proj." + std::to_string(f), *proj_[f], &offset, &param_info_);
  }
}

void Dlrm::Initialize(uint64_t seed) {
  bottom_.Init(seed, 0, params_.data());
  auto layer = static_cast<uint32_t>(bottom_.layers().size());
  top_.Init(seed, layer, params_.data() + bottom_.num_params());
  layer += static_cast<uint32_t>(top_.layers().size());
  int64_t at = bottom_.num_params() + top_.num_params();
  for (const auto& p : proj_) {
    if (!p) continue;
    p->Init(seed, layer++, params_.data() + at);
    at += p->num_params();
  }
}

void Dlrm::Reserve(int64_t batch) {
  if (batch <= capacity_) return;
  const int64_t width = batch * interaction_->output_width();
  inter_out_.Reset(backend_, width);
  d_inter_.Reset(backend_, width);
  d_bottom_.Reset(backend_, batch * bottom_.out());
  d_logits_.Reset(backend_, batch * inputs_.num_labels);
  for (size_t f = 0; f < proj_.size(); ++f) {
    if (proj_[f]) d_proj_out_[f].Reset(backend_, batch * proj_[f]->out());
  }
  if (inputs_.num_labels > 1) {
    task_logits_.Reset(backend_, batch);
    task_labels_.Reset(backend_, batch);
    task_d_.Reset(backend_, batch);
  }
  capacity_ = batch;
}

void Dlrm::SyncParams() {
  if (backend_->host_memory() || !params_dirty_) return;
  backend_->CopyToDevice(dev_params_.data(), params_.data(), params_.size() * sizeof(float));
  params_dirty_ = false;
}

void Dlrm::SetPrecision(device::Precision precision) {
  bottom_.SetPrecision(precision, /*keep_last_fp32=*/false);
  top_.SetPrecision(precision, /*keep_last_fp32=*/true);
  for (auto& p : proj_) {
    if (p) p->SetPrecision(precision, /*keep_last_fp32=*/false);
  }
}

const float* Dlrm::ForwardLogits(int64_t batch, const float* dense, const float* const* pooled) {
  SyncParams();
  Reserve(batch);
  const float* bottom_out = bottom_.Forward(backend_, batch, dense);
  inter_in_.resize(proj_.size());
  for (size_t f = 0; f < proj_.size(); ++f) {
    inter_in_[f] = proj_[f] ? proj_[f]->Forward(backend_, batch, pooled[f]) : pooled[f];
  }
  interaction_->Forward(backend_, batch, bottom_out, inter_in_.data(), inter_out_.data());
  return top_.Forward(backend_, batch, inter_out_.data());
}

float Dlrm::ForwardBackward(int64_t batch, const float* dense, const float* const* pooled,
                            const float* labels, const float* weights, float normaliser,
                            float* const* d_pooled) {
  const float* logits = ForwardLogits(batch, dense, pooled);
  const float loss = Loss(batch, logits, labels, weights, normaliser);
  if (loss_scale_ != 1.0f)
    backend_->Scale(batch * inputs_.num_labels, loss_scale_, d_logits_.data());
  top_.Backward(backend_, batch, inter_out_.data(), d_logits_.data(), d_inter_.data());
  inter_d_.resize(proj_.size());
  for (size_t f = 0; f < proj_.size(); ++f) {
    inter_d_[f] = proj_[f] ? d_proj_out_[f].data() : d_pooled[f];
  }
  interaction_->Backward(backend_, batch, d_inter_.data(), d_bottom_.data(), inter_d_.data());
  for (size_t f = 0; f < proj_.size(); ++f) {
    if (proj_[f])
      proj_[f]->Backward(backend_, batch, pooled[f], d_proj_out_[f].data(), d_pooled[f]);
  }
  bottom_.Backward(backend_, batch, dense, d_bottom_.data(), /*dx=*/nullptr);
  return loss;
}

float Dlrm::Loss(int64_t batch, const float* logits, const float* labels, const float* weights,
                 float normaliser) {
  const int64_t tasks = inputs_.num_labels;
  if (tasks == 1 && inputs_.loss_weights.empty()) {
    return BceWithLogitsLoss(backend_, batch, logits, labels, weights, normaliser,
                             d_logits_.data());
  }
  // Task by task on its own column, each in the backend's fixed order; the task weight divides
  // the normaliser, so it scales the loss and every gradient of that task.
  float loss = 0;
  for (int64_t k = 0; k < tasks; ++k) {
    const float w = inputs_.loss_weights.empty() ? 1.0f : inputs_.loss_weights[k];
    if (tasks == 1) {
      loss += BceWithLogitsLoss(backend_, batch, logits, labels, weights, normaliser / w,
                                d_logits_.data());
      continue;
    }
    backend_->CopyStrided(batch, 1, logits + k, tasks, task_logits_.data(), 1, false);
    backend_->CopyStrided(batch, 1, labels + k, tasks, task_labels_.data(), 1, false);
    loss += BceWithLogitsLoss(backend_, batch, task_logits_.data(), task_labels_.data(), weights,
                              normaliser / w, task_d_.data());
    backend_->CopyStrided(batch, 1, task_d_.data(), 1, d_logits_.data() + k, tasks, false);
  }
  return loss;
}

void Dlrm::Predict(int64_t batch, const float* dense, const float* const* pooled, float* probs) {
  const float* logits = ForwardLogits(batch, dense, pooled);
  Sigmoid::Forward(backend_, batch * inputs_.num_labels, logits, probs);
}

template <typename T>
const T* Dlrm::Stage(const T* host, int64_t n, device::Buffer<T>* buf) {
  if (backend_->host_memory() || host == nullptr) return host;
  buf->Reserve(backend_, std::max<int64_t>(n, 1));
  if (n > 0) backend_->CopyToDevice(buf->data(), host, static_cast<size_t>(n) * sizeof(T));
  return buf->data();
}

void Dlrm::StageAndPool(const HostBatch& in) {
  const auto tables = static_cast<size_t>(num_tables_);
  rows_in_.resize(tables);
  pooled_.resize(tables);
  d_pooled_.resize(tables);
  d_rows_.resize(tables);
  offsets_in_.resize(tables);
  inverse_in_.resize(tables);
  pooled_ptrs_.resize(tables);
  d_pooled_ptrs_.resize(tables);
  staged_offsets_.resize(tables);
  staged_inverse_.resize(tables);
  staged_rows_.resize(tables);
  id_weights_in_.resize(tables);
  staged_weights_.resize(tables);
  for (size_t t = 0; t < tables; ++t) {
    const int64_t dim = inputs_.dims[t];
    const int64_t lookups = in.offsets[t][in.batch];
    // Features sharing a table share its rows: stage them once.
    const float* rows = nullptr;
    for (size_t u = 0; u < t && !rows; ++u) {
      if (in.rows[u] == in.rows[t] && in.rows[t] != nullptr) rows = staged_rows_[u];
    }
    if (!rows) rows = Stage(in.rows[t], in.num_unique[t] * dim, &rows_in_[t]);
    staged_rows_[t] = rows;
    const int64_t* offsets = Stage(in.offsets[t], in.batch + 1, &offsets_in_[t]);
    const int64_t* inverse = Stage(in.inverse[t], lookups, &inverse_in_[t]);
    const float* weights = in.id_weights.empty() || in.id_weights[t] == nullptr
                               ? nullptr
                               : Stage(in.id_weights[t], lookups, &id_weights_in_[t]);
    staged_weights_[t] = weights;
    pooled_[t].Reserve(backend_, std::max<int64_t>(in.batch * dim, 1));
    d_pooled_[t].Reserve(backend_, std::max<int64_t>(in.batch * dim, 1));
    backend_->EmbeddingBagForward(in.batch, dim, rows, offsets, inverse, weights, mean(t),
                                  pooled_[t].data());
    pooled_ptrs_[t] = pooled_[t].data();
    staged_offsets_[t] = offsets;
    staged_inverse_[t] = inverse;
    d_pooled_ptrs_[t] = d_pooled_[t].data();
  }
}

float Dlrm::TrainStep(const HostBatch& in, float normaliser, float loss_scale, float* const* d_rows,
                      bool grads_to_host) {
  const float* dense = Stage(in.dense, in.batch * num_dense_, &dense_in_);
  const float* labels = Stage(in.labels, in.batch * inputs_.num_labels, &labels_in_);
  const float* weights = Stage(in.weights, in.batch, &weights_in_);
  StageAndPool(in);
  loss_scale_ = loss_scale;
  const float loss = ForwardBackward(in.batch, dense, pooled_ptrs_.data(), labels, weights,
                                     normaliser, d_pooled_ptrs_.data());
  loss_scale_ = 1.0f;
  for (size_t t = 0; t < static_cast<size_t>(num_tables_); ++t) {
    const int64_t dim = inputs_.dims[t];
    const int64_t n = in.num_unique[t] * dim;
    float* out = d_rows[t];
    if (!backend_->host_memory()) {
      d_rows_[t].Reserve(backend_, std::max<int64_t>(n, 1));
      out = d_rows_[t].data();
    }
    backend_->EmbeddingBagBackward(in.batch, dim, in.num_unique[t], d_pooled_ptrs_[t],
                                   staged_offsets_[t], staged_inverse_[t], staged_weights_[t],
                                   mean(t), out);
    if (!backend_->host_memory() && n > 0) {
      backend_->CopyToHost(d_rows[t], out, static_cast<size_t>(n) * sizeof(float));
    }
  }
  if (grads_to_host && !backend_->host_memory()) {
    backend_->CopyToHost(grads_.data(), dev_grads_.data(), grads_.size() * sizeof(float));
  }
  return loss;
}

void Dlrm::PredictStep(const HostBatch& in, float* probs) {
  const float* dense = Stage(in.dense, in.batch * num_dense_, &dense_in_);
  StageAndPool(in);
  if (backend_->host_memory()) return Predict(in.batch, dense, pooled_ptrs_.data(), probs);
  probs_.Reserve(backend_, in.batch * inputs_.num_labels);
  Predict(in.batch, dense, pooled_ptrs_.data(), probs_.data());
  backend_->CopyToHost(probs, probs_.data(),
                       static_cast<size_t>(in.batch * inputs_.num_labels) * sizeof(float));
}

float* Dlrm::device_grad_bucket() { return dev_grads_.data(); }

void Dlrm::SetGradBucketTail(std::span<const float> values) {
  if (backend_->host_memory() || values.empty()) return;
  const size_t n = std::min(values.size(), static_cast<size_t>(kGradBucketTail));
  backend_->CopyToDevice(dev_grads_.data() + grads_.size(), values.data(), n * sizeof(float));
}

void Dlrm::DownloadGradBucket(int64_t count, float* out) {
  if (backend_->host_memory()) return;
  backend_->CopyToHost(out, dev_grads_.data(), static_cast<size_t>(count) * sizeof(float));
  std::copy_n(out, grads_.size(), grads_.data());
}

}  // namespace tandem::model
