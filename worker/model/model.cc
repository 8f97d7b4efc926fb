#include "worker/model/model.h"

#include <algorithm>
#include <utility>

#include "worker/model/network_factory.h"

namespace tandem::model {
namespace {

Status ValidateShape(const ModelConfig& config, const ModelInputs& in) {
  if (in.num_dense < 1) return Status::InvalidArgument("model: num_dense must be >= 1");
  if (in.num_fields() < 1 || in.num_wide < 0)
    return Status::InvalidArgument("model: num_tables must be >= 1");
  for (int64_t d : in.dims) {
    if (d < 1) return Status::InvalidArgument("model: embedding_dim must be >= 1");
  }
  if (!in.mean.empty() && in.mean.size() != in.dims.size()) {
    return Status::InvalidArgument("model: one pooling per feature");
  }
  if (in.num_labels < 1 ||
      (!in.loss_weights.empty() && static_cast<int64_t>(in.loss_weights.size()) != in.num_labels)) {
    return Status::InvalidArgument("model: num_labels >= 1 with one loss weight each");
  }
  if (config.bottom_mlp.empty() || config.top_mlp.empty()) {
    return Status::InvalidArgument("model: bottom_mlp and top_mlp must be non-empty");
  }
  for (const auto* sizes : {&config.bottom_mlp, &config.top_mlp}) {
    for (int64_t size : *sizes) {
      if (size < 1) return Status::InvalidArgument("model: MLP layer sizes must be >= 1");
    }
  }
  if (config.top_mlp.back() != in.num_labels) {
    return Status::InvalidArgument(
        "model: the last top_mlp size must be num_labels (a logit each)");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config, int64_t num_dense,
                                               int64_t num_tables, uint64_t seed,
                                               Backend* backend) {
  if (num_tables < 1) return Status::InvalidArgument("model: num_tables must be >= 1");
  // One width for every table: DLRM's dot needs the bottom MLP to end in it (no projections).
  if (config.type == "dlrm" && config.interaction == "dot" && !config.bottom_mlp.empty() &&
      config.bottom_mlp.back() != config.embedding_dim) {
    return Status::InvalidArgument(
        "dot interaction: the last bottom_mlp size (" + std::to_string(config.bottom_mlp.back()) +
        ") must equal embedding_dim (" + std::to_string(config.embedding_dim) + ")");
  }
  return Create(config, ModelInputs::Uniform(num_dense, num_tables, config.embedding_dim), seed,
                backend);
}

StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config, const ModelInputs& inputs,
                                               uint64_t seed, Backend* backend) {
  if (backend == nullptr) return Status::InvalidArgument("model: null backend");
  TANDEM_RETURN_IF_ERROR(ValidateShape(config, inputs));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Network> network, MakeNetwork(config, inputs));
  std::unique_ptr<Model> model(new Model(inputs, std::move(network), backend));
  model->network_->layout().Init(seed, model->params_.data());
  return model;
}

Model::Model(const ModelInputs& inputs, std::unique_ptr<Network> network, Backend* backend)
    : backend_(backend), inputs_(inputs), network_(std::move(network)) {
  BuildLayout();
}

void Model::BuildLayout() {
  ParamLayout& layout = network_->layout();
  const int64_t total = layout.num_params();
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
  layout.Bind(params, grads);
  param_info_ = layout.Info();
}

void Model::Reserve(int64_t batch) {
  if (batch <= capacity_) return;
  d_logits_.Reset(backend_, batch * inputs_.num_labels);
  if (inputs_.num_labels > 1) {
    task_logits_.Reset(backend_, batch);
    task_labels_.Reset(backend_, batch);
    task_d_.Reset(backend_, batch);
  }
  capacity_ = batch;
}

void Model::SyncParams() {
  if (backend_->host_memory() || !params_dirty_) return;
  backend_->CopyToDevice(dev_params_.data(), params_.data(), params_.size() * sizeof(float));
  params_dirty_ = false;
}

float Model::ForwardBackward(int64_t batch, const float* dense, const float* const* pooled,
                             const float* labels, const float* weights, float normaliser,
                             float* const* d_pooled) {
  SyncParams();
  Reserve(batch);
  const float* logits = network_->Forward(backend_, batch, dense, pooled);
  const float loss = Loss(batch, logits, labels, weights, normaliser);
  if (loss_scale_ != 1.0f)
    backend_->Scale(batch * inputs_.num_labels, loss_scale_, d_logits_.data());
  network_->Backward(backend_, batch, dense, pooled, d_logits_.data(), d_pooled);
  return loss;
}

float Model::Loss(int64_t batch, const float* logits, const float* labels, const float* weights,
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

void Model::Predict(int64_t batch, const float* dense, const float* const* pooled, float* probs) {
  SyncParams();
  Reserve(batch);
  const float* logits = network_->Forward(backend_, batch, dense, pooled);
  Sigmoid::Forward(backend_, batch * inputs_.num_labels, logits, probs);
}

template <typename T>
const T* Model::Stage(const T* host, int64_t n, device::Buffer<T>* buf) {
  if (backend_->host_memory() || host == nullptr) return host;
  buf->Reserve(backend_, std::max<int64_t>(n, 1));
  if (n > 0) backend_->CopyToDevice(buf->data(), host, static_cast<size_t>(n) * sizeof(T));
  return buf->data();
}

void Model::StageAndPool(const HostBatch& in) {
  const auto tables = inputs_.dims.size();
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

float Model::TrainStep(const HostBatch& in, float normaliser, float loss_scale,
                       float* const* d_rows, bool grads_to_host) {
  const float* dense = Stage(in.dense, in.batch * inputs_.num_dense, &dense_in_);
  const float* labels = Stage(in.labels, in.batch * inputs_.num_labels, &labels_in_);
  const float* weights = Stage(in.weights, in.batch, &weights_in_);
  StageAndPool(in);
  loss_scale_ = loss_scale;
  const float loss = ForwardBackward(in.batch, dense, pooled_ptrs_.data(), labels, weights,
                                     normaliser, d_pooled_ptrs_.data());
  loss_scale_ = 1.0f;
  for (size_t t = 0; t < inputs_.dims.size(); ++t) {
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

void Model::PredictStep(const HostBatch& in, float* probs) {
  const float* dense = Stage(in.dense, in.batch * inputs_.num_dense, &dense_in_);
  StageAndPool(in);
  if (backend_->host_memory()) return Predict(in.batch, dense, pooled_ptrs_.data(), probs);
  probs_.Reserve(backend_, in.batch * inputs_.num_labels);
  Predict(in.batch, dense, pooled_ptrs_.data(), probs_.data());
  backend_->CopyToHost(probs, probs_.data(),
                       static_cast<size_t>(in.batch * inputs_.num_labels) * sizeof(float));
}

float* Model::device_grad_bucket() { return dev_grads_.data(); }

void Model::SetGradBucketTail(std::span<const float> values) {
  if (backend_->host_memory() || values.empty()) return;
  const size_t n = std::min(values.size(), static_cast<size_t>(kGradBucketTail));
  backend_->CopyToDevice(dev_grads_.data() + grads_.size(), values.data(), n * sizeof(float));
}

void Model::DownloadGradBucket(int64_t count, float* out) {
  if (backend_->host_memory()) return;
  backend_->CopyToHost(out, dev_grads_.data(), static_cast<size_t>(count) * sizeof(float));
  std::copy_n(out, grads_.size(), grads_.data());
}

}  // namespace tandem::model
