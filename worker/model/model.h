// A model's dense part on a device (DESIGN §2): pooling of the pulled embedding rows, a Network
// (dlrm.h, dcn_v2.h, deepfm.h, wide_deep.h, mmoe.h; chosen by model.type in
// network_factory.h), and one BCE-with-logits per label. Embeddings live on the PS; the model
// takes the unique rows of a batch and returns their gradients (embedding_bag.h).
//
// Flat layout: params() and grads() are one contiguous float buffer each, holding the network's
// blocks in its ParamLayout order (network.h); a pure function of the config, so gradient
// buckets are too (PROTOCOLS §5.5).
//
// Memory: params() and grads() are host memory, the fp32 master copy that the optimizer,
// checkpoints and checksums use. On a backend whose memory is the host's (CPU) the layers
// compute in them directly. On a device (CUDA) the layers compute in device copies: a mutable
// params() marks the device copy stale and the next forward uploads it; the device gradients
// come back to grads() at the end of TrainStep, or are all-reduced on the device first
// (device_grad_bucket). Workspaces live in the backend's memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/device/backend.h"
#include "worker/device/buffer.h"
#include "worker/model/network.h"

namespace tandem::model {

using config::ModelConfig;
using device::Backend;

// One batch in host memory for TrainStep / PredictStep: the embedding rows arrive as the
// unique rows of each feature's table (as pulled; features sharing a table point at the same
// rows) and are pooled on the backend (embedding_bag.h).
struct HostBatch {
  int64_t batch = 0;
  const float* dense = nullptr;    // batch x num_dense
  const float* labels = nullptr;   // batch x num_labels (TrainStep only)
  const float* weights = nullptr;  // batch, or null for all 1
  // Per feature:
  std::vector<const float*> rows;        // num_unique[f] x dims[f]
  std::vector<int64_t> num_unique;       //
  std::vector<const int64_t*> offsets;   // batch + 1: sample s looks up [offsets[s], offsets[s+1])
  std::vector<const int64_t*> inverse;   // offsets[batch] indexes into the table's unique rows
  std::vector<const float*> id_weights;  // offsets[batch] per-id weights, or null (all 1)
};

// Floats after the gradients in device_grad_bucket(): room for the values the trainer reduces
// together with them (loss, votes, overflow flag).
inline constexpr int64_t kGradBucketTail = 8;

// Thread-safety: requires external synchronization. Non-copyable (owns workspaces).
class Model {
 public:
  // The Criteo shape: num_tables features of width embedding_dim, one label. InvalidArgument
  // for an inconsistent shape (see the other Create), or, for DLRM's dot, a bottom_mlp that
  // does not end in embedding_dim. `backend` must outlive the model.
  static StatusOr<std::unique_ptr<Model>> Create(const ModelConfig& config, int64_t num_dense,
                                                 int64_t num_tables, uint64_t seed,
                                                 Backend* backend);
  // Any feature widths, poolings and labels. InvalidArgument for num_dense < 1, no feature, a
  // width < 1, an empty bottom_mlp or top_mlp, a size < 1, a last top_mlp size other than
  // num_labels, or what model.type's network refuses (network_factory.h).
  static StatusOr<std::unique_ptr<Model>> Create(const ModelConfig& config,
                                                 const ModelInputs& inputs, uint64_t seed,
                                                 Backend* backend);

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // One training forward+backward on a batch: dense is batch x num_dense, pooled[f] is
  // batch x dims[f], labels batch x num_labels, weights batch entries (null = all 1). Overwrites
  // grads() and every d_pooled[f] with gradients of the returned loss,
  // sum over tasks k of loss_weight_k * sum_i w_i * bce_ik / normaliser (normaliser = nominal
  // global batch, DESIGN §2).
  float ForwardBackward(int64_t batch, const float* dense, const float* const* pooled,
                        const float* labels, const float* weights, float normaliser,
                        float* const* d_pooled);

  // Probabilities (batch x num_labels) for a batch; does not touch grads().
  void Predict(int64_t batch, const float* dense, const float* const* pooled, float* probs);

  // ForwardBackward and Predict above take backend memory (host memory on the CPU backend).
  // The step functions below take host memory on every backend.

  // A training forward+backward on host inputs: pools the rows, and writes each feature's per-row
  // gradients (num_unique[f] x dims[f], host) to d_rows[f], summed in lookup (= sample) order. The
  // loss gradient is multiplied by loss_scale (fp16 loss scaling; 1 otherwise), so every
  // gradient is scaled by it; the returned loss is not. Dense gradients go to grads() when
  // grads_to_host, else they stay in device_grad_bucket() (a device all-reduce; then
  // DownloadGradBucket). Check backend status() after it.
  float TrainStep(const HostBatch& in, float normaliser, float loss_scale, float* const* d_rows,
                  bool grads_to_host);
  // Probabilities (host, batch x num_labels) on host inputs.
  void PredictStep(const HostBatch& in, float* probs);
  // The device gradients, followed by kGradBucketTail spare floats (device memory; on a
  // host-memory backend, null: grads() is the gradient buffer).
  float* device_grad_bucket();
  // Writes `values` (at most kGradBucketTail) after the gradients in device_grad_bucket().
  void SetGradBucketTail(std::span<const float> values);
  // Copies the first `count` floats of device_grad_bucket() to `out` (host), and the gradients
  // into grads().
  void DownloadGradBucket(int64_t count, float* out);
  // GEMM inputs of every layer at `precision` except the output layers' (kept fp32, DESIGN §8).
  void SetPrecision(device::Precision precision) { network_->SetPrecision(precision); }

  std::span<float> params() {
    params_dirty_ = true;  // the caller may write: the device copy is stale
    return params_;
  }
  std::span<const float> params() const { return params_; }
  std::span<float> grads() { return grads_; }
  std::span<const float> grads() const { return grads_; }
  const std::vector<ParamInfo>& param_info() const { return param_info_; }
  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }
  int64_t num_dense() const { return inputs_.num_dense; }
  int64_t num_tables() const { return static_cast<int64_t>(inputs_.dims.size()); }  // features
  int64_t num_labels() const { return inputs_.num_labels; }
  const std::vector<int64_t>& dims() const { return inputs_.dims; }

 private:
  Model(const ModelInputs& inputs, std::unique_ptr<Network> network, Backend* backend);
  // The loss over every task from logits (batch x num_labels); writes d_logits_.
  float Loss(int64_t batch, const float* logits, const float* labels, const float* weights,
             float normaliser);

  void BuildLayout();
  void Reserve(int64_t batch);
  // Uploads params() to the device copy when a mutable params() call may have changed them.
  void SyncParams();
  // Uploads a HostBatch (or points at it on a host-memory backend) and pools it into pooled_.
  void StageAndPool(const HostBatch& in);
  // Host data for the backend: the pointer itself on a host-memory backend, else a copy in buf.
  template <typename T>
  const T* Stage(const T* host, int64_t n, device::Buffer<T>* buf);
  bool mean(size_t f) const { return !inputs_.mean.empty() && inputs_.mean[f]; }

  Backend* backend_;
  ModelInputs inputs_;
  std::unique_ptr<Network> network_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<ParamInfo> param_info_;
  int64_t capacity_ = 0;
  device::Buffer<float> d_logits_;                            // batch x num_labels
  device::Buffer<float> task_logits_, task_labels_, task_d_;  // batch: one task's column
  device::Buffer<float> probs_;  // batch x num_labels (PredictStep on a device)
  // Device copies of params_ and grads_ (+ the bucket tail); empty on a host-memory backend.
  device::Buffer<float> dev_params_;
  device::Buffer<float> dev_grads_;
  bool params_dirty_ = true;
  float loss_scale_ = 1.0f;  // multiplies the loss gradient inside TrainStep
  // TrainStep/PredictStep staging, per feature.
  device::Buffer<float> dense_in_, labels_in_, weights_in_;
  std::vector<device::Buffer<float>> rows_in_, pooled_, d_pooled_, d_rows_;
  std::vector<device::Buffer<int64_t>> offsets_in_, inverse_in_;
  std::vector<const float*> pooled_ptrs_;
  std::vector<float*> d_pooled_ptrs_;
  std::vector<const int64_t*> staged_offsets_, staged_inverse_;  // backend memory
  std::vector<device::Buffer<float>> id_weights_in_;
  std::vector<const float*> staged_weights_;
  std::vector<const float*> staged_rows_;
};

}  // namespace tandem::model
